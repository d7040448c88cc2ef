"""Which table real page damage is charged to decides whether the writer halts or only
detaches the search indexes (store/sqlite/fts_repair.py ``classify``, used by the writer when an FTS
slice meets corruption and by quick_check/integrity_check): damage in any table other than
the FTS indexes must be reported as ``canonical`` (the writer re-raises and halts); damage
confined to the FTS indexes and their shadow tables as ``fts`` only (detach, keep writing).

Every table comes from the schema registry (``store.schema.TABLES``), so a table added to
the schema is covered here without being named. Each case overwrites real pages of a real
store file (found with dbstat), on a copy of one store filled through the real spool and
apply path, so that every table holds rows."""

from __future__ import annotations

import base64
import os
import shutil
from pathlib import Path

import pytest
from semantics_helpers import Store

from quill.store import schema
from quill.store.sqlite.connection import open_reader, transaction
from quill.store.sqlite.fts_repair import classify

WORDS = ("aardvark", "bumblebee", "cormorant", "dromedary", "echidna", "flamingo", "gazelle")


def _image(i: int) -> str:
    return base64.b64encode(i.to_bytes(4, "big") * 600).decode()  # 2.4 KB: above MIN_BLOB_CHARS


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """A closed SQLite store with rows in every table of the registry; returns its file."""
    root = tmp_path_factory.mktemp("damage")
    store = Store(root)
    for s in range(60):
        sid = f"s{s}"
        tools = [{"name": f"tool{s}", "description": "x" * 300}]
        store.spool.append(
            "session.create",
            {"session_id": sid, "tools": tools, "system_prompt": f"prompt {s} " * 40},
        )
        msgs = [
            {
                "role": "user" if i % 2 else "assistant",
                "id": f"{sid}-{i}",
                "content": " ".join(WORDS[(i + k) % len(WORDS)] + str(i * k) for k in range(30)),
                "usage": {"prompt_tokens": i, "completion_tokens": 1},
                "response_id": f"r-{sid}-{i}",
            }
            for i in range(25)
        ]
        url = f"data:image/png;base64,{_image(s)}"
        msgs.append({"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]})
        store.spool.append("messages.append", {"session_id": sid, "messages": msgs})
    store.spool.append("sessions.delete", {"session_ids": [f"s{s}" for s in range(0, 60, 7)]})
    bad = {"session_id": "bad", "messages": "not a list"}
    store.spool.append("messages.append", bad)  # quarantined: a row in rejected_batches
    assert store.drain() != []  # the bad batch was rejected (rejected_batches has a row)
    store.index()
    with transaction(store.conn):  # job history as the job runner writes it
        store.conn.executemany(
            "INSERT INTO job_runs(job, started_at, ended_at, outcome, figures) "
            "VALUES (?, ?, ?, 'ok', '{}')",
            [(f"job{i}", i, i + 1) for i in range(200)],
        )
        # Rows as the cluster's claims and election write them (on PostgreSQL; SQLite has
        # the tables).
        store.conn.execute(
            "INSERT INTO spool_claims VALUES ('spool', 'token', 'host', '/path', 1, 1.0, 61.0)"
        )
        store.conn.execute(
            "INSERT INTO leader_lease VALUES ('scheduler', 'host:1:token', 1, 1.0, 1.0, 16.0)"
        )
    store.backend.close()
    store.spool.close()
    db = root / "state.db"
    conn = open_reader(db)
    try:
        empty = [
            t
            for t in schema.STORE_TABLES
            if not conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
        ]
        assert classify(conn) == {"canonical": [], "fts": []}
    finally:
        conn.close()
    assert not empty, f"the fixture left tables without rows: {empty}"
    return db


def _damage(db: Path, name: str) -> int:
    """Overwrite up to 3 pages from the middle of b-tree ``name`` (every page of a small one)
    with random bytes; returns how many pages were overwritten."""
    conn = open_reader(db)
    try:
        pages = [
            r[0]
            for r in conn.execute(
                "SELECT pageno FROM dbstat WHERE name = ? ORDER BY pageno", (name,)
            )
        ]
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    finally:
        conn.close()
    assert pages, f"{name} has no pages in the store file"
    chosen = pages[max(0, len(pages) // 2 - 1) :][:3]
    with open(db, "r+b") as f:
        for p in chosen:
            f.seek((p - 1) * page_size)
            f.write(os.urandom(page_size))
    return len(chosen)


def _classified(db: Path) -> dict[str, list[str]]:
    conn = open_reader(db)
    try:
        return classify(conn)
    finally:
        conn.close()


def _fts_shadow_tables(db: Path) -> list[tuple[str, str]]:
    """``(shadow table, FTS table)`` for every FTS5 shadow table holding pages in ``db``."""
    conn = open_reader(db)
    try:
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")]
    finally:
        conn.close()
    return [(n, fts) for fts in schema.FTS_TABLES for n in names if n.startswith(fts + "_")]


@pytest.mark.parametrize("table", schema.STORE_TABLES)
def test_damage_in_a_store_table_is_classified_canonical_so_the_writer_halts(
    pristine, tmp_path, table
):
    db = tmp_path / "state.db"
    shutil.copy(pristine, db)
    _damage(db, table)
    assert _classified(db)["canonical"] == [table]


@pytest.mark.parametrize("table", ("blobs", "usage"))
def test_store_table_damage_next_to_fts_damage_still_halts(pristine, tmp_path, table):
    """The case where a wrong classification keeps the writer going: the FTS slice meets the
    index damage, and the other damage must still be charged to its table."""
    db = tmp_path / "state.db"
    shutil.copy(pristine, db)
    _damage(db, "messages_fts_data")
    _damage(db, table)
    damaged = _classified(db)
    assert damaged == {"canonical": [table], "fts": ["messages_fts"]}


def test_damage_only_in_fts_shadow_tables_is_classified_fts_only(pristine, tmp_path):
    shadows = _fts_shadow_tables(pristine)
    assert {fts for _, fts in shadows} == set(schema.FTS_TABLES)
    for shadow, fts in shadows:
        db = tmp_path / f"{shadow}.db"
        shutil.copy(pristine, db)
        _damage(db, shadow)
        damaged = _classified(db)
        assert damaged["canonical"] == [], (shadow, damaged)
        # a tiny shadow table (config, one docsize row) may be read only when needed; a
        # damaged one is then reported or harmless, never charged to a store table
        assert damaged["fts"] in ([fts], []), (shadow, damaged)
        if shadow.endswith("_data"):
            assert damaged["fts"] == [fts], (shadow, damaged)


def test_rebuild_discards_only_the_fts_objects_of_a_damaged_index(pristine, tmp_path):
    """fts_repair.rebuild on real index damage: the FTS tables and their shadow tables are
    replaced (by name patterns derived from the registry), every store table keeps its rows,
    and after the VACUUM it asks for the file is whole again."""
    from quill.store.sqlite.connection import open_writer
    from quill.store.sqlite.fts_repair import rebuild

    db = tmp_path / "state.db"
    shutil.copy(pristine, db)
    conn = open_reader(db)
    try:
        rows = {
            t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in schema.STORE_TABLES
        }
    finally:
        conn.close()
    _damage(db, "messages_fts_data")
    _damage(db, "messages_trigram_data")
    conn = open_writer(db)
    try:
        figures = rebuild(conn)
        # DROP TABLE walks the damaged pages: the objects are discarded by name instead
        assert figures == {"removed_by": "writable_schema", "needs_vacuum": True}
        conn.execute("VACUUM")
        assert [r[0] for r in conn.execute("PRAGMA integrity_check")] == ["ok"], figures
        assert classify(conn) == {"canonical": [], "fts": []}
        rows.pop("state_meta")  # rebuild resets the watermark and drops the stale marks
        assert {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in rows} == rows
        upto = "SELECT value FROM state_meta WHERE key = 'fts_indexed_upto'"
        assert conn.execute(upto).fetchone() == ("0",)
    finally:
        conn.close()

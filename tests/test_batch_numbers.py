"""Schema v12 (``store.apply.batches``): message rows name their batch by a number into
``batches`` instead of repeating the batch id, and ``messages_pos`` (a prefix of
``messages_session_state``) is gone. A v11 store, on either backend, is migrated when a writer
opens it and then holds exactly the rows, numbers and search hits of the same ops written at
v12; a drain of the same spool in other chunks numbers the batches the same; idempotency by
batch id holds across the migration. Real SQLite files, the real PostgreSQL server."""

from __future__ import annotations

import apsw
import psycopg
from semantics_helpers import Store, assistant, call, tool, user

from quill.spool import START, Quarantine, Spool, SpoolReader
from quill.store import open_writer, schema
from quill.store.factory import open_url
from quill.workers.drain import Drain

QUERIES = (
    ("zebras", {}),
    ("quaggas", {}),
    ("Gazelle", {}),
    ("ebra", {"substring": True}),
    ("summary", {}),
)
#: Columns read as text through ``batches`` for a comparison that does not depend on numbers.
_NAMED = "(SELECT b.batch_id FROM batches b WHERE b.id = m.batch) AS batch_name"


def _write(s: Store) -> list[str]:
    """The same ops on any store: appends with tool calls and results, a refused op, a
    compaction (new rows under its own batch), reasoning. Returns the batch ids applied."""
    ids = []
    for sid, n in (("a", 3), ("b", 2)):
        for i in range(n):
            ack = s.spool.append(
                "messages.append",
                {
                    "session_id": sid,
                    "messages": [
                        user(f"zebras {sid}{i} at dawn", id=f"{sid}u{i}"),
                        assistant(None, tool_calls=[call(f"{sid}c{i}", "Gazelle", "{}")]),
                        tool(f"{sid}c{i}", f"quaggas {i}", name="Gazelle"),
                    ],
                },
            )
            ids.append(ack.batch_id)
    assert s.drain() == []
    s.spool.append(  # refused: a second live result for a call: no rows, no number
        "messages.append", {"session_id": "a", "messages": [tool("ac0", "again", name="Gazelle")]}
    )
    assert s.drain() == ["duplicate-tool-result"]
    ack = s.spool.append(
        "messages.compact",
        {"session_id": "a", "tail_count": 0, "messages": [user("summary of zebras so far")]},
    )
    ids.append(ack.batch_id)
    assert s.drain() == []
    return ids


def _hits(s: Store) -> list[list[tuple]]:
    with s.reader() as r:
        return [
            [(h["session_id"], h["message_id"], h["role"]) for h in r.search(q, limit=50, **kw)]
            for q, kw in QUERIES
        ]


def _named_rows(conn) -> list[tuple]:
    """Every message row with its batch id as text, by id (columns by name: a migrated
    PostgreSQL table holds them in another order)."""
    cols = [
        "id",
        "session_id",
        "ext_id",
        "role",
        "content",
        "tool_calls",
        "tool_call_id",
        "tool_name",
        "state",
        "origin_id",
        "seq",
        "pos",
        "batch",
    ]
    return [
        tuple(r)
        for r in conn.execute(
            f"SELECT {', '.join('m.' + c for c in cols)}, {_NAMED} FROM messages m ORDER BY m.id"
        ).fetchall()
    ]


def _unnumbered(conn) -> list[tuple]:
    """``_named_rows`` without the batch number (the batch id as text stays)."""
    return [r[:-2] + r[-1:] for r in _named_rows(conn)]


def _sqlite_v11_copy(src_db, dst_db) -> None:
    """A v11 file (v11's own DDL: ``messages.batch_id`` text, ``messages_pos``) holding the
    rows of ``src_db`` (a v12 store), its search indexes empty (the writer refills them)."""
    from quill.store.apply import batches

    v11 = schema.DDL.replace(batches.MIGRATION, "")
    src = apsw.Connection(str(src_db))
    dst = apsw.Connection(str(dst_db))
    dst.execute(v11)
    for table in schema.STORE_TABLES:
        if table == "spool_cursor":  # another spool's: the copy drains its own from the start
            continue
        have = [r[1] for r in dst.execute(f"PRAGMA table_info({table})")]
        if not have:
            continue
        exprs = [
            "(SELECT b.batch_id FROM batches b WHERE b.id = m.batch)"
            if (table, c) == ("messages", "batch_id")
            else c
            for c in have
        ]
        rows = src.execute(f"SELECT {', '.join(exprs)} FROM {table} m").fetchall()
        dst.executemany(
            f"INSERT INTO {table} ({', '.join(have)}) VALUES ({', '.join('?' for _ in have)})",
            rows,
        )
    dst.execute("UPDATE state_meta SET value = '0' WHERE key = 'fts_indexed_upto'")
    dst.execute("PRAGMA user_version = 11")
    src.close()
    dst.close()


def test_a_v11_sqlite_store_is_migrated_to_batch_numbers_with_the_same_rows_and_hits(tmp_path):
    live = Store(tmp_path / "live")
    applied = _write(live)
    live.index()
    want_rows, want_hits = _named_rows(live.conn), _hits(live)
    live.backend.close()
    assert [r[-1] for r in want_rows if r[-1] is not None] and all(r[-2] for r in want_rows)

    old = tmp_path / "old"
    old.mkdir()
    _sqlite_v11_copy(tmp_path / "live" / "state.db", old / "state.db")
    conn = apsw.Connection(str(old / "state.db"))
    assert {r[1] for r in conn.execute("PRAGMA table_info(messages)")} >= {"batch_id"}
    conn.close()

    writer = open_writer(old / "state.db")  # opening migrates
    try:
        assert writer.execute("PRAGMA user_version").fetchone()[0] == schema.SCHEMA_VERSION
        cols = {r[1] for r in writer.execute("PRAGMA table_info(messages)")}
        assert "batch" in cols and "batch_id" not in cols
        indexes = {r[0] for r in writer.execute("SELECT name FROM sqlite_schema")}
        assert "messages_pos" not in indexes and "messages_session_state" in indexes
        # numbered in the order the batches first wrote rows, as the live store numbered them
        assert writer.execute("SELECT batch_id FROM batches ORDER BY id").fetchall() == [
            (b,) for b in applied
        ]
    finally:
        writer.close()
    (old / "spool").mkdir()
    migrated = Store(old)
    try:
        migrated.index()
        assert _named_rows(migrated.conn) == want_rows
        assert _hits(migrated) == want_hits
        assert migrated.apply("messages.append", {"session_id": "c", "messages": [user("x")]}) == []
        top = migrated.conn.execute("SELECT max(id) FROM batches").fetchone()[0]
        assert top == len(applied) + 1
        assert migrated.conn.execute(
            "SELECT count(*) FROM messages WHERE batch IS NULL"
        ).fetchone() == (0,)
        # idempotency by batch id across the migration: a batch applied at v11 is a duplicate
        result = migrated.backend.apply_chunk(
            list(SpoolReader(tmp_path / "live" / "spool").read(START, max_bytes=1 << 40)),
            lambda e, reason, detail: None,
        )
        assert result.applied == 0 and _named_rows(migrated.conn)[:-1] == want_rows
    finally:
        migrated.backend.close()


def test_a_v11_postgresql_store_is_migrated_to_batch_numbers_with_the_same_rows_and_hits(
    tmp_path, pg_store_url
):
    s = Store(tmp_path, pg_store_url)
    try:
        applied = _write(s)
        want_rows, want_hits = _named_rows(s.conn), _hits(s)
    finally:
        s.backend.close()
    with psycopg.connect(pg_store_url, autocommit=True) as conn:  # back to v11, as it was
        conn.execute("ALTER TABLE messages ADD COLUMN batch_id text")
        conn.execute(
            "UPDATE messages m SET batch_id = b.batch_id FROM batches b WHERE b.id = m.batch"
        )
        conn.execute("ALTER TABLE messages ALTER COLUMN batch_id SET NOT NULL")
        conn.execute("ALTER TABLE messages DROP COLUMN batch")
        conn.execute("DROP TABLE batches")
        conn.execute("CREATE INDEX messages_pos ON messages(session_id, pos)")
        conn.execute("UPDATE state_meta SET value = '11' WHERE key = 'schema_version'")
    s = Store(tmp_path, pg_store_url)  # opening migrates
    try:
        got = s.conn.execute("SELECT value FROM state_meta WHERE key = 'schema_version'")
        assert got.fetchone()[0] == str(schema.SCHEMA_VERSION)
        assert s.conn.execute("SELECT to_regclass('messages_pos')").fetchone()[0] is None
        assert s.conn.execute("SELECT batch_id FROM batches ORDER BY id").fetchall() == [
            (b,) for b in applied
        ]
        # numbered anew (densely, by first row): a live store's identity may skip values
        assert _unnumbered(s.conn) == [r[:-2] + r[-1:] for r in want_rows]
        assert _hits(s) == want_hits
        result = s.replay()  # every batch applied at v11 is a duplicate
        assert result.applied == 0 and _unnumbered(s.conn) == [r[:-2] + r[-1:] for r in want_rows]
        ack = s.spool.append("messages.append", {"session_id": "c", "messages": [user("x")]})
        assert s.drain() == []
        assert s.conn.execute(
            "SELECT b.batch_id FROM messages m JOIN batches b ON b.id = m.batch "
            "WHERE m.session_id = 'c'"
        ).fetchall() == [(ack.batch_id,)]
    finally:
        s.backend.close()


def _drain(spool_dir, db, chunk_rows: int) -> None:
    store = open_url(None, db, "t")
    try:
        drain = Drain(store, SpoolReader(spool_dir), Quarantine(spool_dir), chunk_rows)
        drain.start()
        while drain.step().entries:
            pass
    finally:
        store.close()


def test_a_rebuild_in_other_chunks_numbers_every_batch_as_the_live_store_did(tmp_path):
    """The live drain applies runs of appends together (``store.apply.bulk``); a rebuild one
    op per chunk goes another way, and both number the batches in op order."""
    spool_dir = tmp_path / "spool"
    sent = []
    with Spool(spool_dir, fsync=False) as sp:
        for i in range(12):
            sid = f"s{i % 3}"
            msgs = [user(f"zebras {i}", id=f"u{i}"), assistant(f"answer {i}")]
            sent.append((sp.append("messages.append", {"session_id": sid, "messages": msgs}), 2))
            if i == 4:  # every message a duplicate: no rows, so no number
                dup = {"session_id": sid, "messages": [user(f"zebras {i}", id=f"u{i}")]}
                sp.append("messages.append", dup)
        sp.append(
            "messages.compact",
            {"session_id": "s0", "tail_count": 0, "messages": [user("summary of zebras")]},
        )
    _drain(spool_dir, tmp_path / "live.db", 500)
    _drain(spool_dir, tmp_path / "rebuilt.db", 1)
    dumps = []
    for name in ("live.db", "rebuilt.db"):
        conn = open_writer(tmp_path / name)
        try:
            dumps.append(
                (
                    conn.execute("SELECT * FROM batches ORDER BY id").fetchall(),
                    _named_rows(conn),
                )
            )
        finally:
            conn.close()
    assert dumps[0] == dumps[1]
    numbered, rows = dumps[0]
    assert [b for _, b in numbered[:-1]] == [ack.batch_id for ack, _ in sent]
    assert [n for n, _ in numbered] == list(range(1, len(sent) + 2))
    by_batch: dict[str, int] = {}
    for r in rows:
        by_batch[r[-1]] = by_batch.get(r[-1], 0) + 1
    assert all(by_batch[ack.batch_id] == n for ack, n in sent)


def test_salvage_keeps_batch_ids_and_counts_rows_of_an_unreadable_batch_unreadable(tmp_path):
    """Salvage (store/sqlite/salvage.py) reads a v12 file's batch numbers through its own
    ``batches``: salvaged rows keep their batch id (renumbered in the target); a row whose
    number names no readable batch is counted unreadable, not copied under a guessed id."""
    from quill.store.sqlite.salvage import salvage

    old = Store(tmp_path / "old")
    acks = []
    for sid in ("a", "b"):
        ack = old.spool.append(
            "messages.append", {"session_id": sid, "messages": [user(f"zebras {sid}")]}
        )
        acks.append(ack.batch_id)
    assert old.drain() == []
    old.conn.execute("DELETE FROM batches WHERE batch_id = ?", (acks[1],))  # b's is gone
    old.backend.close()
    target = open_writer(tmp_path / "new.db")
    try:
        figures = salvage(tmp_path / "old" / "state.db", target)
        assert figures["salvaged_messages"] == 1 and figures["unreadable_message_ids"] == 1
        assert _named_rows(target)[0][1] == "a" and _named_rows(target)[0][-1] == acks[0]
        assert len(_named_rows(target)) == 1
    finally:
        target.close()

"""The PostgreSQL writer applies runs of appends together (store/apply/bulk.py through
``PgLedger``) with every rule of the op-at-a-time path kept: the same rows and refusals, a
bad op quarantined alone, a batch decided by another host meanwhile counted as a duplicate,
the cursor committed with the rows; and with a bounded number of statements per op.
"""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import psycopg
import pytest
from harness import RecordingDrain
from test_bulk_append import write_spool

from quill.spool import START, Quarantine, Spool, SpoolReader
from quill.store.apply.chunking import take_chunk
from quill.store.apply.ledger import op_digest
from quill.store.factory import open_url
from quill.store.postgres import connection as pg_connection
from quill.store.postgres import schema as pg_schema
from quill.store.postgres.apply import PgLedger
from quill.store.schema import CANONICAL

#: The tables compared (from the schema registry): every canonical table and the batch ledgers,
#: and the columns that hold when the drain ran, not what it stored.
TABLES = tuple(t for t, role in pg_schema.TABLES.items() if role == CANONICAL) + (
    "applied_batches",
    "rejected_batches",
)
VOLATILE = {"applied_at", "rejected_at"}
#: Surrogate keys drawn from a sequence that a rolled-back run also draws from: not compared.
SURROGATE = {("usage", "id")}
#: Columns holding message ids: compared by rank (sequence values may be skipped).
ID_COLUMNS = {("messages", "id"), ("messages", "origin_id"), ("usage", "message_id")}
#: Columns holding batch numbers (``store.apply.batches``): by rank, for the same reason.
BATCH_COLUMNS = {("batches", "id"), ("messages", "batch")}


def _drain(spool_dir: Path, url: str, root: Path, chunk_rows: int) -> list[tuple[str, str]]:
    root.mkdir()
    store = open_url(url, root / "state.db", "host-a")
    try:
        drain = RecordingDrain(
            store, SpoolReader(spool_dir), Quarantine.for_store(root / "state.db"), chunk_rows
        )
        drain.start()
        drain.until_empty()
    finally:
        store.close()
    return [(position, reason) for reason, _, position in drain.rejects]


def _dump(url: str) -> dict[str, list[tuple]]:
    out: dict[str, list[tuple]] = {}
    with psycopg.connect(url) as conn:
        rank = {r[0]: i for i, r in enumerate(conn.execute("SELECT id FROM messages ORDER BY id"))}
        brank = {r[0]: i for i, r in enumerate(conn.execute("SELECT id FROM batches ORDER BY id"))}
        for table in TABLES:
            cur = conn.execute(f"SELECT * FROM {table}")
            names = [d.name for d in cur.description]
            rows = []
            for row in cur.fetchall():
                rows.append(
                    tuple(
                        None
                        if name in VOLATILE or name == "words" or (table, name) in SURROGATE
                        else (rank.get(v) if (table, name) in ID_COLUMNS and v else v)
                        if (table, name) not in BATCH_COLUMNS
                        else brank[v]
                        for name, v in zip(names, row)
                    )
                )
            out[table] = sorted(rows, key=repr)
    return out


@pytest.mark.parametrize("seed", range(3))
def test_pg_bulk_runs_equal_one_op_at_a_time(tmp_path, pg_schemas, seed, monkeypatch):
    """The seeded spools of test_bulk_append (retries, reused batch ids, store-phase refusals,
    usage, blobs, deletes) drained into two PostgreSQL schemas: with bulk runs, and with the
    ledger's bulk runs off. Every table and every quarantine call match."""
    write_spool(tmp_path / "spool", seed)
    chunk = random.Random(seed).choice([40, 200, 5000])
    bulk_url, single_url = pg_schemas(), pg_schemas()
    bulk = _drain(tmp_path / "spool", bulk_url, tmp_path / "bulk", chunk)
    with monkeypatch.context() as m:
        m.setattr(PgLedger, "bulk_append", False)
        single = _drain(tmp_path / "spool", single_url, tmp_path / "single", chunk)
    assert bulk == single
    a, b = _dump(bulk_url), _dump(single_url)
    assert a["messages"] and a["usage"]  # the sequence did write
    for table in TABLES:
        assert a[table] == b[table], table


def _spool_of(spool_dir: Path, ops: list[tuple[str, dict]]) -> list:
    with Spool(spool_dir, fsync=False) as sp:
        for batch, data in ops:
            sp.append("messages.append", data, batch_id=batch)
    return take_chunk(SpoolReader(spool_dir).read(START, max_bytes=8 << 20), 10_000)


def test_a_batch_another_host_decides_meanwhile_is_a_duplicate_and_the_rest_applied(
    tmp_path, pg_store_url
):
    """Another host's transaction holds batch ``b2``'s ledger row (the same op: a spool
    copied with its data dir) while this writer applies a chunk with ``b2`` in it (in another
    session, so no session lock orders them). It commits while the run waits on that row: the
    run is rolled back and its ops applied one at a time, ``b2`` counting as a duplicate, the
    others applied, the cursor moved. (The whole chunk is one run, so its ledger insert went
    with the COMMIT: the chunk is redone checked, ``store.postgres.apply.apply_chunk``.)"""
    ops = [
        (f"b{i}", {"session_id": f"s{i % 2}", "messages": [{"role": "user", "content": f"m{i}"}]})
        for i in range(5)
    ]
    entries = _spool_of(tmp_path / "spool", ops)
    store = open_url(pg_store_url, tmp_path / "state.db", "host-a")
    other = psycopg.connect(pg_store_url)
    try:
        other.execute(
            "INSERT INTO applied_batches (batch_id, spool_id, position, applied_at, digest) "
            "VALUES ('b2', 'host-b', '1:0', 0, %s)",
            (op_digest("messages.append", ops[2][1]),),
        )
        threading.Timer(1.0, other.commit).start()  # while the chunk waits on b2's row
        t0 = time.monotonic()
        result = store.apply_chunk(entries, lambda *a: pytest.fail(f"rejected {a[1:]}"))
        assert time.monotonic() - t0 >= 0.9  # it did wait on the other host's row
        assert (result.applied, result.duplicates, result.rejected) == (4, 1, 0)
        with psycopg.connect(pg_store_url) as conn:
            contents = [r[0] for r in conn.execute("SELECT content FROM messages ORDER BY id")]
            owner = conn.execute(
                "SELECT spool_id FROM applied_batches WHERE batch_id = 'b2'"
            ).fetchone()
            cursor = conn.execute('SELECT segment, "offset" FROM spool_cursor').fetchall()
        assert contents == ["m0", "m1", "m3", "m4"] and owner == ("host-b",)
        assert cursor == [tuple(entries[-1].next)]
    finally:
        other.close()
        store.close()


def test_a_bad_op_in_a_pg_run_is_quarantined_alone(tmp_path, pg_store_url):
    """The third of five appends repeats a live tool result (refused only by the store): it
    alone is quarantined; the others are applied around it, usage included."""
    msgs = [
        [{"role": "user", "content": "go"}],
        [{"role": "tool", "tool_call_id": "x", "content": "1"}],
        [
            {"role": "tool", "tool_call_id": "x", "content": "2"},
            {"role": "user", "content": "lost"},
        ],
        [
            {
                "role": "assistant",
                "content": "after",
                "usage": {"prompt_tokens": 3, "completion_tokens": 1},
            }
        ],
        [{"role": "user", "content": "last"}],
    ]
    entries = _spool_of(
        tmp_path / "spool",
        [(f"b{i}", {"session_id": "s", "messages": m}) for i, m in enumerate(msgs)],
    )
    store = open_url(pg_store_url, tmp_path / "state.db", "host-a")
    rejected: list[str] = []
    try:
        result = store.apply_chunk(entries, lambda e, reason, detail: rejected.append(reason))
    finally:
        store.close()
    assert rejected == ["duplicate-tool-result"] and result.applied == 4
    with psycopg.connect(pg_store_url) as conn:
        rows = conn.execute(
            "SELECT m.content, b.batch_id FROM messages m JOIN batches b ON b.id = m.batch "
            "ORDER BY m.seq"
        ).fetchall()
        usage = conn.execute(
            "SELECT m.content FROM usage u JOIN messages m ON m.id = u.message_id"
        ).fetchall()
        refused = conn.execute("SELECT batch_id, reason FROM rejected_batches").fetchall()
    assert rows == [("go", "b0"), ("1", "b1"), ("after", "b3"), ("last", "b4")]
    assert usage == [("after",)] and refused == [("b2", "duplicate-tool-result")]


def test_a_chunk_of_appends_costs_few_statements_per_op(tmp_path, pg_store_url, monkeypatch):
    """50 appends of 10 messages over 10 sessions in one chunk: the statements sent to the
    server (``execute`` calls, and each row of an ``executemany``, which psycopg pipelines)
    stay under 2 per op plus the rows; the op-at-a-time path sent ~10 per op."""
    ops = [
        (
            f"b{i}",
            {
                "session_id": f"s{i % 10}",
                "messages": [{"role": "user", "content": f"m{i} {k}"} for k in range(10)],
            },
        )
        for i in range(50)
    ]
    entries = _spool_of(tmp_path / "spool", ops)
    store = open_url(pg_store_url, tmp_path / "state.db", "host-a")
    calls = {"execute": 0}
    execute = pg_connection.PgConnection.execute

    def counting(self, *args, **kwargs):
        calls["execute"] += 1
        return execute(self, *args, **kwargs)

    monkeypatch.setattr(pg_connection.PgConnection, "execute", counting)
    try:
        result = store.apply_chunk(entries, lambda *a: pytest.fail(f"rejected {a[1:]}"))
    finally:
        store.close()
    assert result.applied == 50 and result.rows == 500
    assert calls["execute"] <= 2 * 50, calls

"""A writer that fell behind applies its backlog of a shared session as late ops (acknowledged
before rows another host's writer applied first): on PostgreSQL a chunk of them is one bulk
run (store/apply/bulk.py through ``order.plan``) whose placement probes the order-key index
(``messages_ack``) once per op, instead of one op at a time, each scanning back over every
later row of the session under its lock (47–125 s per chunk in the torture run).

Cost is counted, not timed: statements sent, and heap rows of ``messages`` read in the chunk's
transaction by the server's own counters (``pg_stat_get_xact_tuples_fetched`` and
``_returned``). Order is checked against the order keys every time.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from quill.spool import START, Spool, SpoolReader
from quill.store.apply import order
from quill.store.apply.chunking import take_chunk
from quill.store.factory import open_url
from quill.store.postgres import connection as pg_connection
from quill.store.postgres.apply import PgLedger

_READ = (
    "SELECT pg_stat_get_xact_tuples_fetched('messages'::regclass) "
    "+ pg_stat_get_xact_tuples_returned('messages'::regclass)"
)


def _spool(path: Path, ops: list[tuple[str, str, list[str]]]) -> None:
    """``ops``: ``(batch, session, [contents])`` appended in order (``ts`` is append time)."""
    with Spool(path, fsync=False) as sp:
        for batch, sid, texts in ops:
            msgs = [{"role": "user", "content": t} for t in texts]
            sp.append("messages.append", {"session_id": sid, "messages": msgs}, batch_id=batch)


def _drain(url: str, root: Path, spool_dir: Path, spool_id: str, chunk_rows: int) -> None:
    root.mkdir(exist_ok=True)
    store = open_url(url, root / f"{spool_id}.db", spool_id)
    try:
        reader, pos = SpoolReader(spool_dir), START
        while entries := take_chunk(reader.read(pos, max_bytes=8 << 20), chunk_rows):
            store.apply_chunk(entries, lambda *a: pytest.fail(f"rejected {a[1:]}"))
            pos = entries[-1].next
    finally:
        store.close()


def _contents(url: str, sid: str, by: str) -> list[str]:
    import psycopg

    with psycopg.connect(url) as conn:
        return [
            r[0]
            for r in conn.execute(
                f"SELECT content FROM messages WHERE session_id = %s ORDER BY {by}", (sid,)
            )
        ]


def test_a_chunk_of_late_ops_probes_the_key_index_once_per_op(tmp_path, pg_store_url, monkeypatch):
    """Host A acknowledged 60 single-message turns first; host B's writer applied its 1,000
    later rows first. A's chunk: every turn lands before B's rows, with ≤ 1 statement and a
    few heap rows per op (old code: ~11 statements and ~1,000 heap rows per op)."""
    late = 60
    _spool(tmp_path / "a", [(f"a{i}", "shared", [f"a{i}"]) for i in range(late)])
    time.sleep(0.01)  # B's records are acknowledged after all of A's
    _spool(
        tmp_path / "b",
        [(f"b{i}", "shared", [f"b{i}.{k}" for k in range(10)]) for i in range(100)],
    )
    _drain(pg_store_url, tmp_path, tmp_path / "b", "host-b", 500)
    entries = take_chunk(SpoolReader(tmp_path / "a").read(START, max_bytes=8 << 20), 500)
    assert len(entries) == late
    store = open_url(pg_store_url, tmp_path / "a.db", "host-a")
    counted = {"statements": 0, "heap_rows": None}
    execute = pg_connection.PgConnection.execute

    def counting(self, sql, *args, **kwargs):
        if sql == "COMMIT":  # the chunk's transaction: its own counters, before they reset
            counted["heap_rows"] = execute(self, _READ).fetchone()[0]
        counted["statements"] += 1
        return execute(self, sql, *args, **kwargs)

    monkeypatch.setattr(pg_connection.PgConnection, "execute", counting)
    try:
        result = store.apply_chunk(entries, lambda *a: pytest.fail(f"rejected {a[1:]}"))
    finally:
        monkeypatch.undo()
        store.close()
    assert result.applied == late
    b_rows = [f"b{i}.{k}" for i in range(100) for k in range(10)]
    assert _contents(pg_store_url, "shared", "seq") == [f"a{i}" for i in range(late)] + b_rows
    assert counted["statements"] <= late, counted
    assert counted["heap_rows"] <= 10 * late, counted  # old code: ~1,000 per op


def test_late_ops_in_bulk_runs_follow_the_order_keys_through_crowded_gaps(
    tmp_path, pg_schemas, monkeypatch
):
    """Three hosts append to two sessions, interleaved at random (ops of 1–3 messages); their
    writers drain one after another, so most of the later writers' ops are late, many into
    one gap. With gaps shrunk so that bulk runs relabel windows often, every session reads in
    order-key order, and as the op-at-a-time path orders it."""
    monkeypatch.setattr(order, "STRIDE", 16)
    monkeypatch.setattr(order, "_LATE_STEP", 4)
    monkeypatch.setattr(order, "_MIN_GAP", 2)
    rng = random.Random(5)
    spools = {h: Spool(tmp_path / h, fsync=False) for h in ("h0", "h1", "h2")}
    try:
        for i in range(150):
            host = rng.choice(list(spools))
            sid = rng.choice(["s0", "s1"])
            n = rng.randint(1, 3)
            msgs = [{"role": "user", "content": f"{host}.{i}.{k}"} for k in range(n)]
            spools[host].append(
                "messages.append", {"session_id": sid, "messages": msgs}, batch_id=f"{host}.{i}"
            )
    finally:
        for sp in spools.values():
            sp.close()
    drain_order = rng.sample(list(spools), 3)
    urls = {}
    for bulk in (True, False):
        urls[bulk] = url = pg_schemas()
        with monkeypatch.context() as m:
            m.setattr(PgLedger, "bulk_append", bulk)
            for host in drain_order:
                _drain(url, tmp_path / f"root-{bulk}", tmp_path / host, host, rng.choice([10, 60]))
    for sid in ("s0", "s1"):
        by_key = _contents(urls[True], sid, "ack_us, ack_tag, ack_at, id")
        assert len(by_key) > 60
        assert _contents(urls[True], sid, "seq") == by_key
        assert _contents(urls[True], sid, "pos") == by_key
        assert _contents(urls[False], sid, "seq") == by_key

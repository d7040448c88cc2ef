"""A session listing reads the same pages whatever the size of the largest message: the
ordering key and the per-session counts come from indexes, and only the listed page gets
its figures (a real SQLite store, filled through the client and the writer's drain)."""

from __future__ import annotations

import time

import apsw
from harness import drain, make_home

from quill.ops.client.client import Client
from quill.store import Reader

BIG = 8 * 1024 * 1024  # 2,048 pages of 4 KiB: far more than the rest of the listing reads


def _pages_read(cfg, **filters) -> tuple[int, list[str]]:
    """Page-cache misses of one listing on a fresh reader, and the ids listed."""
    with Reader(cfg.state_db) as r:
        r.conn.execute("SELECT 1").fetchall()
        before = r.conn.status(apsw.SQLITE_DBSTATUS_CACHE_MISS)[0]
        rows = r.list_sessions(**filters)
        return r.conn.status(apsw.SQLITE_DBSTATUS_CACHE_MISS)[0] - before, [x["id"] for x in rows]


def test_a_large_message_does_not_change_what_a_listing_reads(tmp_path):
    cfg = make_home(tmp_path / "h")
    client, now = Client(config_=cfg), time.time()
    for n in range(60):
        client.append(f"s{n:02d}", [{"role": "user", "content": f"hello {n}", "ts": now + n}])
    drain(cfg.home)
    small, ids = _pages_read(cfg, limit=10)
    # The big message goes to a listed session (the newest) and to one off the page.
    for sid in ("s59", "s00"):
        client.append(sid, [{"role": "assistant", "content": "x" * BIG, "ts": now + 60}])
    drain(cfg.home)
    big, ids_after = _pages_read(cfg, limit=10)
    assert "s59" in ids_after
    assert big < small + 64, (small, big)
    listed = {x["id"]: x for x in Reader(cfg.state_db).list_sessions(limit=100)}
    assert listed["s59"]["message_count"] == 2 and listed["s00"]["message_count"] == 2
    assert listed["s59"]["preview"] == "hello 59"

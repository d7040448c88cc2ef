"""FTS-only damage: the search indexes are detached, writes go on, search falls back
to a scan and says so, and the rebuild job restores them. Real page overwrites.
SQLite only: FTS5 tables in the store file (PostgreSQL's GIN indexes are maintained by the
server; its index damage is test_pg_amcheck.py)."""

from __future__ import annotations

import json
import time

from conftest import damage_pages, stop_fleet
from semantics_helpers import Store

from quill.store import Reader
from quill.store.sqlite.connection import open_reader
from quill.store.sqlite.fts_repair import classify, detach


def _push(quill, session, start, n, word):
    lines = "\n".join(
        json.dumps(
            {"role": "user", "id": f"{session}-{i}", "content": f"{word} number {i} lorem ipsum"}
        )
        for i in range(start, start + n)
    )
    quill.run("push", "--session", session, input=lines)


def test_detached_index_search_scans_and_says_so(tmp_path, quill, home):
    store = Store(home)
    store.apply(
        "messages.append",
        {"session_id": "s", "messages": [{"role": "user", "content": "zebra crossing"}]},
    )
    store.index()
    detach(store.conn, "test")
    with store.reader() as r:
        assert r.search_health()["fts_state"] == "stale"
        assert [h["session_id"] for h in r.search("zebra")] == ["s"]  # found by the scan
    store.close()
    proc = quill.run("search", "zebra", "--json")
    assert json.loads(proc.stdout)["hits"][0]["session_id"] == "s" and "degraded" in proc.stderr


def test_damaged_fts_pages_are_detected_writes_go_on_and_rebuild_restores_search(quill, home):
    _push(quill, "old", 0, 3000, "aardvark")
    quill.drain()
    damage_pages(home / "state.db", "messages_fts_data")
    conn = open_reader(home / "state.db")
    try:
        damaged = classify(conn)
    finally:
        conn.close()
    assert damaged == {"canonical": [], "fts": ["messages_fts"]}
    fleet = quill.start_fleet()
    try:
        _push(quill, "new", 0, 200, "bumblebee")
        out = quill.run("jobs", "run", "quick_check", "--wait", "60", "--json", check=False)
        run = json.loads(out.stdout)["run"]
        assert run["outcome"] == "error" and "rebuild queued" in run["error"]
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            st = quill.status()["store"]
            rebuilt = [
                r
                for r in quill.json("jobs", "history", "--job", "fts_rebuild")["runs"]
                if r["outcome"] == "ok"
            ]
            if rebuilt and st["fts_state"] == "ok" and st["fts_pending"] == 0:
                break
            time.sleep(0.3)
        assert rebuilt, "fts_rebuild did not run"
        assert not (home / "run" / "halt.json").exists()
        assert quill.json("search", "aardvark", "--limit", "5")["hits"][0]["session_id"] == "old"
        assert quill.json("search", "bumblebee", "--limit", "5")["hits"][0]["session_id"] == "new"
        with Reader(home / "state.db") as r:
            assert r.figures()["messages"] == 3200
            assert [x[0] for x in r.conn.execute("PRAGMA integrity_check")] == ["ok"]
    finally:
        assert stop_fleet(fleet) == 0

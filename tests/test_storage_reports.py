"""Damage no write touches is found within the configured bound; unusual
storage (another journal mode, an unusable -shm) is reported, never silent or a crash loop."""

from __future__ import annotations

import json
import time

import apsw
from conftest import damage_pages, stop_fleet, worker_pids

from quill.store import Reader


def _push(quill, session: str, start: int, n: int) -> None:
    lines = "\n".join(
        json.dumps(
            {"role": "user", "id": f"{session}-{i}", "content": f"{session} message {i} " * 5}
        )
        for i in range(start, start + n)
    )
    quill.run("push", "--session", session, input=lines)


def _wait_for(predicate, timeout: float = 90.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_damage_in_the_messages_table_is_found_within_the_bound(quill, home):
    _push(quill, "d", 0, 600)
    quill.drain()
    quill.run("snapshot")
    quill.run("schedule", "add", "quick_check", "--every", "3s")  # a small configured bound
    damage_pages(home / "state.db", "messages", leaves_only=True)  # no write will touch these pages
    fleet = quill.start_fleet()
    try:
        worker_pids(home)
        _push(quill, "d", 600, 5)
        halt = _wait_for(lambda: quill.status()["fleet"]["halt"], what="the damage to be found")
        assert (
            halt["cause"] == "CorruptError"
            and "quick_check" in halt["detail"]
            and "messages" in halt["detail"]
        )
    finally:
        assert stop_fleet(fleet) == 0
    proc = quill.run("doctor", "--check", "--json", check=False)
    checks = {c["check"]: c for c in json.loads(proc.stdout)}
    assert proc.returncode == 1 and checks["damage check"]["status"] == "fail"


def test_doctor_check_on_a_healthy_store_is_ok_and_recorded(quill, home):
    _push(quill, "h", 0, 20)
    quill.run("run", "--until-idle", "--timeout", "120")  # installs the schedules
    checks = {c["check"]: c for c in quill.json("doctor", "--check")}
    assert checks["damage check"]["status"] == "ok"
    quill.run("run", "--until-idle", "--timeout", "120")
    runs = [
        r
        for r in quill.json("jobs", "history", "--job", "quick_check")["runs"]
        if r["figures"].get("runner") == "cli"
    ]
    assert [r["outcome"] for r in runs] == ["ok"]


def test_a_journal_mode_switched_while_stopped_is_corrected_and_logged(quill, home):
    _push(quill, "j", 0, 5)
    quill.drain()
    conn = apsw.Connection(str(home / "state.db"))
    assert conn.execute("PRAGMA journal_mode=DELETE").fetchone()[0] == "delete"
    conn.close()
    checks = {c["check"]: c for c in quill.json("doctor", check=False)}
    assert (
        checks["journal mode"]["status"] == "warn"
        and "journal_mode=delete" in checks["journal mode"]["detail"]
    )
    quill.run("run", "--until-idle", "--timeout", "120")
    events = [json.loads(line) for line in (home / "logs" / "writer.log").read_text().splitlines()]
    fixed = [e for e in events if e.get("event") == "writer.journal_mode_corrected"]
    assert len(fixed) == 1 and fixed[0]["was"] == "delete"
    with Reader(home / "state.db") as r:
        assert r.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_an_unusable_shm_is_named_in_status_and_doctor_and_the_writer_does_not_crash_loop(
    quill, home
):
    _push(quill, "s", 0, 5)
    quill.drain()
    shm = home / "state.db-shm"
    shm.unlink(missing_ok=True)
    shm.mkdir()  # SQLite would read the store as empty through it
    fleet = quill.start_fleet()
    try:
        writer = _wait_for(
            lambda: (
                (w := quill.status()["fleet"]["writer"] or {}).get("alive") and w.get("error") and w
            ),
            what="the writer to report the -shm problem",
        )
        assert "state.db-shm" in writer["error"] and "not a regular file" in writer["error"]
        time.sleep(3)
        st = quill.status()
        assert (
            st["fleet"]["children"]["writer"]["restarts"] == 0 and st["fleet"]["crash_loops"] == []
        )
        assert "state.db-shm" in st["store"]["error"]
        checks = {c["check"]: c for c in quill.json("doctor", check=False)}
        assert (
            checks["shared memory"]["status"] == "fail"
            and "directory" in checks["shared memory"]["detail"]
        )
        shm.rmdir()  # the operator's fix: the writer carries on by itself
        _push(quill, "s", 5, 3)
        _wait_for(
            lambda: (quill.status()["store"] or {}).get("messages") == 8, what="the drain to resume"
        )
    finally:
        assert stop_fleet(fleet) == 0
    events = [json.loads(line) for line in (home / "logs" / "writer.log").read_text().splitlines()]
    assert any(e.get("event") == "writer.shared_memory_unusable" for e in events)

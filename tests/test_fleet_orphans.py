"""Workers orphaned by a ``kill -9`` of their supervisor: the restarted fleet stops them and
waits for them, and reports them as orphans, never as a crash loop. Real fleets (``quill
run``), real ``kill -9``, a real PostgreSQL lock to hold a writer inside its chunk.

* The writer's example: the killed fleet's writer is inside a chunk transaction (waiting for a
  session lock a test transaction holds), so the SIGTERM its parent's death sent cannot stop
  it and it keeps ``writer.lock``. The new fleet shows it as an orphaned writer, kills it after
  the grace, starts its own writer, and applies the chunk once.
* Every role (writer, scheduler, consumer, watch, http): orphans frozen with SIGSTOP (which
  no graceful stop reaches) are found by the new fleet, killed after the grace, and replaced.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psycopg
from conftest import QuillCLI, stop_fleet
from private_servers import free_port

#: ``workers.orphans.ORPHAN_GRACE_S`` (15 s), written out, plus slack for two busy cores.
GRACE_BOUND_S = 15.0 + 15.0


def _wait(pred, what: str, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _kill9(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)


def _supervisor(home: Path) -> dict:
    from quill.home import RunDir

    return RunDir(home.resolve()).live("supervisor") or {}


def _live_pid(home: Path, role: str) -> int | None:
    from quill.home import RunDir

    st = RunDir(home.resolve()).live(role)
    return st["pid"] if st else None


def test_an_orphaned_writer_inside_its_chunk_is_stopped_not_taken_for_a_crash_loop(
    tmp_path, pg_store_url
):
    from quill.spool import Spool

    home = tmp_path / "host"
    home.mkdir()
    (home / "config.toml").write_text(
        f'[store]\nurl = "{pg_store_url}"\n[watch]\nenabled = false\n'
    )
    quill = QuillCLI(home)
    spool = Spool(home / "spool")
    spool.append(
        "messages.append", {"session_id": "s", "messages": [{"role": "user", "content": "x"}]}
    )
    lock = psycopg.connect(pg_store_url, autocommit=True)
    first = quill.start_fleet()
    second = None
    try:
        # The first fleet creates the schema and applies "x"; then the test takes the
        # session's lock, and the next chunk waits for it inside its transaction.
        _wait(lambda: _count(pg_store_url) == 1, "the first message to be applied")
        lock.execute("BEGIN")
        lock.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", ("s",))
        spool.append(
            "messages.append", {"session_id": "s", "messages": [{"role": "user", "content": "y"}]}
        )
        _wait(lambda: _writer_waits_for_lock(pg_store_url), "the writer to wait inside its chunk")
        orphan = _live_pid(home, "writer")
        assert orphan is not None
        _kill9(first.pid)
        first.wait(10)
        time.sleep(1.0)  # its SIGTERM (the lifeline) arrived: the writer is still in its chunk
        assert _alive(orphan)

        second = quill.start_fleet()
        seen = _wait(
            lambda: _orphan_reported(home, "writer"), "the new fleet to report the orphaned writer"
        )
        assert seen["pid"] == orphan, seen
        text = quill.run("status", check=False).stdout
        if _alive(orphan):  # still alive after status returned: status had to show it
            assert "ORPHANED the writer" in text, text
        assert "CRASH LOOP" not in text, text
        _no_crash_loop(home, 6.0)  # a writer refused its lease five times takes ~5 s
        assert not quill.status()["fleet"]["crash_loops"]
        _wait(lambda: not _alive(orphan), "the orphan to be killed", GRACE_BOUND_S)
        lock.execute("ROLLBACK")  # the new writer's chunk goes through
        _wait(lambda: _count(pg_store_url) == 2, "the second message to be applied")
        new = _wait(lambda: _live_pid(home, "writer"), "the new fleet's writer")
        assert new != orphan
        sup = _supervisor(home)
        assert sup["restarts"]["writer"] == 0 and not sup["crash_loops"], sup
        assert not sup.get("orphans"), sup
    finally:
        lock.close()
        spool.close()
        if second is not None:
            assert stop_fleet(second) == 0
        if first.poll() is None:
            first.kill()
    with psycopg.connect(pg_store_url, autocommit=True) as conn:
        rows = conn.execute("SELECT content FROM messages ORDER BY content").fetchall()
    assert [r[0] for r in rows] == ["x", "y"]  # once each
    log = (home / "logs" / "supervisor.log").read_text(errors="replace")
    assert "supervisor.orphan" in log and "supervisor.crash_loop" not in log


def _orphan_reported(home: Path, role: str) -> dict | None:
    """The orphan of ``role`` the live supervisor reports; asserts no crash loop meanwhile."""
    sup = _supervisor(home)
    assert not sup.get("crash_loops"), sup
    return (sup.get("orphans") or {}).get(role)


def _no_crash_loop(home: Path, seconds: float) -> None:
    """Sample the new fleet's status for ``seconds``: no role may be in a crash loop."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        sup = _supervisor(home)
        assert not sup.get("crash_loops"), sup
        time.sleep(0.2)


def _count(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        if conn.execute("SELECT to_regclass('messages')").fetchone()[0] is None:
            return 0
        return conn.execute("SELECT count(*) FROM messages").fetchone()[0]


def _writer_waits_for_lock(url: str) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        return bool(
            conn.execute(
                "SELECT 1 FROM pg_stat_activity WHERE application_name LIKE 'quill-writer:%%' "
                "AND wait_event_type = 'Lock'"
            ).fetchone()
        )


ROLES = ("writer", "scheduler", "consumer", "watch", "http")


def test_frozen_orphans_of_every_role_are_killed_and_replaced(tmp_path):
    home = tmp_path / "host"
    home.mkdir()
    port = free_port()
    (home / "config.toml").write_text(f'[http]\nlisten = "127.0.0.1:{port}"\n')
    quill = QuillCLI(home)
    first = quill.start_fleet()
    second = None
    try:
        old = {r: _wait(lambda r=r: _live_pid(home, r), f"the {r} to publish") for r in ROLES}
        for pid in old.values():
            os.kill(pid, signal.SIGSTOP)  # frozen: no graceful stop can reach them
        _kill9(first.pid)
        first.wait(10)

        second = quill.start_fleet()
        _wait(
            lambda: all(_orphan_reported(home, r) for r in ROLES),
            "the new fleet to find an orphan of every role",
        )
        _no_crash_loop(home, 6.0)
        assert not quill.status()["fleet"]["crash_loops"]
        for role, pid in old.items():
            _wait(lambda pid=pid: not _alive(pid), f"the orphaned {role} to die", GRACE_BOUND_S)
        new = {
            r: _wait(
                lambda r=r: _live_pid(home, r) not in (None, old[r]), f"the new {r}", GRACE_BOUND_S
            )
            for r in ROLES
        }
        assert all(new.values()), (old, new)
        sup = _supervisor(home)
        assert not sup["crash_loops"] and not sup.get("orphans"), sup
        assert all(n == 0 for n in sup["restarts"].values()), sup["restarts"]
    finally:
        for pid in old.values() if "old" in locals() else ():
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        if second is not None:
            assert stop_fleet(second) == 0
        if first.poll() is None:
            first.kill()

"""Honest fleet state. Run-dir state from a dead process is history, not the
present; process identity survives a shift of the kernel's boot-time estimate; restarts keep
the writer up and every crash-looping role is named."""

from __future__ import annotations

import json
import os
import signal
import socket
import time

import psutil
from conftest import damage_pages, stop_fleet, worker_pids
from semantics_helpers import Store

from quill.home import holder_alive, process_identity
from quill.jobs.prune import orphan_sweep
from quill.workers.child import CRASH_LOOP_BACKOFF_S, WRITER_MAX_DELAY_S


def _push(quill, session: str, n: int) -> None:
    lines = "\n".join(
        json.dumps({"role": "user", "id": f"{session}-{i}", "content": f"{session} message {i}"})
        for i in range(n)
    )
    quill.run("push", "--session", session, input=lines)


def _wait_for(predicate, timeout: float = 30.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _live_pid(home, role: str) -> int | None:
    try:
        st = json.loads((home / "run" / f"{role}.json").read_text())
    except (OSError, ValueError):
        return None
    return st["pid"] if holder_alive(st) else None


def _live_writer_pid(home) -> int | None:
    return _live_pid(home, "writer")


def test_a_dead_writers_halt_status_is_history_after_recover(quill, home):
    fleet = quill.start_fleet()
    try:
        _push(quill, "h", 400)
        quill.wait_idle()
        quill.run("snapshot")
    finally:
        assert stop_fleet(fleet) == 0
    damage_pages(home / "state.db", "messages", leaves_only=True)
    fleet = quill.start_fleet()
    try:
        quill.run("jobs", "run", "quick_check", "--wait", "60", check=False)
        _wait_for(
            lambda: (quill.status()["fleet"].get("writer") or {}).get("halted"),
            what="the writer to halt",
        )
        _wait_for(  # the supervisor's next poll tells the console (and its log)
            lambda: "supervisor.halt_reported" in (home / "logs" / "supervisor.log").read_text(),
            what="the supervisor to report the halt",
        )
    finally:
        assert stop_fleet(fleet) == 0
    said = fleet.stderr.read()  # the foreground fleet says so, not only the logs
    assert "the writer halted (CorruptError" in said and "quill recover" in said, said
    # Stopped and halted: status shows the halt, exactly as a run reports it.
    st = quill.status()
    assert st["fleet"]["running"] is False and st["fleet"]["halt"]["cause"] == "CorruptError"
    assert quill.run("run", "--until-idle", "--timeout", "60", check=False).returncode == 5
    assert (
        json.loads((home / "run" / "writer.json").read_text())["halted"] is True
    )  # left by a dead writer
    out = quill.json("recover")
    assert out["swapped_by"] == "recover"
    for _ in range(3):  # every time: a dead writer's "halted" is never read as current
        assert quill.status()["fleet"]["halt"] is None
        proc = quill.run("run", "--until-idle", "--timeout", "60", check=False)
        assert proc.returncode == 0, proc.stderr
    assert quill.status()["store"]["messages"] == 400


def test_a_copied_data_dir_does_not_borrow_the_originals_live_processes(
    quill, home, tmp_path, fleet
):
    import shutil

    worker_pids(home)
    copy = tmp_path / "copy"
    # A live writer's doorbell is a named pipe, which shutil cannot copy (`cp -a` can).
    shutil.copytree(home, copy, ignore=shutil.ignore_patterns("*.db-shm", ".doorbell"))
    st = type(quill)(copy).status()
    assert st["fleet"]["running"] is False
    assert all(not (st["fleet"][r] or {}).get("alive") for r in ("writer", "scheduler", "consumer"))


def test_identity_survives_a_boot_time_estimate_shift_and_refuses_a_recycled_pid(
    quill, home, fleet
):
    worker_pids(home)
    lock = home / "run" / "fleet.lock"
    real = json.loads(lock.read_text())
    assert quill.status()["fleet"]["running"] is True
    # The epoch start time moves by 1 s when the kernel re-estimates the boot time; the
    # start tick does not.
    lock.write_text(json.dumps({**real, "create_time": real["create_time"] + 1.0}))
    assert quill.status()["fleet"]["running"] is True
    legacy = {
        k: v for k, v in real.items() if k not in ("start_ticks", "boot_id")
    }  # an old-format record
    lock.write_text(json.dumps({**legacy, "create_time": real["create_time"] - 1.0}))
    assert quill.status()["fleet"]["running"] is True
    lock.write_text(
        json.dumps({**real, "start_ticks": real["start_ticks"] - 1})
    )  # same pid, another process
    assert quill.status()["fleet"]["running"] is False
    lock.write_text(json.dumps({**legacy, "create_time": real["create_time"] - 0.5}))
    assert quill.status()["fleet"]["running"] is False
    lock.write_text(json.dumps(real))


def test_orphan_sweep_keeps_a_live_owner_whose_start_time_moved_by_a_second(tmp_path):
    store = Store(tmp_path)
    try:
        me, host = psutil.Process(), socket.gethostname()
        for sid, shift in (
            ("shifted-up", 1.0),
            ("shifted-down", -1.0),
            ("recycled", -100.0),
            ("half", 0.5),
        ):
            store.apply(
                "session.create",
                {
                    "session_id": sid,
                    "source": "cli",
                    "owner": {"host": host, "pid": me.pid, "create_time": me.create_time() + shift},
                },
            )
        store.job(orphan_sweep)  # emits session.end ops and drains them
        ended = dict(store.conn.execute("SELECT id, end_reason FROM sessions"))
        assert ended == {
            "shifted-up": None,
            "shifted-down": None,
            "recycled": "orphan_sweep",
            "half": "orphan_sweep",
        }
    finally:
        store.close()


def test_process_identity_is_exact_in_clock_ticks():
    me = process_identity()
    assert holder_alive(me)
    assert not holder_alive({**me, "start_ticks": me["start_ticks"] + 1})
    assert not holder_alive({**me, "boot_id": "another-boot"})
    assert not holder_alive({"pid": me["pid"]})  # malformed: not alive


def test_a_killed_supervisor_is_not_running(quill, home):
    fleet = quill.start_fleet()
    worker_pids(home)
    assert quill.status()["fleet"]["running"] is True
    fleet.send_signal(signal.SIGKILL)
    fleet.wait()
    st = quill.status()
    assert st["fleet"]["running"] is False and st["fleet"]["crash_loops"] == []
    sup = json.loads((home / "run" / "supervisor.json").read_text())
    assert sup["state"] == "running"  # what the dead process left behind


def test_restarts_are_counted_shown_and_printed_and_the_writer_comes_back_fast(quill, home):
    fleet = quill.start_fleet()
    try:
        pids = dict(zip(("writer", "scheduler", "consumer"), worker_pids(home)))
        for role in ("writer", "consumer"):
            os.kill(pids[role], signal.SIGKILL)
        children = _wait_for(lambda: quill.status()["fleet"].get("children") or {}, what="children")
        children = _wait_for(
            lambda: (
                all(
                    quill.status()["fleet"]["children"][r]["restarts"] == 1
                    for r in ("writer", "consumer")
                )
                and quill.status()["fleet"]["children"]
            ),
            what="restarts",
        )
        assert (
            children["writer"]["last_exit_code"] == -9
            and children["consumer"]["last_exit_code"] == -9
        )
        assert children["scheduler"]["restarts"] == 0
        human = quill.run("status", check=False).stdout
        assert "restarts writer: 1" in human and "restarts consumer: 1" in human
        # The writer and the consumer under fire: kill -9 both again and again (two crash
        # loops); each time the writer is back within about a second.
        for i in range(8):
            pid = _wait_for(lambda: _live_writer_pid(home), what="a live writer")
            os.kill(pid, signal.SIGKILL)
            _wait_for(
                lambda killed=pid: _live_writer_pid(home) not in (None, killed),
                timeout=30,
                what="the writer back",
            )
            # once crash-looping the consumer restarts only each minute
            consumer = _live_pid(home, "consumer")
            if i < 5 and consumer:
                os.kill(consumer, signal.SIGKILL)
        # Every role in a crash loop is named (how many loop depends on how fast the
        # machine restarts them; the writer always does here).
        st = _wait_for(
            lambda: (s := quill.status()) and s["fleet"]["crash_loops"] and s,
            timeout=60,
            what="a crash-looping role",
        )
        looping = {r for r, c in st["fleet"]["children"].items() if c["crash_loop"]}
        assert "writer" in looping and {c["role"] for c in st["fleet"]["crash_loops"]} == looping
        human = quill.run("status", check=False)
        assert human.returncode == 1 and all(
            f"the {r} keeps exiting" in human.stdout for r in looping
        )
        # The supervisor's restart delay for the writer stayed bounded through its crash loop
        # (the time to come back adds only the process start-up, which load stretches).
        events = [
            json.loads(line) for line in (home / "logs" / "supervisor.log").read_text().splitlines()
        ]
        delays = [
            e
            for e in events
            if e.get("event") == "supervisor.restart_scheduled" and e["child"] == "writer"
        ]
        assert len(delays) >= 9 and any(e["crash_loop"] for e in delays)
        assert max(e["restart_in_s"] for e in delays) <= WRITER_MAX_DELAY_S
        others = [
            e["restart_in_s"]
            for e in events
            if e.get("event") == "supervisor.restart_scheduled"
            and e["child"] != "writer"
            and e["crash_loop"]
        ]
        assert all(d == CRASH_LOOP_BACKOFF_S for d in others)  # only the writer is exempt
    finally:
        stop_fleet(fleet)
    console = fleet.stderr.read()
    assert (
        "the writer (pid" in console
        and "restarting the writer" in console
        and "crash-looping" in console
    )


def test_a_reader_meeting_a_damaged_page_gets_the_writer_to_check_now(quill, home):
    """Pages of `messages` damaged while the fleet was stopped: the writer does not read
    them, so it goes on applying until a check finds the damage. A reader that meets it says
    so, and queues a quick_check, so the writer (which owns the halt) halts now, not at the
    next scheduled check (hourly)."""
    _push(quill, "d", 400)
    quill.drain()
    damage_pages(home / "state.db", "messages", count=6, leaves_only=True)
    fleet = quill.start_fleet()
    try:
        proc = quill.run("search", "message", "--substring", "--limit", "1000", check=False)
        assert proc.returncode != 0 and "quick_check was queued" in proc.stderr, proc.stderr
        _wait_for(
            lambda: (quill.status()["fleet"].get("writer") or {}).get("halted"),
            timeout=90,
            what="the writer to halt after the queued check",
        )
    finally:
        assert stop_fleet(fleet) == 0
    assert quill.status()["fleet"]["halt"]["cause"] == "CorruptError"

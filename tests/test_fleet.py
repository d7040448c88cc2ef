"""The supervised fleet with real processes: until-idle, restarts after kill -9 with nothing
lost or doubled, a second writer refused, clean stop on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
from conftest import stop_fleet, worker_pids

from quill.home import read_holder
from quill.spool import Spool
from quill.store import Reader
from quill.store.errors import CantOpenError, LeaseHeldError
from quill.store.lease import Lease

BATCHES, PER_BATCH = 1000, 20


def _fill_spool(home, batches=BATCHES):
    with Spool(home / "spool") as sp:
        for b in range(batches):
            sp.append(
                "messages.append",
                {
                    "session_id": f"s{b % 7}",
                    "messages": [
                        {
                            "role": "user",
                            "id": f"{b}-{i}",
                            "content": f"batch {b} message {i} lorem ipsum " * 4,
                        }
                        for i in range(PER_BATCH)
                    ],
                },
            )


def _counts(home):
    with Reader(home / "state.db") as r:
        f = r.figures()
        dup = r.conn.execute(
            "SELECT count(*) FROM (SELECT session_id, ext_id FROM messages "
            "GROUP BY session_id, ext_id HAVING count(*) > 1)"
        ).fetchone()[0]
        return f["messages"], f["applied_batches"], dup


def test_until_idle_drains_and_exits_zero(quill, home):
    home.mkdir(parents=True)
    _fill_spool(home, 50)
    proc = quill.run("run", "--until-idle", "--timeout", "120")
    assert proc.returncode == 0
    assert _counts(home) == (50 * PER_BATCH, 50, 0)
    assert not (home / "run" / "halt.json").exists()


def test_kill_9_of_the_writer_loses_nothing_and_doubles_nothing(quill, home):
    home.mkdir(parents=True)
    (home / "config.toml").write_text("[writer]\nchunk_rows = 20\n")  # many small transactions
    _fill_spool(home)
    fleet = quill.start_fleet()
    kills = 0
    try:
        deadline = time.monotonic() + 120
        last_pid = None
        while kills < 3 and time.monotonic() < deadline:
            holder = read_holder(home / "run" / "writer.lock")
            pid = holder.get("pid")
            try:
                applied = _counts(home)[0]
            except CantOpenError:
                applied = 0
            if pid and pid != last_pid and 0 < applied < BATCHES * PER_BATCH:
                os.kill(pid, signal.SIGKILL)
                kills += 1
                last_pid = pid
            time.sleep(0.05)
        assert kills == 3, "the drain finished before three kills; raise BATCHES"
        quill.wait_idle()
        assert _counts(home) == (BATCHES * PER_BATCH, BATCHES, 0)
        log = (home / "logs" / "supervisor.log").read_text()
        assert log.count('"supervisor.child_exited"') >= 3
    finally:
        assert stop_fleet(fleet) == 0


def test_second_writer_is_refused_naming_the_holder(quill, home, fleet):
    quill.run("push", "--session", "x", input='{"role": "user", "content": "hi"}')
    quill.wait_idle()
    with pytest.raises(LeaseHeldError) as info:
        Lease(home / "run" / "writer.lock").acquire()
    assert info.value.holder["pid"] == read_holder(home / "run" / "writer.lock")["pid"]
    assert "pid=" in str(info.value)


def test_a_second_fleet_on_the_same_home_is_refused(quill, home, fleet):
    quill.wait_idle(timeout=60) if (home / "state.db").exists() else time.sleep(1.0)
    proc = quill.run("run", "--until-idle", check=False)
    assert proc.returncode == 1 and "already running" in proc.stderr


def test_push_wait_gives_read_your_writes(quill, home, fleet):
    out = quill.json(
        "push",
        "--session",
        "rw",
        "--wait",
        "30",
        input='{"role": "user", "content": "read your writes please"}',
    )
    assert out[0]["outcome"] == "applied"
    hits = quill.json("search", "writes")["hits"]
    assert [h["session_id"] for h in hits] == ["rw"]


def test_sigterm_stops_every_child(quill, home):
    fleet = quill.start_fleet()
    pids = worker_pids(home)
    assert stop_fleet(fleet) == 0
    for pid in pids:
        assert pid and not _alive(pid)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); check its state.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_kill_9_of_the_supervisor_takes_its_children_down(quill, home):
    fleet = quill.start_fleet()
    pids = worker_pids(home)
    fleet.send_signal(signal.SIGKILL)
    fleet.wait()
    deadline = time.monotonic() + 60  # the children end at the lifeline's SIGTERM
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.2)
    assert not any(_alive(p) for p in pids), "orphaned workers kept running"
    quill.run("push", "--session", "after", input='{"role": "user", "content": "next fleet"}')
    assert quill.run("run", "--until-idle", "--timeout", "60").returncode == 0


def test_a_hung_writer_is_killed_and_replaced(quill, home):
    home.mkdir(parents=True)
    (home / "config.toml").write_text("[writer]\nhung_after_s = 2\n")
    fleet = quill.start_fleet()
    try:
        quill.run(
            "push", "--session", "h", "--wait", "30", input='{"role": "user", "content": "one"}'
        )
        hung = json.loads((home / "run" / "writer.json").read_text())["pid"]
        os.kill(hung, signal.SIGSTOP)
        quill.run("push", "--session", "h", input='{"role": "user", "content": "two"}')
        # The replacement may apply "two" before it first publishes its status (the run dir
        # still names the hung pid then): wait for the replacement's own record too.
        deadline = time.monotonic() + 60
        while True:
            st = quill.wait_idle(timeout=60)
            if st["fleet"]["writer"]["pid"] != hung or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert st["fleet"]["writer"]["pid"] != hung and not _alive(hung)
        assert [s["message_count"] for s in quill.json("sessions", "list")["sessions"]] == [2]
    finally:
        assert stop_fleet(fleet) == 0


def test_a_crash_looping_writer_ends_until_idle_with_exit_6(quill, home):
    (home / "state.db").mkdir(parents=True)  # the writer cannot open its store
    proc = quill.run("run", "--until-idle", "--timeout", "120", check=False)
    assert proc.returncode == 6 and "crash-looping" in proc.stderr
    sup = json.loads((home / "run" / "supervisor.json").read_text())
    assert (
        sup["state"] == "stopped"
        and sup["exit_code"] == 6
        and sup["crash_loops"][0]["role"] == "writer"
    )
    log = (home / "logs" / "supervisor.log").read_text()
    assert '"supervisor.crash_loop"' in log


def _fleet_processes(home) -> list:
    import psutil

    out = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        if str(home) in cmd and "workers" in cmd:
            out.append(p)
        elif p.pid != os.getpid() and any(str(home) in c for c in cmd) and "run" in cmd:
            out.append(p)
    return out


def test_supervisor_killed_during_startup_leaves_no_worker_behind(quill, home):
    fleet = quill.start_fleet()
    time.sleep(0.3)  # children are still importing: they have not armed anything yet
    fleet.send_signal(signal.SIGKILL)
    fleet.wait()
    deadline = time.monotonic() + 60  # the children end at the lifeline's SIGTERM
    while time.monotonic() < deadline and _fleet_processes(home):
        time.sleep(0.2)
    assert _fleet_processes(home) == []

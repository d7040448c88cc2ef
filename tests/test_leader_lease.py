"""Cluster leadership has an expiry (``store.postgres.election``): real processes run the real
election code on the test PostgreSQL database. A leader frozen with SIGSTOP (the kernel keeps
its TCP session alive, as for a hung process) loses the cluster to a standby within the
documented bound (docs/backends.md: ``LEASE_S + STANDBY_RETRY_S`` = 17 s after its last
renewal), and when it is continued it notices on its own clock that its lease ran out and
never acts as leader again: no two processes act as leader at once. The network-cut case is
tests/test_leader_netns.py."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import REPO
from semantics_helpers import Store

pytest.importorskip("psycopg")

#: The documented takeover bound (s, docs/backends.md) plus slack for two busy cores.
TAKEOVER_BOUND_S = 17.0 + 3.0

#: One contender: stands by (``try_lead`` every ``STANDBY_RETRY_S``, as the scheduler does)
#: until it leads, then acts every 0.1 s while ``still_leader()`` holds. Each line of its log
#: is ``<event> <wall time>``; an ``act`` line carries the time taken BEFORE the check, so a
#: freeze between the check and the write cannot date an act after the freeze.
CONTENDER = textwrap.dedent(
    """
    import sys, time
    from quill.store.postgres.election import Leadership
    from quill.workers.standby import STANDBY_RETRY_S

    url, log = sys.argv[1], sys.argv[2]
    leader = Leadership(url, "scheduler")
    leading = False
    with open(log, "a", buffering=1) as out:
        out.write(f"ready {time.time()}\\n")
        while True:
            t = time.time()
            if not leading:
                leading = leader.try_lead()
                if leading:
                    out.write(f"lead {t}\\n")
                else:
                    time.sleep(STANDBY_RETRY_S)
                continue
            if leader.still_leader():
                out.write(f"act {t}\\n")
            else:
                out.write(f"lost {time.time()}\\n")
                leading = False
            time.sleep(0.1)
    """
)


def _events(log: Path) -> list[tuple[str, float]]:
    if not log.exists():
        return []
    out = []
    for line in log.read_text().splitlines():
        parts = line.split()
        if len(parts) == 2:
            out.append((parts[0], float(parts[1])))
    return out


def _until(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def _contender(url: str, log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", CONTENDER, url, str(log)],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def test_a_frozen_leader_loses_to_a_standby_within_the_bound_and_never_acts_after(
    tmp_path, pg_store_url
):
    Store(tmp_path / "store", pg_store_url).backend.close()  # the store exists (its tables)
    logs = {name: tmp_path / f"{name}.log" for name in ("a", "b")}
    a = _contender(pg_store_url, logs["a"])
    b = None
    try:
        _until(lambda: any(e == "act" for e, _ in _events(logs["a"])), 30, "a to lead")
        b = _contender(pg_store_url, logs["b"])
        _until(lambda: _events(logs["b"]), 30, "b to start")
        time.sleep(2.5)  # b tries and fails while a is alive and renewing
        assert not any(e == "lead" for e, _ in _events(logs["b"])), "two leaders at once"
        frozen_at = time.time()
        a.send_signal(signal.SIGSTOP)
        took_over = _until(
            lambda: next((t for e, t in _events(logs["b"]) if e == "lead"), None),
            TAKEOVER_BOUND_S + 2,
            "the standby to take over from the frozen leader",
        )
        took_after = took_over - frozen_at
        # Not before the frozen leader's lease could have run out (its last renewal was at
        # most RENEW_S = 3 s before the freeze), and within the bound.
        assert 15.0 - 3.0 - 1.0 < took_after <= TAKEOVER_BOUND_S, took_after
        continued_at = time.time()
        a.send_signal(signal.SIGCONT)
        lost = _until(
            lambda: next((t for e, t in _events(logs["a"]) if e == "lost"), None),
            10,
            "the continued leader to notice it lost the lease",
        )
        assert lost - continued_at < 3.0
        print(  # the figures, with pytest -s
            f"takeover {took_after:.1f} s after the freeze; the continued leader saw its loss "
            f"{lost - continued_at:.2f} s after SIGCONT"
        )
        time.sleep(2.0)  # the continued process keeps running as a standby
        a_acts = [t for e, t in _events(logs["a"]) if e == "act"]
        assert a_acts and max(a_acts) < frozen_at, "the frozen leader acted after its freeze"
        assert not any(e == "lead" and t > frozen_at for e, t in _events(logs["a"]))
        b_acts = [t for e, t in _events(logs["b"]) if e == "act"]
        assert b_acts and max(b_acts) > lost, "the new leader stopped leading"
    finally:
        for p in (a, b):
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.kill()
                p.wait(10)


def _queued(home: Path) -> int:
    """Tasks queued in a data dir's queue.db (every schedule fired there)."""
    import sqlite3

    if not (home / "queue.db").exists():
        return 0
    with sqlite3.connect(home / "queue.db", timeout=10) as conn:
        try:
            return conn.execute("SELECT count(*) FROM task").fetchone()[0]
        except sqlite3.OperationalError:
            return 0


def _role(home: Path) -> str | None:
    try:
        return json.loads((home / "run" / "scheduler.json").read_text()).get("role")
    except (OSError, ValueError):
        return None


@pytest.mark.slow  # ~40 s: two worker starts and a full lease
def test_a_frozen_scheduler_fires_nothing_when_continued_and_the_standby_fires_instead(
    tmp_path, pg_store_url
):
    """Real scheduler workers (``quill.ops.worker_main scheduler``) on one store, a schedule
    firing every second: a fired run lands in the firing host's queue.db. The leader frozen
    right after a fire is replaced within the bound, and once continued it fires nothing
    more and stands by. (Its scheduler thread wakes with runs overdue; the new leader has moved
    them on in the shared job store, and the lease check in ``_LedScheduler`` stops a run
    read before that.) It stays up as a standby."""
    from conftest import QuillCLI

    Store(tmp_path / "store", pg_store_url).backend.close()
    homes = []
    for name in ("a", "b"):
        home = tmp_path / name
        home.mkdir()
        (home / "config.toml").write_text(f'[store]\nurl = "{pg_store_url}"\n')
        homes.append(home)
    a_home, b_home = homes
    QuillCLI(a_home).run("schedule", "add", "pg_analyze", "--every", "1s")
    worker = [sys.executable, "-m", "quill.ops.worker_main", "scheduler", "--home"]
    a = subprocess.Popen([*worker, str(a_home)], cwd=REPO, stderr=subprocess.DEVNULL)
    b = None
    try:
        _until(lambda: _role(a_home) == "leader" and _queued(a_home) >= 2, 60, "a to lead")
        b = subprocess.Popen([*worker, str(b_home)], cwd=REPO, stderr=subprocess.DEVNULL)
        _until(lambda: _role(b_home) == "standby", 60, "b to stand by")
        before = _queued(a_home)
        _until(lambda: _queued(a_home) > before, 10, "a to fire")  # just fired: freeze now
        a.send_signal(signal.SIGSTOP)
        frozen_at, fired_by_a = time.time(), _queued(a_home)
        assert _queued(b_home) == 0
        _until(lambda: _queued(b_home) > 0, TAKEOVER_BOUND_S + 2, "the standby to fire")
        assert time.time() - frozen_at <= TAKEOVER_BOUND_S + 2
        a.send_signal(signal.SIGCONT)
        fired_by_b = _queued(b_home)
        time.sleep(4)
        assert _queued(a_home) == fired_by_a, "the continued leader fired again"
        assert _queued(b_home) > fired_by_b, "the new leader stopped firing"
        # It left leadership and stands by in the same process (no restart).
        _until(lambda: _role(a_home) == "standby", 20, "the continued leader to stand by")
        assert a.poll() is None
    finally:
        for p in (a, b):
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()

"""A leading scheduler rides out a PostgreSQL outage in place: the real scheduler worker
(``quill.ops.worker_main scheduler``) runs in a network namespace of its own, joined to the
host by a veth pair, on a PRIVATE PostgreSQL listening on the veth's host address (the shared
server is never touched). Its link is cut: it stops leading (fires nothing), stays up as a
standby whose status says the store cannot be reached, and once the link is back it leads and
fires again — the same process, never restarted.

Needs root (``ip netns``) and PostgreSQL's server binaries; skipped with the reason otherwise.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import REPO, QuillCLI
from semantics_helpers import Store
from test_leader_lease import _queued
from test_leader_netns import _namespace, _private_postgres, _run, _until

pytest.importorskip("psycopg")


@pytest.fixture
def net() -> Iterator[tuple[str, str, str, int]]:
    """``(namespace, host-side interface, host address, port)`` (test_leader_netns.py)."""
    with _namespace() as (ns, host_if, host_ip, _ns_ip), _private_postgres(host_ip) as port:
        yield ns, host_if, host_ip, port


def _status(home: Path) -> dict:
    try:
        return json.loads((home / "run" / "scheduler.json").read_text())
    except (OSError, ValueError):
        return {}


@pytest.mark.slow  # ~40 s: a private server, an outage and the lease taken back
def test_a_leader_cut_off_from_the_store_stands_by_and_leads_again_without_a_restart(tmp_path, net):
    ns, host_if, host_ip, port = net
    Store(tmp_path / "store", f"postgresql://postgres@127.0.0.1:{port}/postgres").backend.close()
    home = tmp_path / "a"
    home.mkdir()
    (home / "config.toml").write_text(
        f'[store]\nurl = "postgresql://postgres@{host_ip}:{port}/postgres"\n'
    )
    QuillCLI(home).run("schedule", "add", "pg_analyze", "--every", "1s")
    worker = subprocess.Popen(
        [
            *("ip", "netns", "exec", ns),
            *(sys.executable, "-m", "quill.ops.worker_main", "scheduler", "--home", str(home)),
        ],
        cwd=REPO,
        stderr=subprocess.DEVNULL,
    )
    try:
        _until(lambda: _status(home).get("role") == "leader" and _queued(home) >= 2, 60, "a leader")
        _run("ip", "link", "set", host_if, "down")
        cut = _until(
            lambda: (s := _status(home)).get("role") == "standby" and s.get("store_error") and s,
            30,
            "the cut leader to stand by",
        )
        assert cut["standby_reason"] == "the store cannot be reached", cut
        assert cut["store_unreachable_since"], cut
        human = QuillCLI(home).run("status", check=False, timeout=120).stdout
        assert "scheduler standing by" in human and "cannot be reached" in human, human
        fired = _queued(home)
        time.sleep(3)
        assert _queued(home) == fired, "a scheduler cut off from the store fired"
        assert worker.poll() is None, "the scheduler exited during the outage"
        _run("ip", "link", "set", host_if, "up")
        _until(
            lambda: _status(home).get("role") == "leader" and _queued(home) > fired + 1,
            60,
            "the scheduler to lead and fire again",
        )
        assert worker.poll() is None, "the scheduler was restarted"
        log = (home / "logs" / "scheduler.log").read_text()
        assert "scheduler.crashed" not in log
        assert "scheduler.store_back" in log
    finally:
        worker.terminate()
        try:
            assert worker.wait(30) == 0
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait()


def test_what_the_scheduler_takes_for_a_store_outage(pg_store_url):
    """Classified by type and SQLSTATE, never by text: a server nobody answers at, a session
    the server ends (57P01) and a serialization failure are outages to wait out as a standby;
    a statement the server refuses is not (the scheduler fails loudly)."""
    import psycopg
    import sqlalchemy
    from sqlalchemy import exc as sa_exc

    from quill.store.errors import StoreError, TransientError
    from quill.workers.standby import store_unreachable

    def raised(url: str, sql: str) -> BaseException:
        engine = sqlalchemy.create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
        try:
            with engine.connect() as conn:
                conn.exec_driver_sql(sql)
        except sa_exc.DBAPIError as exc:
            return exc
        finally:
            engine.dispose()
        raise AssertionError(f"{sql} did not fail")

    closed = "postgresql://postgres@127.0.0.1:1/postgres?connect_timeout=2"
    assert store_unreachable(raised(closed, "SELECT 1"))
    assert store_unreachable(raised(pg_store_url, "SELECT pg_terminate_backend(pg_backend_pid())"))
    serialization = "DO $$ BEGIN RAISE EXCEPTION USING ERRCODE = 'serialization_failure'; END $$"
    assert store_unreachable(raised(pg_store_url, serialization))
    refused = raised(pg_store_url, "SELECT * FROM no_such_table")
    assert isinstance(refused.orig, psycopg.Error) and not store_unreachable(refused)
    assert store_unreachable(TransientError("gone")) and not store_unreachable(StoreError("x"))


def test_a_per_host_run_fired_while_the_store_is_unreachable_is_held(tmp_path, redis_url):
    """A per-host job's fan-out reads the shared store's hosts; with the store unreachable the
    run is held for ``refire`` (as a run fired while the queue is down), not lost to an error
    in APScheduler's thread."""
    import structlog
    from harness import make_home

    from quill.workers import scheduler

    cfg = make_home(
        tmp_path / "home",
        "postgresql://postgres@127.0.0.1:1/postgres",
        queue={"url": redis_url},
        store={"connect_timeout_s": 2},
    )
    scheduler.serve(cfg, structlog.get_logger())
    try:
        scheduler.fire("orphan_sweep")
        assert scheduler._unfired == ["orphan_sweep"]
    finally:
        scheduler._unfired.clear()
        scheduler._serving = None

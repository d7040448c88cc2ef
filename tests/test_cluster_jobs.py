"""Jobs on a cluster: huey queues on the real Redis server, one scheduler per
cluster elected by a lease in the store (real processes, real kill -9), PostgreSQL
maintenance through amcheck and ANALYZE. PostgreSQL/Redis only by nature: the embedded
store's queue and scheduler are covered by tests/test_jobs.py and tests/test_fleet.py."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from conftest import REPO
from semantics_helpers import Store, assistant, call, tool, user

from quill import home as config
from quill.jobs import catalog, pg_jobs
from quill.jobs.queues import build, redis_names

psycopg = pytest.importorskip("psycopg")


def _home(root: Path, name: str, store_url: str, queue_url: str | None = None) -> Path:
    home = root / name
    home.mkdir(parents=True)
    text = f'[store]\nurl = "{store_url}"\n'
    if queue_url:
        text += f'[queue]\nurl = "{queue_url}"\n'
    (home / "config.toml").write_text(text)
    return home


def _worker(role: str, home: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "quill.ops.worker_main", role, "--home", str(home)],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _status(home: Path, name: str) -> dict:
    try:
        return json.loads((home / "run" / f"{name}.json").read_text())
    except (OSError, ValueError):
        return {}


def _until(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_redis_worker_queue_is_shared_and_store_queues_stay_per_host(tmp_path, redis_url):
    ns = "t" + uuid.uuid4().hex[:8]
    a = build(tmp_path / "a.db", url=redis_url, host_id="host-a.1", namespace=ns)
    b = build(tmp_path / "b.db", url=redis_url, host_id="host-b.1", namespace=ns)
    try:
        # huey keeps only [A-Za-z0-9_] of a name: punctuation must not make two hosts collide.
        assert redis_names("quill-host.1")[0] != redis_names("quillhost1")[0]
        a.enqueue("pg_analyze", store_url="postgresql://x/y")
        a.enqueue("wal_checkpoint", mode="PASSIVE")  # a store job: host a's writer only
        assert b.worker.pending_count() == 1  # any host's consumer may take it
        task = b.worker.dequeue()
        assert task.name == "pg_analyze" and task.kwargs == {"store_url": "postgresql://x/y"}
        assert (a.store.pending_count(), b.store.pending_count()) == (1, 0)
    finally:
        for q in (a.store, a.worker, b.store, b.worker):
            q.flush()


def test_any_hosts_consumer_runs_a_cluster_job_and_its_run_is_recorded_in_the_store(
    tmp_path, pg_store_url, redis_url
):
    ns_url = redis_url  # queue names come from each host's spool id: unique per test
    home_a = _home(tmp_path, "a", pg_store_url, ns_url)
    home_b = _home(tmp_path, "b", pg_store_url, ns_url)
    procs = [_worker("writer", home_b), _worker("consumer", home_b)]
    try:
        _until(
            lambda: _status(home_b, "consumer") and _status(home_b, "writer"),
            60,
            "host b's workers",
        )
        from quill.jobs.queues import build_for

        build_for(config.load(home_a)).enqueue(
            "pg_analyze", store_url=pg_store_url
        )  # fired on host a
        with psycopg.connect(pg_store_url) as conn:
            row = _until(
                lambda: conn.execute(
                    "SELECT outcome, figures FROM job_runs WHERE job = 'pg_analyze' "
                    "AND outcome <> 'running'"
                ).fetchone(),
                60,
                "the job run record",
            )
        assert row[0] == "ok" and "messages" in json.loads(row[1])["dead_tuples"]
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
            p.wait(30)


def test_one_scheduler_leads_the_cluster_and_a_standby_takes_over_after_kill_9(
    tmp_path, pg_store_url
):
    homes = [_home(tmp_path, f"h{i}", pg_store_url) for i in range(2)]
    procs = {h: _worker("scheduler", h) for h in homes}
    try:
        roles = _until(
            lambda: (
                (r := {h: _status(h, "scheduler").get("role") for h in homes})
                and sorted(map(str, r.values())) == ["leader", "standby"]
                and r
            ),
            60,
            "one leader, one standby",
        )
        leader = next(h for h, r in roles.items() if r == "leader")
        standby = next(h for h in homes if h != leader)
        time.sleep(3)  # the standby keeps trying and keeps failing while the leader lives
        assert _status(standby, "scheduler").get("role") == "standby"
        with psycopg.connect(pg_store_url) as conn:  # schedules live in the store's database
            ids = {r[0] for r in conn.execute("SELECT id FROM apscheduler_jobs")}
        assert {
            "pg_analyze",
            "pg_integrity_check",
            "auto_prune",
            "delete_empty",
            "orphan_sweep",
        } <= ids
        assert not ids & {"vacuum", "wal_checkpoint", "fts_optimize", "snapshot"}
        procs[leader].send_signal(signal.SIGKILL)
        procs[leader].wait()
        _until(
            lambda: _status(standby, "scheduler").get("role") == "leader",
            30,
            "the standby to take over",
        )
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                p.wait(30)


def test_amcheck_and_analyze_run_on_a_real_store(tmp_path, pg_store_url):
    store = Store(tmp_path, pg_store_url)
    try:
        store.apply(
            "messages.append",
            {
                "session_id": "s",
                "messages": [
                    user("check me"),
                    assistant(None, tool_calls=[call("c1")]),
                    tool("c1", "out"),
                ],
            },
        )
    finally:
        store.close()
    checked = pg_jobs.pg_integrity_check(pg_store_url)
    assert checked["ok"] and checked["indexes_checked"] >= 8 and checked["tables_checked"] >= 6
    analyzed = pg_jobs.pg_analyze(pg_store_url)
    assert analyzed["dead_tuples"]["messages"] >= 0
    assert {j.name for j in catalog.JOBS if j.backend == "postgres"} == {
        "pg_analyze",
        "pg_integrity_check",
    }


def test_the_leaders_orphan_sweep_runs_on_every_hosts_writer_and_closes_a_dead_owners_session(
    tmp_path, pg_store_url, redis_url, monkeypatch
):
    import multiprocessing
    import socket

    import psutil

    from quill.jobs.queues import build_for
    from quill.ops import logs
    from quill.ops.recover.postgres import drain
    from quill.spool import START, Spool, SpoolReader
    from quill.workers import scheduler

    leader, other = (
        _home(tmp_path, "leader", pg_store_url, redis_url),
        _home(tmp_path, "other", pg_store_url, redis_url),
    )
    child = multiprocessing.Process(target=time.sleep, args=(0,))
    child.start()
    dead = {
        "host": socket.gethostname(),
        "pid": child.pid,
        "create_time": psutil.Process(child.pid).create_time(),
    }
    child.join()
    me = psutil.Process()
    spool = Spool(other / "spool")  # sessions whose owners run on the NON-leader host
    spool.append("session.create", {"session_id": "dead-owner", "source": "cli", "owner": dead})
    spool.append(
        "session.create",
        {
            "session_id": "live-owner",
            "source": "cli",
            "owner": {"host": socket.gethostname(), "pid": me.pid, "create_time": me.create_time()},
        },
    )
    spool.close()
    log = logs.configure(None, "test")
    cfg_leader, cfg_other = config.load(leader), config.load(other)
    drain(cfg_other, log)  # the other host's cursor row: the leader now knows it
    queues = {"leader": build_for(cfg_leader), "other": build_for(cfg_other)}
    try:
        scheduler.serve(cfg_leader)  # what the leader's scheduler process does at start
        scheduler.fire("orphan_sweep")  # what the leader's schedule calls
        scheduler.fire("orphan_sweep")  # a second period before any writer ran: coalesced per host
        assert {k: [t.name for t in q.store.pending()] for k, q in queues.items()} == {
            "leader": ["orphan_sweep"],
            "other": ["orphan_sweep"],
        }
        drain(cfg_other, log)  # the other host's writer: runs its sweep, applies its ops
        with psycopg.connect(pg_store_url) as conn:
            ended = dict(conn.execute("SELECT id, end_reason FROM sessions").fetchall())
            runs = conn.execute(
                "SELECT outcome, figures FROM job_runs WHERE job = 'orphan_sweep'"
            ).fetchall()
        assert ended == {"dead-owner": "orphan_sweep", "live-owner": None}
        assert [
            (o, json.loads(f)["sessions_closed"], json.loads(f)["runner"]) for o, f in runs
        ] == [("ok", 1, "writer")]
        ends = [
            e.record["data"]
            for e in SpoolReader(other / "spool").read(START)
            if e.record and e.record["op"] == "session.end"
        ]  # the spool is the log of the close
        assert [(d["session_id"], d["actor"]) for d in ends] == [("dead-owner", "job:orphan_sweep")]
    finally:
        for q in queues.values():
            q.store.flush()


@pytest.mark.parametrize("store", ["sqlite", "postgresql"])
def test_jobs_run_reaches_the_fleets_queue_when_the_queue_is_redis(
    tmp_path, store, pg_store_url, redis_url
):
    """`quill jobs run` (and the CLI's other enqueuers) put the job on the queue the fleet
    consumes: with ``[queue] url`` set that is Redis, not a stray local queue.db (else
    `quill jobs run orphan_sweep --wait 60` times out with the fleet up)."""
    from conftest import QuillCLI, stop_fleet

    home = tmp_path / "h"
    home.mkdir()
    text = f'[queue]\nurl = "{redis_url}"\n'
    if store == "postgresql":
        text = f'[store]\nurl = "{pg_store_url}"\n' + text
    (home / "config.toml").write_text(text)
    quill = QuillCLI(home)
    quill.run("push", "--session", "s1", input='{"role": "user", "content": "hello"}\n')
    proc = quill.start_fleet()
    try:
        out = quill.json("jobs", "run", "orphan_sweep", "--wait", "60")
        assert out["run"]["outcome"] == "ok", out
    finally:
        assert stop_fleet(proc) == 0
    assert not (home / "queue.db").exists() or not _local_tasks(home / "queue.db")


def _local_tasks(queue_db: Path) -> int:
    import sqlite3

    with sqlite3.connect(queue_db) as conn:
        try:
            return conn.execute("SELECT count(*) FROM task").fetchone()[0]
        except sqlite3.OperationalError:
            return 0

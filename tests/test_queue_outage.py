"""The job queue is optional to the drain: a PRIVATE redis-server (its own port, no
persistence; never the shared one) is stopped and started again under a real fleet, a real
`quill run --until-idle`, the real CLI and the production writer in process. While Redis is
away appends are applied, no worker exits, `quill status` says since when the queue is
unreachable, `quill jobs run` fails in Quill's error format with exit 8; when it is back a
queued job runs and the outage flag clears."""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

import pytest
from conftest import stop_fleet, worker_pids
from harness import InProcessWriter
from private_servers import PrivateRedis

from quill.home import WriterStatus
from quill.spool import Spool
from quill.store import Reader

pytestmark = pytest.mark.skipif(
    shutil.which("redis-server") is None, reason="redis-server is not installed"
)
redis = pytest.importorskip("redis")


@pytest.fixture
def private_redis(tmp_path):
    server = PrivateRedis(tmp_path / "redis").start()
    yield server
    server.stop()


def _configure(home: Path, url: str) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(f'[queue]\nurl = "{url}"\n')


def _consumer_status(home) -> dict:
    try:
        return json.loads((home / "run" / "consumer.json").read_text())
    except (OSError, ValueError):
        return {}


def _append(home: Path, batches: int, tag: str) -> None:
    with Spool(home / "spool") as sp:
        for b in range(batches):
            sp.append(
                "messages.append",
                {
                    "session_id": f"s{b % 3}",
                    "messages": [{"role": "user", "id": f"{tag}-{b}", "content": f"{tag} {b}"}],
                },
            )


def _messages(db: Path) -> int:
    try:
        with Reader(db) as r:
            return r.conn.execute("SELECT count(*) FROM messages").fetchone()[0]
    except Exception:  # noqa: BLE001 — not created yet
        return -1


def _until(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _log(home: Path, role: str) -> str:
    path = home / "logs" / f"{role}.log"
    return path.read_text() if path.exists() else ""


def _events(home: Path, role: str, name: str) -> list[dict]:
    out = []
    for line in _log(home, role).splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("event") == name:
            out.append(event)
    return out


def _supervisor(home: Path) -> dict:
    return json.loads((home / "run" / "supervisor.json").read_text())


def test_a_redis_outage_keeps_the_fleet_up_and_draining_and_everything_resumes(
    quill, home, private_redis
):
    _configure(home, private_redis.url)
    quill.run("schedule", "add", "spool_gc", "--every", "2s")  # fires during the outage
    fleet = quill.start_fleet()
    try:
        worker_pids(home)
        # The consumer's first task (closing runs a previous consumer left) done: this test is
        # about the outage between tasks (one during a task: the test at the end of this file).
        _until(lambda: "last" in _consumer_status(home), 60, "the consumer's first task")
        private_redis.stop()
        down_at = time.time()
        _append(home, 20, "down")
        _until(lambda: _messages(home / "state.db") == 20, 60, "the appends applied")
        # Several idle checks of the queue by the writer and polls by the consumer.
        time.sleep(max(0.0, down_at + 8 - time.time()))
        sup = _supervisor(home)
        assert set(sup["restarts"].values()) == {0}, sup  # no worker restarted
        assert sup["crash_loops"] == []
        st = quill.status()
        assert st["queue"]["unavailable_since"] is not None
        assert down_at - 1 <= st["queue"]["unavailable_since"] <= time.time()
        assert f"127.0.0.1:{private_redis.port}" in st["queue"]["error"]
        assert st["metrics"]["queue_unavailable"] == 1
        human = quill.run("status", check=False).stdout
        assert "QUEUE UNREACHABLE since" in human and "CRASH LOOP" not in human
        for role in ("writer", "consumer", "scheduler", "supervisor"):
            assert "Traceback" not in _log(home, role), _log(home, role)[-3000:]
        assert len(_events(home, "writer", "writer.queue_unavailable")) == 1
        assert len(_events(home, "consumer", "consumer.queue_unavailable")) == 1
        sched = json.loads((home / "run" / "scheduler.json").read_text())
        assert sched["unfired"] == ["spool_gc"] and sched["queue_down_since"], sched

        refused = quill.run("jobs", "run", "quick_check", check=False)
        assert refused.returncode == 8, refused.stderr
        assert refused.stderr.startswith("quill: error: the job queue at redis://127.0.0.1:")

        private_redis.start()
        back_at = time.time()
        ran = quill.json("jobs", "run", "quick_check", "--wait", "120")
        assert ran["run"]["outcome"] == "ok", ran
        _until(
            lambda: quill.status()["queue"]["unavailable_since"] is None,
            30,
            "the queue outage to clear in status",
        )
        assert len(_events(home, "writer", "writer.queue_back")) == 1
        assert len(_events(home, "consumer", "consumer.queue_back")) == 1
        _until(
            lambda: any(
                r["started_at"] >= back_at and r["outcome"] == "ok"
                for r in quill.json("jobs", "history", "--job", "spool_gc")["runs"]
            ),
            60,
            "the held scheduled run to be queued and run",
        )
        _append(home, 5, "back")
        _until(lambda: _messages(home / "state.db") == 25, 60, "appends after the outage")
        sup = _supervisor(home)
        assert set(sup["restarts"].values()) == {0}, sup  # no worker restarted
        assert sup["crash_loops"] == []
    finally:
        code = stop_fleet(fleet)
    assert code == 0


def test_until_idle_with_redis_down_at_start_drains_the_spool_and_exits_8(
    quill, home, private_redis
):
    _configure(home, private_redis.url)
    _append(home, 40, "cron")
    private_redis.stop()
    proc = quill.run("run", "--until-idle", "--timeout", "120", check=False)
    assert proc.returncode == 8, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "the spool is drained, but the job queue at redis://127.0.0.1:" in proc.stderr
    assert "fleet stopped with exit code 8" in proc.stderr
    assert _messages(home / "state.db") == 40
    sup = _supervisor(home)
    assert sup["exit_code"] == 8 and sup["crash_loops"] == []
    assert set(sup["restarts"].values()) == {0}, sup  # no worker restarted


def test_jobs_run_and_status_with_redis_down_use_quills_error_format(quill, home, private_redis):
    _configure(home, private_redis.url)
    private_redis.stop()
    proc = quill.run("jobs", "run", "quick_check", check=False)
    assert proc.returncode == 8
    lines = proc.stderr.splitlines()
    assert len(lines) == 2, proc.stderr
    assert lines[0].startswith(f"quill: error: the job queue at {private_redis.url} ")
    assert lines[1].startswith("quill: hint: ")
    as_json = quill.run("jobs", "run", "quick_check", "--json", check=False)
    assert as_json.returncode == 8
    error = json.loads(as_json.stdout)["error"]
    assert error["kind"] == "queue_unavailable" and error["exit_code"] == 8
    # No fleet: status asks the queue itself.
    st = quill.status()
    assert st["queue"]["unavailable_since"] is not None
    assert st["queue"]["where"] == private_redis.url and st["queue"]["pending"] is None
    doctor = quill.json("doctor", check=False)
    check = next(c for c in doctor if c["check"] == "job queue")
    assert check["status"] == "warn" and "unreachable since" in check["detail"]


def test_the_writer_drains_without_the_queue_and_hands_over_what_it_owes(tmp_path, private_redis):
    w = InProcessWriter(tmp_path / "home", queue={"url": private_redis.url})
    try:
        private_redis.stop()
        for i in range(5):
            w.say("s", f"message {i}")
        w.until_idle()  # never raises for the queue
        with Reader(w.cfg.state_db) as r:
            assert r.figures()["messages"] == 5
        st = WriterStatus.from_json(w.status())
        assert st.queue_down_since is not None and private_redis.url in st.queue_error
        w.writer.jobs.enqueue("wal_checkpoint")  # held while the queue is down
        private_redis.start()

        def ran() -> bool:
            w.turn()
            with Reader(w.cfg.state_db) as r:
                return any(
                    run["outcome"] == "ok" for run in r.job_runs(job="wal_checkpoint", limit=5)
                )

        _until(ran, 30, "the held job to run once Redis is back")
        w.until_idle()
        assert WriterStatus.from_json(w.status()).queue_error is None
        assert len(w.events("writer.queue_unavailable")) == 1
        assert len(w.events("writer.queue_back")) == 1
    finally:
        w.close()


def test_an_unopenable_queue_db_is_an_outage_too_and_the_writer_drains(tmp_path):
    w = InProcessWriter(tmp_path / "home")
    try:
        w.cfg.queue_db.mkdir()  # SQLite cannot open a directory: SQLITE_CANTOPEN
        for i in range(5):
            w.say("s", f"message {i}")
        w.until_idle()
        with Reader(w.cfg.state_db) as r:
            assert r.figures()["messages"] == 5
        st = WriterStatus.from_json(w.status())
        assert st.queue_down_since is not None and str(w.cfg.queue_db) in st.queue_error
        w.cfg.queue_db.rmdir()
        _until(
            lambda: (
                w.turn(1.0) is not None and WriterStatus.from_json(w.status()).queue_error is None
            ),
            30,
            "the writer to open queue.db once it can",
        )
        assert len(w.events("writer.queue_back")) == 1
    finally:
        w.close()


def test_the_queue_going_away_during_a_job_is_an_outage_not_a_traceback(tmp_path, private_redis):
    """Redis stopping while the consumer runs a job: huey's bookkeeping after the job (its
    revocation flag, here) raises out of ``huey.execute``; the consumer's guard reports it as
    the outage starting (one log event, the status with no task in flight), and the worker
    loop, which would log it as a traceback, never sees it."""
    from quill import home as config
    from quill.jobs.outage import QueueOutage
    from quill.jobs.queues import build_for
    from quill.workers import consumer

    home = tmp_path / "home"
    _configure(home, private_redis.url)
    cfg = config.load(home)
    cfg.ensure_dirs()
    queues = build_for(cfg)
    events: list[tuple[str, dict]] = []

    class Log:
        def error(self, event: str, **fields) -> None:
            events.append((event, fields))

        warning = info = error

    outage = QueueOutage("consumer", Log())
    published: list[int | None] = []  # the in-flight counts published
    huey = queues.worker

    @huey.task(name="test_stops_the_queue")
    def stops_the_queue() -> str:
        private_redis.stop()  # the job's own work is done; Redis goes away before huey's rest
        return "done"

    consumer._tolerate_outages(
        queues,
        outage,
        threading.Event(),
        lambda in_flight=None, **task: published.append(in_flight),
        time.time(),
        str(cfg.snapshots_dir),
    )
    stops_the_queue()
    task = None
    for _ in range(50):  # the first poll closes a previous consumer's runs, then dequeues
        task = huey.dequeue()
        if task is not None and task.name == "test_stops_the_queue":
            break
    assert task is not None and task.name == "test_stops_the_queue"
    assert huey.execute(task) is None  # raised QueueUnavailableError before the guard
    assert outage.down is not None
    assert published == [1, 0]  # taken, then no task in flight though its bookkeeping was lost
    # The outage, and what it cost: huey's bookkeeping of that task (a retry of a failed run
    # would be among it) is named, never lost unsaid.
    assert [e for e, _ in events] == [
        "consumer.queue_unavailable",
        "consumer.task_bookkeeping_lost",
    ]
    assert events[1][1]["job"] == "test_stops_the_queue"

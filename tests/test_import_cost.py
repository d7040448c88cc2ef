"""A command loads what its work needs, not every backend Quill has.

Each case runs the real CLI in a fresh interpreter on a real data dir and reads the modules
it loaded (``sys.modules`` at exit): on a SQLite data dir whose job queue is ``queue.db``,
neither the Redis nor the PostgreSQL driver is imported (together ~270 ms of CPU per command,
eight times huey itself), and queueing a job does not import the jobs' own code. A data dir
whose queue is on Redis still gets a working queue in such a process (real Redis).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from harness import make_home

DRIVERS = ("redis", "psycopg")
#: The jobs' own modules: loaded by the process that runs a job, not by one that queues it.
JOB_CODE = ("quill.jobs.store_jobs", "quill.jobs.worker_jobs", "quill.jobs.prune")


def loaded(home: Path, *args: str, stdin: str | None = None) -> set[str]:
    """The top-level and Quill modules a fresh ``quill *args`` process loaded on ``home``."""
    code = (
        "import atexit, json, sys\n"
        "atexit.register(lambda: print('MODULES ' + json.dumps(sorted(sys.modules)),"
        " file=sys.stderr))\n"
        f"sys.argv = ['quill', *{list(args)!r}]\n"
        "from quill.ops.cli import main\nmain()\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        input=stdin,
        env={**os.environ, "QUILL_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stderr.splitlines() if x.startswith("MODULES "))
    return set(json.loads(line.removeprefix("MODULES ")))


@pytest.fixture
def sqlite_home(tmp_path: Path) -> Path:
    """A SQLite data dir (queue in ``queue.db``) with one pushed message."""
    cfg = make_home(tmp_path / "home", watch={"enabled": False})
    modules = loaded(cfg.home, "push", "--session", "s", stdin='{"role": "user", "content": "hi"}')
    assert not modules & set(DRIVERS)
    return cfg.home


@pytest.mark.parametrize(
    "args",
    [
        ("status", "--json"),
        ("jobs", "run", "wal_checkpoint"),
        ("jobs", "list", "--json"),
        ("sessions", "list", "--json"),
        ("search", "hi", "--json"),
        ("doctor", "--json"),
    ],
    ids=" ".join,
)
def test_a_sqlite_data_dir_never_loads_the_redis_or_postgresql_driver(sqlite_home, args):
    modules = loaded(sqlite_home, *args)
    assert not modules & set(DRIVERS), f"quill {' '.join(args)} loaded a driver it never uses"


def test_queueing_a_job_loads_the_queue_but_not_the_jobs_code(sqlite_home):
    modules = loaded(sqlite_home, "jobs", "run", "wal_checkpoint")
    assert "huey" in modules  # the job was queued through huey
    assert not modules & set(JOB_CODE)


def test_a_redis_queue_works_in_a_process_that_loaded_huey_without_its_driver(tmp_path, redis_url):
    """huey is imported first on a queue.db data dir (no driver), then the same process
    builds a data dir's queues on Redis: queueing, counting and classifying an unreachable
    Redis all work, through the driver loaded at that point."""
    code = f"""
import sys
from pathlib import Path
from quill.jobs import queues
from quill.jobs.errors import QueueUnavailableError
assert "redis" not in sys.modules, "huey loaded its Redis driver up front"
local = queues.build(Path({str(tmp_path / "queue.db")!r}))
local.enqueue("wal_checkpoint")
assert local.pending() == {{"store": 1, "worker": 0}}
shared = queues.build(
    Path("unused"), url={redis_url!r}, host_id="h", namespace="importcost{os.getpid()}"
)
shared.store.flush()
shared.enqueue("wal_checkpoint")
shared.enqueue("snapshot")
assert shared.pending() == {{"store": 1, "worker": 1}}, shared.pending()
shared.store.flush()
shared.worker.flush()
down = queues.build(Path("unused"), url="redis://127.0.0.1:9/0", host_id="h")
try:
    down.pending()
except QueueUnavailableError as exc:
    print("UNAVAILABLE", exc)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "UNAVAILABLE the job queue at redis://127.0.0.1:9/0" in proc.stdout

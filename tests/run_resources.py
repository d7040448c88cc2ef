"""The outside resources a test run uses, found on loopback by the run itself: PostgreSQL,
Redis, Debian's chromium and the transcript corpus (a pytest plugin, loaded by conftest).

Nothing has to be exported first. PostgreSQL is reached at ``QUILL_TEST_PG_ADMIN_URL``
(default ``postgresql://postgres@127.0.0.1:5432/postgres``) where the run creates a database of
its own, ``quill_test_<epoch>_<hex>``, dropped when the run ends; ``QUILL_TEST_PG_URL`` instead
names an existing database, used as given and kept. Redis is reached at
``QUILL_TEST_REDIS_URL`` (used as given), else at ``redis://127.0.0.1:6379`` where the run
claims a free logical database (1-15) with a claim key, and empties it when it ends.

Each resource is probed once per run, on first use, whichever process needs it first: a file
lock in the run's state dir (made by the controller, handed to each pytest-xdist worker)
serialises the probe and its result (a JSON file) is what every other process reads. The
controller cleans up and, at the end of the terminal summary, names every resource that was
absent with the number of tests skipped for it, so nothing is skipped silently. A test that
needs an absent resource is skipped with a reason naming what is missing and how to start it;
under ``CI`` (set by the CI runner, whose ``.ci/run`` starts every service) it fails instead.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import bytecode_cache
import pytest

REPO = Path(__file__).resolve().parents[1]
#: Real transcripts the tests read: ``$QUILL_CORPUS``, else ``shared/corpus`` next to the
#: checkout (or next to a folder holding it, as for worktrees).
CORPUS = (
    Path(os.environ["QUILL_CORPUS"])
    if os.environ.get("QUILL_CORPUS")
    else next(
        (p / "shared" / "corpus" for p in REPO.parents if (p / "shared" / "corpus").is_dir()),
        REPO.parent / "shared" / "corpus",
    )
)
CHROMIUM = Path("/usr/bin/chromium")
PG_ADMIN_DEFAULT = "postgresql://postgres@127.0.0.1:5432/postgres"
REDIS_DEFAULT = "redis://127.0.0.1:6379"
#: The key that marks a Redis logical database as this run's; it expires so that a run killed
#: before its cleanup frees the database for a later run (which empties it when it claims it).
REDIS_CLAIM_KEY = "quill_test_run_claim"
CLAIM_SECONDS = 6 * 3600
DB_PREFIX = "quill_test_"
#: Only databases of this plugin older than this are dropped as left over from a killed run.
STALE_SECONDS = 6 * 3600

#: Skip reasons start with these, so the summary can count the tests each absence skipped.
LABELS = {
    "postgres": "PostgreSQL absent",
    "redis": "Redis absent",
    "chromium": "chromium absent",
    "corpus": "corpus absent",
}
SLOW_LABEL = "slow"
_RUN_DIR = pytest.StashKey[Path]()
_CONTROLLER = pytest.StashKey[bool]()


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _pg_start_hint() -> str:
    versions = (
        sorted(p.name for p in Path("/etc/postgresql").glob("*"))
        if Path("/etc/postgresql").is_dir()
        else []
    )
    start = (
        f"pg_ctlcluster {versions[-1]} main start"
        if versions
        else "apt-get install postgresql && pg_ctlcluster <version> main start"
    )
    return (
        f"start it (`{start}`, as .ci/run does) or point QUILL_TEST_PG_ADMIN_URL "
        "(a server to create a database on) or QUILL_TEST_PG_URL (a database) at one"
    )


def _probe_postgres() -> dict:
    """``{"url": database URL, "created": name or None}`` or ``{"reason": ...}``."""
    label = LABELS["postgres"]
    try:
        import psycopg
    except ImportError:
        return {"reason": f"{label}: psycopg is not installed (pip install -e '.[test]')"}
    given = os.environ.get("QUILL_TEST_PG_URL")
    if given:
        try:
            psycopg.connect(given, connect_timeout=5).close()
        except psycopg.Error as exc:
            return {
                "reason": f"{label}: cannot connect to QUILL_TEST_PG_URL={given} "
                f"({_first_line(exc)}): {_pg_start_hint()}"
            }
        return {"url": given, "created": None}
    admin = os.environ.get("QUILL_TEST_PG_ADMIN_URL") or PG_ADMIN_DEFAULT
    name = f"{DB_PREFIX}{int(time.time())}_{uuid.uuid4().hex[:8]}"
    try:
        with psycopg.connect(admin, autocommit=True, connect_timeout=5) as conn:
            _drop_stale_databases(conn)
            conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.Error as exc:
        return {
            "reason": f"{label}: cannot create a test database at {admin} "
            f"({_first_line(exc)}): {_pg_start_hint()}"
        }
    return {
        "url": urlsplit(admin)._replace(path=f"/{name}").geturl(),
        "created": name,
        "admin": admin,
    }


def _drop_stale_databases(conn) -> None:
    """Drop this plugin's databases whose creation time (in the name) is long past: left by a
    run that was killed before its cleanup. A live run's database is never that old."""
    rows = conn.execute(
        "SELECT datname FROM pg_database WHERE datname LIKE %s",
        (DB_PREFIX.replace("_", r"\_") + "%",),
    ).fetchall()
    for (datname,) in rows:
        stamp = datname[len(DB_PREFIX) :].split("_")[0]
        if stamp.isdigit() and time.time() - int(stamp) > STALE_SECONDS:
            conn.execute(f'DROP DATABASE IF EXISTS "{datname}" WITH (FORCE)')


def _probe_redis(run_id: str) -> dict:
    """``{"url": ..., "db": claimed logical database or None}`` or ``{"reason": ...}``."""
    label = LABELS["redis"]
    hint = (
        "start it (`redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save ''`, "
        "as .ci/run does) or point QUILL_TEST_REDIS_URL at one"
    )
    try:
        import redis
    except ImportError:
        return {"reason": f"{label}: the redis client is not installed (pip install -e '.[test]')"}
    given = os.environ.get("QUILL_TEST_REDIS_URL")
    base = given or REDIS_DEFAULT
    try:
        with redis.Redis.from_url(base, socket_connect_timeout=5) as client:
            client.ping()
    except redis.RedisError as exc:
        return {"reason": f"{label}: cannot connect to {base} ({_first_line(exc)}): {hint}"}
    if given:
        return {"url": given, "db": None}
    for db in range(1, 16):
        with redis.Redis.from_url(f"{base}/{db}", socket_connect_timeout=5) as client:
            try:
                if not client.set(REDIS_CLAIM_KEY, run_id, nx=True, ex=CLAIM_SECONDS):
                    continue
            except redis.ResponseError:  # the server has fewer logical databases
                break
            # Keys a killed run left behind: this run owns the database from now on.
            stale = [k for k in client.scan_iter(count=1000) if k != REDIS_CLAIM_KEY.encode()]
            if stale:
                client.delete(*stale)
        return {"url": f"{base}/{db}", "db": db}
    return {
        "reason": f"{label}: no free logical database on {base} (each of 1-15 holds "
        f"{REDIS_CLAIM_KEY} of another run): set QUILL_TEST_REDIS_URL"
    }


def _probe_chromium() -> dict:
    label = LABELS["chromium"]
    if not CHROMIUM.exists():
        return {
            "reason": f"{label}: Debian's chromium is not at {CHROMIUM} "
            "(`apt-get install chromium`, as .ci/run does)"
        }
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return {"reason": f"{label}: playwright is not installed (pip install -e '.[test]')"}
    return {"path": str(CHROMIUM)}


def _run_dir(config: pytest.Config) -> Path:
    return config.stash[_RUN_DIR]


def resource(config: pytest.Config, name: str) -> dict:
    """The probe result of resource ``name`` (``postgres``, ``redis``, ``chromium``) for this
    run: probed by the first process that asks, under the run's file lock, read by the rest."""
    run_dir = _run_dir(config)
    result = run_dir / f"{name}.json"
    with open(run_dir / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if result.exists():
            return json.loads(result.read_text())
        if name == "postgres":
            found = _probe_postgres()
        elif name == "redis":
            found = _probe_redis(run_dir.name)
        else:
            found = _probe_chromium()
        result.write_text(json.dumps(found))
        return found


def require(request: pytest.FixtureRequest, name: str) -> dict:
    """The resource ``name`` or, when absent, a skip (a failure under ``CI``) saying why."""
    found = resource(request.config, name)
    if "reason" in found:
        if os.environ.get("CI"):
            pytest.fail(f"{found['reason']} (CI must test every backend)", pytrace=False)
        pytest.skip(found["reason"])
    return found


@pytest.fixture
def pg_url(request) -> str:
    """The URL of this run's PostgreSQL database (skips, saying why, when there is none)."""
    return require(request, "postgres")["url"]


@pytest.fixture
def redis_url(request) -> str:
    """The URL of this run's Redis logical database (skips, saying why, when there is none)."""
    return require(request, "redis")["url"]


@pytest.fixture(scope="session")
def chromium_path(request) -> Path:
    """Debian's chromium for Playwright (skips, saying why, when it or Playwright is absent)."""
    return Path(require(request, "chromium")["path"])


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "corpus: reads the real transcripts of shared/corpus "
        "(skipped, saying so, when it is missing)",
    )
    workerinput = getattr(config, "workerinput", None)
    config.stash[_CONTROLLER] = workerinput is None
    if workerinput is None:
        config.stash[_RUN_DIR] = Path(tempfile.mkdtemp(prefix="quill-test-run-"))
        _share_bytecode(config.stash[_RUN_DIR])
    else:
        config.stash[_RUN_DIR] = Path(workerinput["quill_run_dir"])


def _share_bytecode(run_dir: Path) -> None:
    """Let every process of the run cache compiled bytecode in the run's state dir.

    The tests start some thousand Python subprocesses (CLI calls, fleets and their children);
    where ``PYTHONDONTWRITEBYTECODE`` is set (as on the project's machines) each would compile
    every module of the checkout it imports from source again. The xdist workers and every
    subprocess inherit this environment, so each module is compiled once per run; the
    checkout itself stays free of ``__pycache__`` folders. The cache is filled before the
    workers start (``bytecode_cache``)."""
    bytecode_cache.share(run_dir, REPO)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """pytest-xdist: each worker shares the controller's run state dir."""
    node.workerinput["quill_run_dir"] = str(_run_dir(node.config))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip, saying why, the tests that read a missing corpus, and the long torture variants
    (marker ``slow``) unless ``QUILL_SLOW=1``: the default run keeps a fast variant of each."""
    slow = (
        None
        if os.environ.get("QUILL_SLOW") == "1"
        else pytest.mark.skip(reason=f"{SLOW_LABEL}: a long torture variant (QUILL_SLOW=1 runs it)")
    )
    corpus = (
        None
        if CORPUS.is_dir()
        else pytest.mark.skip(
            reason=f"{LABELS['corpus']}: no transcripts at {CORPUS}: run from a checkout next to "
            "shared/corpus or set QUILL_CORPUS"
        )
    )
    for item in items:
        if corpus and item.get_closest_marker("corpus"):
            item.add_marker(corpus)
        if slow and item.get_closest_marker("slow"):
            item.add_marker(slow)


def _affected(terminalreporter, label: str) -> int:
    """How many tests an absent resource skipped (or, under ``CI``, made fail at setup)."""
    count = 0
    for rep in terminalreporter.stats.get("skipped", []):
        longrepr = rep.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else ""
        count += reason.removeprefix("Skipped: ").startswith(label)
    for rep in terminalreporter.stats.get("error", []):
        count += label in str(rep.longrepr)
    return count


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    """One line per resource: where it was tested, or that it was NOT and how many tests that
    skipped."""
    if not config.stash.get(_CONTROLLER, False):
        return
    run_dir = _run_dir(config)
    found = {
        n: json.loads((run_dir / f"{n}.json").read_text())
        for n in ("postgres", "redis", "chromium")
        if (run_dir / f"{n}.json").exists()
    }
    if not CORPUS.is_dir():
        found["corpus"] = {"reason": f"{LABELS['corpus']}: no transcripts at {CORPUS}"}
    lines = []
    for name, result in found.items():
        if "reason" in result:
            n = _affected(terminalreporter, LABELS[name])
            lines.append((f"NOT TESTED ({n} tests skipped): {result['reason']}", True))
        else:
            where = result.get("url") or result.get("path")
            lines.append((f"tested: {name} at {where}", False))
    slow = _affected(terminalreporter, SLOW_LABEL + ":")
    if slow:
        lines.append((f"not run: {slow} long torture variants (QUILL_SLOW=1 runs them)", False))
    if lines:
        terminalreporter.write_sep("-", "test resources")
        for text, bad in lines:
            terminalreporter.write_line(text, red=bad, bold=bad)


def pytest_unconfigure(config: pytest.Config) -> None:
    """The controller drops the run's database and empties its Redis database."""
    if not config.stash.get(_CONTROLLER, False) or _RUN_DIR not in config.stash:
        return
    run_dir = _run_dir(config)
    try:
        _cleanup(run_dir)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


def _cleanup(run_dir: Path) -> None:
    pg = run_dir / "postgres.json"
    if pg.exists() and (found := json.loads(pg.read_text())).get("created"):
        import psycopg

        with psycopg.connect(found["admin"], autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{found["created"]}" WITH (FORCE)')
    rd = run_dir / "redis.json"
    if rd.exists() and (found := json.loads(rd.read_text())).get("db") is not None:
        import redis

        with redis.Redis.from_url(found["url"], socket_connect_timeout=5) as client:
            # Only while the claim is still this run's (it may have expired and been taken).
            if client.get(REDIS_CLAIM_KEY) == run_dir.name.encode():
                client.flushdb()

"""Shared fixtures: a temp data dir, the ``quill`` CLI as a real subprocess, a running fleet."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytest.register_assert_rewrite("run_resources")  # imported here, before pytest loads it below
import harness  # noqa: E402  (imported first: a test's later sys.path may hold a dir named so)
import pack_env  # noqa: E402
from cli_forkserver import ForkedProcess, ForkServer  # noqa: E402
from run_resources import CORPUS, REPO  # noqa: E402,F401  (tests import them from here)

#: Finds PostgreSQL, Redis, chromium and the corpus by itself; provides ``pg_url``,
#: ``redis_url``, ``chromium_path`` and the ``corpus`` marker.
pytest_plugins = ["run_resources"]

#: ``QUILL_TEST_PACK_MIN_BYTES``: every store this run opens packs texts from that size on.
pack_env.apply()

#: Every fleet a test starts runs the watcher (``[watch]`` is on by default): it must follow an
#: empty folder, never the agent folders of whoever runs the tests.
os.environ["QUILL_AGENT_HOME"] = tempfile.mkdtemp(prefix="quill-agents-")


def quill_env(home: Path) -> dict[str, str]:
    env = {**os.environ, "QUILL_HOME": str(home), "PYTHONUNBUFFERED": "1"}
    env.pop("PYTEST_CURRENT_TEST", None)
    return env


#: This test process's CLI fork server (started with the session, stopped when the process
#: ends).
_FORK_SERVER = ForkServer(REPO)
atexit.register(_FORK_SERVER.close)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Start the CLI fork server now, with the environment every CLI call gets (the run's
    resources plugin has set it up by now), unless calls are to be cold."""
    controller = not hasattr(session.config, "workerinput") and session.config.getoption(
        "dist", "no"
    ) not in ("no", None)  # pytest-xdist's controller runs no test
    if not controller and os.environ.get("QUILL_TEST_COLD_CLI") != "1":
        env = quill_env(Path(os.devnull))
        env.pop("QUILL_HOME")
        _FORK_SERVER.start(env)


class QuillCLI:
    """Runs ``python -m quill.ops.cli``-equivalent commands against one data dir."""

    def __init__(self, home: Path):
        self.home = home

    def argv(self, *args: str) -> list[str]:
        code = "from quill.ops.cli import main; main()"
        if pack_env.value() is not None:  # the run's pack_min_bytes, as in this process
            tests = str(Path(__file__).parent)
            code = (
                f"import sys; sys.path.append({tests!r}); import pack_env; pack_env.apply(); "
                f"sys.path.remove({tests!r}); {code}"
            )
        return [sys.executable, "-c", code, *args]

    def run(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 300
    ) -> subprocess.CompletedProcess:
        """``quill ARGS`` in a process of its own (forked from the CLI fork server when it can
        be, ``cli_forkserver``), its output captured as text; raises ``AssertionError`` on a
        non-zero exit with ``check``, ``subprocess.TimeoutExpired``."""
        env = quill_env(self.home)
        if _FORK_SERVER.usable(env):
            proc = _FORK_SERVER.run(list(args), env, input, timeout)
        else:
            proc = subprocess.run(
                self.argv(*args),
                input=input,
                capture_output=True,
                text=True,
                env=env,
                timeout=timeout,
                cwd=REPO,
            )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"quill {' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
            )
        return proc

    def popen(self, *args: str, stdout: bool = False) -> subprocess.Popen | ForkedProcess:
        """``quill ARGS`` started in the background (forked when it can be, as ``run``),
        stdin from /dev/null, stderr captured as text (``proc.stderr.read()``), stdout too
        with ``stdout`` (else discarded)."""
        env = quill_env(self.home)
        if _FORK_SERVER.usable(env):
            return _FORK_SERVER.popen(list(args), env, stdout=stdout, text=True)
        return subprocess.Popen(
            self.argv(*args),
            env=env,
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if stdout else subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )

    def json(self, *args: str, **kw) -> object:
        return json.loads(self.run(*args, "--json", **kw).stdout)

    def status(self) -> dict:
        return self.json("status", check=False)

    def drain(self) -> dict:
        """Drain the spool in this process with the production writer (``harness.drain``);
        for tests that need the spool applied, not the fleet's lifecycle or its jobs."""
        return harness.drain(self.home)

    def start_fleet(self) -> subprocess.Popen:
        """``quill run`` in the background, returned once its supervisor holds the fleet
        lease (as an operator would see it running before using it)."""
        from quill.home import RunDir

        proc = self.popen("run")
        rd = RunDir(Path(self.home).resolve())
        deadline = time.monotonic() + 60
        while not rd.fleet_running() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        return proc

    def wait_idle(self, timeout: float = 240) -> dict:
        """Poll ``quill status`` until the spool is drained and the FTS index caught up."""
        from quill.home import WriterStatus

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            st = self.status()
            store = st.get("store")
            writer = WriterStatus.from_json(st["fleet"].get("writer"))
            if (
                store
                and st["spool"]["pending_bytes"] == 0
                and store["fts_pending"] == 0
                and writer.idle
            ):
                return st
            time.sleep(0.3)
        raise AssertionError(f"fleet not idle after {timeout} s: {self.status()}")


def worker_pids(home: Path, timeout: float = 90) -> list[int]:
    """Pids of writer, scheduler and consumer once each *live* process has published its
    status (a file left by an earlier run's dead process does not count)."""
    from quill.home import RunDir

    rd = RunDir(Path(home).resolve())
    deadline = time.monotonic() + timeout
    while True:
        live = [rd.live(r) for r in ("writer", "scheduler", "consumer")]
        if all(live) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert all(live), f"not every worker published a live status within {timeout} s: {live}"
    return [st["pid"] for st in live]


def damage_pages(db: Path, table: str, count: int = 3, leaves_only: bool = False) -> None:
    """Overwrite ``count`` pages from the middle of ``table``'s b-tree with random bytes
    (located with the dbstat virtual table on a read-only connection)."""
    from quill.store.sqlite.connection import open_reader

    conn = open_reader(db)
    try:
        where = " AND pagetype = 'leaf'" if leaves_only else ""
        pages = [
            r[0]
            for r in conn.execute(
                f"SELECT pageno FROM dbstat WHERE name = ?{where} ORDER BY pageno", (table,)
            )
        ]
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    finally:
        conn.close()
    assert len(pages) > count, f"{table} has only {len(pages)} pages"
    with open(db, "r+b") as f:
        for p in pages[len(pages) // 2 : len(pages) // 2 + count]:
            f.seek((p - 1) * page_size)
            f.write(os.urandom(page_size))


def run_processes(target, args_per_process: list[tuple], timeout: float) -> None:
    """Start one real process per argument tuple, wait for all, assert each exited 0."""
    import multiprocessing

    procs = [multiprocessing.Process(target=target, args=args) for args in args_per_process]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout)
        assert p.exitcode == 0


def spool_producer(spool_dir: str, producer: int, batches: int, big: bool) -> None:
    """A producer process's work for ``run_processes``: ``batches`` one-message appends to
    session ``p<producer>`` (message ids ``<producer>-<n>``; with ``big`` every 25th is
    100 KB), on 4 MiB segments."""
    from quill.spool import Spool

    with Spool(spool_dir, segment_bytes=4 << 20) as sp:
        for n in range(batches):
            content = f"p{producer}-b{n}-" + "z" * (100_000 if big and n % 25 == 0 else 50)
            sp.append(
                "messages.append",
                {
                    "session_id": f"p{producer}",
                    "messages": [{"role": "user", "id": f"{producer}-{n}", "content": content}],
                },
            )


@contextlib.contextmanager
def small_tmpfs(path: Path, size: str):
    """Mount a real tmpfs of ``size`` at ``path`` (skip the test where mounting is refused)."""
    path.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True
    )
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {proc.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def stop_fleet(proc: subprocess.Popen, timeout: float = 30) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout=timeout)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "quill home"  # a space on purpose: paths must be quoted everywhere


@pytest.fixture
def quill(home: Path) -> QuillCLI:
    return QuillCLI(home)


@pytest.fixture
def writer(home: Path):
    """The production writer of ``home`` running in a thread of the test process
    (``harness.WriterThread``): for tests of what clients and the CLI see once a writer
    applies, not of the fleet's lifecycle (``fleet``). Raises at teardown what it raised."""
    from quill.home import load

    cfg = load(home)
    cfg.ensure_dirs()
    thread = harness.WriterThread(cfg)
    yield thread
    thread.close()


@pytest.fixture
def fleet(quill: QuillCLI):
    proc = quill.start_fleet()
    yield proc
    code = stop_fleet(proc)
    assert code == 0, f"fleet exited {code}: {proc.stderr.read() if proc.stderr else ''}"


# -- backends: one behaviour suite, two stores -------------------------------------------------


@pytest.fixture
def pg_schemas(pg_url: str):
    """A factory: each call creates a fresh PostgreSQL schema (all dropped afterwards) and
    returns a store URL that puts it first on the connection's search_path, so tests never
    share rows."""
    import uuid

    import psycopg

    names: list[str] = []

    def make() -> str:
        name = "t_" + uuid.uuid4().hex[:12]
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{name}"')
        names.append(name)
        sep = "&" if "?" in pg_url else "?"
        return f"{pg_url}{sep}options=-csearch_path%3D{name},public"

    yield make
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for name in names:
            conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


@pytest.fixture
def pg_store_url(pg_schemas) -> str:
    """A store URL on a fresh PostgreSQL schema of its own (dropped afterwards)."""
    return pg_schemas()


def pg_data_dir(root, url: str, n: int):
    """A data dir on the PostgreSQL store ``url`` with ``n`` messages (session ``<dir name>-s``)
    appended to its spool and drained as its writer would (``ops.recover.postgres.drain``);
    returns the drain's figures (``spool_id``, ``to`` cursor, …)."""
    old = os.umask(
        0o077
    )  # as `quill` itself runs (owner-only files), so doctor's mode check passes
    try:
        return _fill_pg_data_dir(root, url, n)
    finally:
        os.umask(old)


def _fill_pg_data_dir(root, url: str, n: int):
    from quill import home as config
    from quill.ops import logs
    from quill.ops.recover.postgres import drain
    from quill.spool import Spool

    root.mkdir(parents=True)
    (root / "config.toml").write_text(f'[store]\nurl = "{url}"\n')
    spool = Spool(root / "spool")
    for i in range(n):
        spool.append(
            "messages.append",
            {"session_id": f"{root.name}-s", "messages": [{"role": "user", "content": f"m{i}"}]},
        )
    spool.close()
    return drain(config.load(root), logs.configure(None, "test"))


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request) -> str | None:
    """The store URL of each backend in turn: None (embedded SQLite) or a fresh PostgreSQL
    schema. Behaviour tests take this and pass it to ``semantics_helpers.Store``."""
    if request.param == "sqlite":
        return None
    return request.getfixturevalue("pg_store_url")


@pytest.fixture
def env(tmp_path):
    """A real spool dir and an open writer connection on a temp store:
    ``(spool, conn, tmp_path)``."""
    from quill.spool import Spool
    from quill.store import open_writer

    spool = Spool(tmp_path / "spool")
    conn = open_writer(tmp_path / "state.db")
    yield spool, conn, tmp_path
    conn.close()
    spool.close()

"""Private servers a test may stop and restart: a redis-server and a PostgreSQL cluster of the
test's own, on free ports, never the shared ones (127.0.0.1:6379 and :5432 serve everyone's
tests). Both keep nothing a test has not written; both are stopped by the test that made them."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

#: Where Debian's PostgreSQL 15 server binaries are (initdb, pg_ctl).
PG_BIN = Path("/usr/lib/postgresql/15/bin")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PrivateRedis:
    """A redis-server of this test only, on a free port, in ``folder``, saving nothing (a
    restart empties it, as a lost Redis does)."""

    def __init__(self, folder: Path):
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen | None = None

    def start(self) -> PrivateRedis:
        """Start it and return once it answers PING (20 s at most; raises redis' error)."""
        import redis

        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
            + ["--appendonly", "no", "--dir", str(self.folder)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while True:
            try:
                with redis.Redis.from_url(self.url, socket_connect_timeout=1) as client:
                    client.ping()
                return self
            except redis.RedisError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise
                time.sleep(0.05)

    def stop(self) -> None:
        """SIGTERM and wait (20 s at most); a no-op when it is not running."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(20)
        self.proc = None


def private_pg_missing() -> str | None:
    """Why a private PostgreSQL cannot be made here (a skip reason), or None."""
    if not (PG_BIN / "initdb").exists():
        return f"needs the PostgreSQL 15 server binaries in {PG_BIN}"
    if os.geteuid() != 0:
        return "needs root (to run initdb and pg_ctl as user postgres)"
    return None


class PrivatePostgres:
    """A PostgreSQL cluster of this test only: ``initdb`` in a temp dir owned by user
    ``postgres``, ``pg_ctl`` on a free port (``fsync=off``: the machine never crashes under a
    test, only the server is stopped). ``url`` is its ``postgres`` database as superuser."""

    def __init__(self):
        self.tmp = Path(tempfile.mkdtemp(prefix="quill-pg-", dir="/tmp"))
        shutil.chown(self.tmp, "postgres")
        self.data, self.port = self.tmp / "data", free_port()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self.running = False

    def _pg_ctl(self, *argv: str) -> None:
        opts = f"-p {self.port} -k {self.tmp} -c listen_addresses=127.0.0.1 -c fsync=off"
        cmd = [str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-o", opts, "-w", "-t", "120"]
        self._run(*cmd, "-l", str(self.tmp / "log"), *argv)

    @staticmethod
    def _run(*argv: str) -> None:
        subprocess.run(["runuser", "-u", "postgres", "--", *argv], check=True, capture_output=True)

    def start(self) -> PrivatePostgres:
        """initdb (first time only) and start; returns once the server accepts connections.
        Raises ``subprocess.CalledProcessError``."""
        if not (self.data / "PG_VERSION").exists():
            self._run(str(PG_BIN / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres")
        self._pg_ctl("start")
        self.running = True
        return self

    def restart(self, mode: str = "fast") -> None:
        """``pg_ctl restart -m MODE``: every session is ended (``immediate``: without a
        checkpoint, so the server runs crash recovery at start)."""
        self._pg_ctl("-m", mode, "restart")
        self.running = True

    def stop(self, mode: str = "fast") -> None:
        """``pg_ctl stop -m MODE``; a no-op when it is not running."""
        if self.running:
            self._run(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")
            self.running = False

    def close(self) -> None:
        """Stop it and delete its files."""
        try:
            self.stop()
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)

"""``quill`` CLI calls of the tests as real processes forked from one that has already imported
the CLI: a fork server per test process (``QuillCLI.run`` in conftest uses it).

A cold ``quill status`` spends about 0.7 CPU s importing (click, rich, huey, which imports
redis and psycopg, the store's modules) before it does anything, and the tests make some
thousand such calls, many of them polls. Here one server process imports the CLI and every
command module once; each call is a ``fork`` of it that sets the caller's argv, environment,
working directory, umask and stdio and runs ``quill.ops.cli.main``, so the command still runs
in a separate process of its own with its own pid, exit code (a signal gives ``-N`` as with
``subprocess``), file descriptors and children, exactly the code ``quill`` runs, from the import
of ``quill.ops.cli`` on.

What differs from ``exec``: the modules are already imported (so a test of what a command
imports starts its own interpreter, see ``test_cli_contract.py``), and interpreter start-up
settings come from the server's environment; a call whose environment differs in one of those
(``PYTHON*``, ``LC_*``, ``LANG``, ``LD_*``) gets a cold process instead, as does every call under
``QUILL_TEST_COLD_CLI=1``.

Protocol: one ``SOCK_SEQPACKET`` connection per call on a unix socket; the request is JSON
(``args``, ``env``, ``cwd``, ``umask``) with the call's stdin, stdout and stderr descriptors
attached (``SCM_RIGHTS``); the server answers ``{"pid": N}`` once forked and
``{"returncode": N}`` when the process has exited (watched through a pidfd). The server exits
when its stdin (a pipe from the test process) closes.
"""

from __future__ import annotations

import json
import os
import selectors
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pack_env  # beside this module: imported while the tests' dir is on sys.path

#: Environment variables read when an interpreter starts, not when a command runs.
STARTUP_VARS = ("PYTHON", "LC_", "LANG", "LD_")
MAX_MESSAGE = 1 << 20


def _startup_env(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(STARTUP_VARS)}


# -- the server (its own process: ``python -c`` running ``serve``) -----------------------------


def _preload() -> None:
    """Import every module of the package (a command imports its own when it runs: the
    server does it once for all; ``__main__`` modules, which run on import, are left out)."""
    import pkgutil
    from importlib import import_module

    import quill

    for found in pkgutil.walk_packages(quill.__path__, "quill."):
        if not found.name.endswith(".__main__"):
            import_module(found.name)
    pack_env.apply()  # QUILL_TEST_PACK_MIN_BYTES: every command packs as the tests' process


def serve(path: str) -> None:
    """Listen on the unix socket ``path`` (made to appear only once ready) until stdin closes."""
    _preload()
    if threading.active_count() != 1:  # fork copies only the calling thread
        raise SystemExit(f"an import started a thread: {threading.enumerate()}")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path + ".tmp")
    listener.listen(64)
    os.rename(path + ".tmp", path)
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, ("accept",))
    sel.register(0, selectors.EVENT_READ, ("parent",))
    while True:
        for key, _ in sel.select():
            kind = key.data[0]
            if kind == "parent":
                if not os.read(0, 4096):
                    return
            elif kind == "accept":
                conn, _ = listener.accept()
                sel.register(conn, selectors.EVENT_READ, ("request", conn))
            elif kind == "request":
                _start(sel, key.data[1])
            else:
                _, pid, conn, pidfd = key.data
                _, status = os.waitpid(pid, 0)
                sel.unregister(pidfd)
                os.close(pidfd)
                conn.send(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}).encode())
                conn.close()


def _start(sel: selectors.BaseSelector, conn: socket.socket) -> None:
    msg, fds, _, _ = socket.recv_fds(conn, MAX_MESSAGE, 3)
    sel.unregister(conn)
    if not msg or len(fds) != 3:
        for fd in fds:
            os.close(fd)
        conn.close()
        return
    request = json.loads(msg)
    pid = os.fork()
    if pid == 0:
        _child(request, fds, sel)
    for fd in fds:
        os.close(fd)
    conn.send(json.dumps({"pid": pid}).encode())
    pidfd = os.pidfd_open(pid)
    sel.register(pidfd, selectors.EVENT_READ, ("exit", pid, conn, pidfd))


def _child(request: dict[str, Any], fds: list[int], sel: selectors.BaseSelector) -> None:
    """The forked command: never returns (``os._exit`` with the command's exit code)."""
    code = 1
    try:
        for key in list(sel.get_map().values()):
            if key.fd != 0:
                os.close(key.fd)
        os.close(sel.fileno())  # type: ignore[attr-defined]
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.umask(request["umask"])
        os.environ.clear()
        os.environ.update(request["env"])
        time.tzset()
        import random

        random.seed()  # every child would otherwise repeat the server's sequence
        sys.argv = ["-c", *request["args"]]
        code = _run_main()
    finally:
        os._exit(code)


def _run_main() -> int:
    """``main()`` with the interpreter's own end: exit code from ``SystemExit`` (a message is
    printed and gives 1), a traceback and 1 for any other exception, then non-daemon threads
    joined, ``atexit`` handlers run and stdio flushed."""
    import atexit
    import traceback

    try:
        from quill.ops.cli import main

        main()
        code = 0
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:  # noqa: BLE001 — reported as the interpreter would
        traceback.print_exc()
        code = 1
    try:
        threading._shutdown()  # type: ignore[attr-defined]
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
    return code


# -- the client (each test process) -------------------------------------------------------------


class ForkServer:
    """A fork server in ``cwd``, started on first use with the environment of the first call
    (as a cold call would have had); ``run`` is ``subprocess.run(capture_output=True,
    text=True)`` for one ``quill`` argv."""

    def __init__(self, cwd: Path):
        self.cwd = cwd
        self.env: dict[str, str] | None = None
        self.proc: subprocess.Popen | None = None
        self.path = ""
        self.lock = threading.Lock()

    def start(self, env: dict[str, str]) -> None:
        """Start the server with ``env`` (the environment of a cold call, ``QUILL_HOME``
        aside) without waiting for it: its imports overlap the first tests."""
        with self.lock:
            self.env = dict(env)
            if self.proc is None or self.proc.poll() is not None:
                self._start()

    def _ensure(self) -> None:
        """Wait until the server listens (its imports take seconds, minutes on a loaded
        machine); start it again if it died. Raises ``RuntimeError`` if it cannot start."""
        with self.lock:
            if self.proc is None or self.proc.poll() is not None:
                self._start()
            while not os.path.exists(self.path):
                if self.proc.poll() is not None:
                    raise RuntimeError(f"the CLI fork server exited {self.proc.returncode}")
                time.sleep(0.02)

    def _start(self) -> None:
        folder = tempfile.mkdtemp(prefix="quill-cli-fork-")
        self.path = os.path.join(folder, "socket")
        here = str(Path(__file__).parent)
        code = (  # the server's sys.path is a cold `python -c`'s: the tests' dir is removed
            f"import sys; sys.path.append({here!r}); import cli_forkserver as f; "
            f"sys.path.remove({here!r}); f.serve({self.path!r})"
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            env=self.env,
            cwd=self.cwd,
        )

    def usable(self, env: dict[str, str]) -> bool:
        """Whether a call with ``env`` gets the same interpreter as a cold start would."""
        if os.environ.get("QUILL_TEST_COLD_CLI") == "1":
            return False
        with self.lock:
            if self.env is None:
                self.env = dict(env)
        return _startup_env(env) == _startup_env(self.env)

    def _fork(
        self, args: list[str], env: dict[str, str], fds: list[int]
    ) -> tuple[socket.socket, int]:
        """Fork ``quill ARGS`` with ``fds`` as its stdin, stdout and stderr: the connection
        that will carry its exit code, and its pid."""
        self._ensure()
        umask = os.umask(0o022)
        os.umask(umask)
        request = {"args": args, "env": env, "cwd": str(self.cwd), "umask": umask}
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            conn.connect(self.path)
            socket.send_fds(conn, [json.dumps(request).encode()], fds)
            return conn, json.loads(conn.recv(MAX_MESSAGE))["pid"]
        except BaseException:
            conn.close()
            raise

    def popen(
        self, args: list[str], env: dict[str, str], stdout: bool, text: bool
    ) -> ForkedProcess:
        """``subprocess.Popen`` of ``quill ARGS`` (stdin from /dev/null; stderr captured,
        stdout too when ``stdout`` else discarded), forked."""
        folder = tempfile.mkdtemp(prefix="quill-cli-out-")
        paths = [os.path.join(folder, "stdout"), os.path.join(folder, "stderr")]
        opened = [os.open(os.devnull, os.O_RDONLY)]
        try:
            for path, keep in zip(paths, (stdout, True)):
                target = path if keep else os.devnull
                opened.append(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
            conn, pid = self._fork(args, env, opened)
        finally:
            for fd in opened:
                os.close(fd)
        return ForkedProcess(conn, pid, args, paths[0] if stdout else None, paths[1], text)

    def run(
        self, args: list[str], env: dict[str, str], input: str | None, timeout: float
    ) -> subprocess.CompletedProcess:
        """Run ``quill ARGS`` forked; raises ``subprocess.TimeoutExpired`` (after SIGKILL)."""
        with (
            _stdin(input) as stdin,
            tempfile.TemporaryFile() as out,
            tempfile.TemporaryFile() as err,
        ):
            conn, pid = self._fork(args, env, [stdin.fileno(), out.fileno(), err.fileno()])
            conn.settimeout(timeout)
            try:
                reply = conn.recv(MAX_MESSAGE)
            except TimeoutError:
                os.kill(pid, 9)
                conn.settimeout(None)
                conn.recv(MAX_MESSAGE)
                raise subprocess.TimeoutExpired(args, timeout, _text(out), _text(err)) from None
            finally:
                conn.close()
            returncode = json.loads(reply)["returncode"]
            return subprocess.CompletedProcess(args, returncode, _text(out), _text(err))

    def close(self) -> None:
        """Stop the server: it exits when its stdin closes, or is killed if still importing."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _stdin(input: str | None):
    if input is None:
        return open(os.devnull, "rb")
    f = tempfile.TemporaryFile()
    f.write(input.encode(_encoding()))
    f.seek(0)
    return f


def _encoding() -> str:
    import locale

    return locale.getpreferredencoding(False)


def _text(f) -> str:
    """What ``subprocess.run(text=True)`` returns for the bytes written to ``f``."""
    f.seek(0)
    return f.read().decode(_encoding()).replace("\r\n", "\n").replace("\r", "\n")


class ForkedProcess:
    """What the tests use of ``subprocess.Popen`` for a forked ``quill`` command: ``pid``,
    ``returncode``, ``poll``, ``wait``, ``send_signal``, ``terminate``, ``kill``,
    ``communicate`` and ``stdout``/``stderr`` (files the process appends to, read as a pipe
    would be: what was not read yet; None when not captured)."""

    def __init__(
        self, conn: socket.socket, pid: int, args: list[str], out: str | None, err: str, text: bool
    ):
        self._conn, self.pid, self.args, self.returncode = conn, pid, args, None
        self.stdout = _Output(out, text) if out else None
        self.stderr = _Output(err, text)
        self._folder = os.path.dirname(err)

    def _reply(self, data: bytes) -> int:
        if not data:
            raise RuntimeError("the CLI fork server went away")
        self.returncode = json.loads(data)["returncode"]
        self._conn.close()
        return self.returncode

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                return self._reply(self._conn.recv(MAX_MESSAGE, socket.MSG_DONTWAIT))
            except BlockingIOError:
                return None
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self._conn.settimeout(timeout)
            try:
                return self._reply(self._conn.recv(MAX_MESSAGE))
            except TimeoutError:
                raise subprocess.TimeoutExpired(self.args, timeout) from None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(15)

    def kill(self) -> None:
        self.send_signal(9)

    def communicate(self, input: None = None, timeout: float | None = None) -> tuple[Any, Any]:
        self.wait(timeout)
        return (self.stdout.read() if self.stdout else None), self.stderr.read()

    def __del__(self) -> None:
        shutil.rmtree(self._folder, ignore_errors=True)


class _Output:
    """A captured stream of a forked process, read from where the last read stopped."""

    def __init__(self, path: str, text: bool):
        self.path, self.text, self.offset = path, text, 0

    def read(self) -> Any:
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        self.offset += len(data)
        if self.text:
            return data.decode(_encoding()).replace("\r\n", "\n").replace("\r", "\n")
        return data

"""A request that meets descriptor exhaustion answers 503 ``overloaded`` with Retry-After,
never 500 or "no store"/401, and the server answers 200 again once descriptors are free.

A real ``quill serve`` started under ``prlimit --nofile``; its limit is then lowered live
(``prlimit --pid``) to just above what it holds, and real connections that send part of a
request head (held by the server until its header deadline) take the rest, one at a time,
until a request can still be accepted but cannot open the store or the kernel's tables."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time

import httpx
from conftest import REPO, QuillCLI, quill_env, stop_fleet
from harness import drain, make_home
from service_helpers import free_port

from quill.ops.client.client import Client


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


@contextlib.contextmanager
def _serve_limited(quill_home, nofile: int):
    port = free_port()
    argv = ["prlimit", f"--nofile={nofile}:{nofile}", "--"]
    argv += QuillCLI(quill_home).argv("serve", "--listen", f"127.0.0.1:{port}")
    proc = subprocess.Popen(
        argv, env=quill_env(quill_home), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.1)
        yield proc, port, base
    finally:
        stop_fleet(proc)
        proc.communicate(timeout=10)


def _probe(base: str) -> httpx.Response | None:
    """One request on a new connection; None when the server did not accept it in time."""
    try:
        return httpx.get(f"{base}/api/v1/sessions", timeout=3)
    except httpx.TransportError:
        return None


def test_descriptor_exhaustion_answers_503_overloaded_and_the_server_recovers(tmp_path):
    cfg = make_home(tmp_path / "h", http={"header_timeout_s": 300})
    Client(config_=cfg).append("s1", [{"role": "user", "content": "hello"}])
    drain(cfg.home)
    held: list[socket.socket] = []
    with _serve_limited(cfg.home, 256) as (proc, port, base):
        assert _probe(base).status_code == 200
        time.sleep(0.5)
        limit = _fds(proc.pid) + 24
        subprocess.run(["prlimit", f"--pid={proc.pid}", f"--nofile={limit}:{limit}"], check=True)
        answers: list[int | None] = []
        try:
            for _ in range(40):
                r = _probe(base)
                answers.append(None if r is None else r.status_code)
                if r is not None and r.status_code == 503:
                    break
                if r is None:  # no descriptor even to accept: give one back, ask again
                    held.pop().close()
                    time.sleep(1.2)  # asyncio pauses accepting for 1 s after EMFILE
                    continue
                assert r.status_code == 200, r.text
                # Never "no store yet": a store open that failed for want of descriptors
                # is not an empty store.
                assert [x["id"] for x in r.json()["sessions"]] == ["s1"], answers
                s = socket.create_connection(("127.0.0.1", port))
                s.sendall(b"GET /api/v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                held.append(s)
                want = len(held)
                until = time.monotonic() + 5
                while _fds(proc.pid) < limit - 24 + want and time.monotonic() < until:
                    time.sleep(0.05)
            assert r is not None and r.status_code == 503, (answers, r and r.text)
            assert r.json()["error"]["reason"] == "overloaded", r.text
            assert r.headers["Retry-After"] == "1"
        finally:
            for s in held:
                s.close()
        until = time.monotonic() + 15
        while True:
            r = _probe(base)
            if r is not None and r.status_code == 200 or time.monotonic() > until:
                break
            time.sleep(0.3)
        assert r is not None and r.status_code == 200, r and r.text
        assert [x["id"] for x in r.json()["sessions"]] == ["s1"]

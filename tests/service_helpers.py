"""Helpers for the HTTP service tests: a real `quill serve` subprocess on a free port."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from collections.abc import Iterator

import httpx
from conftest import REPO, QuillCLI, quill_env, stop_fleet


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def served(quill: QuillCLI, *args: str, host: str = "127.0.0.1", preexec_fn=None) -> Iterator[str]:
    """Run `quill serve --listen HOST:PORT ARGS…` until the block ends; yields the base URL
    (always on 127.0.0.1 unless ``host`` is a connectable address). ``preexec_fn`` runs in
    the child before it starts (e.g. to lower its descriptor limit)."""
    port = free_port()
    argv = ("serve", "--listen", f"{host}:{port}", *args)
    proc = (
        quill.popen(*argv, stdout=True)
        if preexec_fn is None
        else subprocess.Popen(
            quill.argv(*argv),
            env=quill_env(quill.home),
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=preexec_fn,
        )
    )
    base = f"http://{'127.0.0.1' if host in ('0.0.0.0', '127.0.0.1') else host}:{port}"
    try:
        deadline = time.monotonic() + 120  # a loaded 2-core machine: imports take ~20 s
        while True:
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"quill serve did not start: {proc.communicate(timeout=5)}")
            time.sleep(0.1)
        yield base
    finally:
        stop_fleet(proc)
        proc.communicate(timeout=10)


def token(quill: QuillCLI, *scopes: str, name: str = "t") -> str:
    args = [a for s in scopes for a in ("--scope", s)]
    return quill.json("token", "create", name, *args)["token"]


def bearer(tok: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {tok}"} if tok else {}

"""A PostgreSQL peer that is alive but never answers (a frozen proxy or pooler, a hung server)
holds nothing without bound: the store's URL goes through a real TCP proxy process in front of
the real server, and the proxy is stopped (SIGSTOP). Its kernel goes on acknowledging every
byte, so keepalives and ``tcp_user_timeout`` never fire; only the client's own bound on each
round trip (``[store] answer_timeout_s``, ``store.postgres.bounded``) ends the wait. Then the
writer's turn returns with a ``TransientError`` it publishes, and once the proxy goes on
(SIGCONT) the writer resumes: every record stored exactly once."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from urllib.parse import urlsplit, urlunsplit

import psycopg
from harness import InProcessWriter

#: A one-process TCP proxy (asyncio): ``proxy.py LISTEN_PORT HOST PORT``; prints "ready".
PROXY = r"""
import asyncio, sys

async def pipe(r, w):
    try:
        while data := await r.read(65536):
            w.write(data)
            await w.drain()
    finally:
        w.close()

async def serve(r, w):
    ur, uw = await asyncio.open_connection(sys.argv[2], int(sys.argv[3]))
    await asyncio.gather(pipe(r, uw), pipe(ur, w), return_exceptions=True)

async def main():
    server = await asyncio.start_server(serve, "127.0.0.1", int(sys.argv[1]))
    print("ready", flush=True)
    await server.serve_forever()

asyncio.run(main())
"""

#: Seconds one round trip may take (``[store] answer_timeout_s``) and a connection attempt.
ANSWER_S = 2
#: How long the test waits for a turn before calling it held without bound (several bounds:
#: a loaded machine).
HELD_S = 30.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _through(url: str, port: int) -> str:
    parts = urlsplit(url)
    user = parts.netloc.rsplit("@", 1)[0] + "@" if "@" in parts.netloc else ""
    return urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{port}"))


def _stored(url: str) -> list[str]:
    with psycopg.connect(url, autocommit=True) as conn:
        return [r[0] for r in conn.execute("SELECT content FROM messages ORDER BY content")]


def test_a_frozen_proxy_fails_the_writers_turn_within_the_bound_and_it_resumes(
    tmp_path, pg_store_url
):
    upstream = urlsplit(pg_store_url)
    port = _free_port()
    proxy = subprocess.Popen(
        [sys.executable, "-c", PROXY, str(port), upstream.hostname, str(upstream.port or 5432)],
        stdout=subprocess.PIPE,
        text=True,
    )
    stopped = False
    try:
        assert proxy.stdout.readline().strip() == "ready"
        w = InProcessWriter(
            tmp_path / "h",
            _through(pg_store_url, port),
            store={"answer_timeout_s": ANSWER_S, "connect_timeout_s": ANSWER_S},
        )
        w.say("s", "before")
        w.until_idle()
        assert _stored(pg_store_url) == ["before"]

        w.say("s", "during")
        os.kill(proxy.pid, signal.SIGSTOP)
        stopped = True
        turned: list[float] = []
        turn = threading.Thread(target=lambda: turned.append(w.turn()), daemon=True)
        turn.start()
        turn.join(HELD_S)
        held = turn.is_alive()
        os.kill(proxy.pid, signal.SIGCONT)  # the old code's turn ends only now
        stopped = False
        turn.join(HELD_S)
        assert not held, "the writer's turn waited on the frozen proxy without bound"
        assert turned and turned[0] > 0  # a retry's pause, not more work
        error = w.writer.error or ""
        assert "TransientError" in error and "no answer" in error, error
        assert w.status()["error"] == error  # what `quill status` shows for the writer
        assert _stored(pg_store_url) == ["before"]  # nothing committed through the frozen peer

        w.until_idle()  # the proxy answers again: the writer reconnects and resumes
        assert _stored(pg_store_url) == ["before", "during"]  # each exactly once
        assert w.writer.error is None
        w.writer.shutdown()
    finally:
        if stopped:
            os.kill(proxy.pid, signal.SIGCONT)
        proxy.kill()
        proxy.wait()


def test_a_hung_statement_is_given_up_and_long_work_gets_its_longer_bound(pg_store_url):
    """A server that takes longer than the bound (here ``pg_sleep``: a hung server as the
    client sees it) fails the round trip with ``TransientError`` and the connection closed;
    inside ``longer`` the same statement is waited for."""
    from quill.store.errors import TransientError
    from quill.store.postgres import PgConnection

    conn = PgConnection(pg_store_url, answer_timeout=1.0)
    try:
        with conn.longer(30.0):
            assert conn.execute("SELECT pg_sleep(1.5), 1").fetchone()[1] == 1
        try:
            conn.execute("SELECT pg_sleep(20)")
        except TransientError as exc:
            assert type(exc) is TransientError and "no answer" in str(exc)
        else:
            raise AssertionError("a 20 s statement outlived a 1 s bound")
        assert conn.closed
    finally:
        conn.close()

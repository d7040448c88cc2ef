"""Abuse of a real `quill serve` over real sockets: trickling (slowloris) clients, slow
bodies and request floods must not keep `/healthz` or an authenticated append from answering.
"""

from __future__ import annotations

import contextlib
import resource
import socket
import threading
import time

import httpx
from service_api_helpers import MSG
from service_helpers import bearer, served, token

#: The server's descriptor limit in the slowloris test; the test opens more trickling
#: connections than that.
SERVER_FDS, TRICKLERS = 256, 400


def _low_fds() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (SERVER_FDS, SERVER_FDS))


def _config(quill, **http: object) -> None:
    quill.home.mkdir(parents=True, exist_ok=True)
    lines = ["[http]", *(f"{k} = {v!r}" for k, v in http.items())]
    (quill.home / "config.toml").write_text("\n".join(lines) + "\n")


def _port(base: str) -> int:
    return int(base.rsplit(":", 1)[1])


class Tricklers:
    """``n`` real sockets, each sending a request head one byte a second and reconnecting
    when the server closes it (as a slowloris client does)."""

    def __init__(self, port: int, n: int):
        self.port, self.n, self.stop = port, n, threading.Event()
        self.socks: list[socket.socket | None] = [None] * n
        self.reconnects = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _open(self, i: int) -> None:
        try:
            s = socket.create_connection(("127.0.0.1", self.port), timeout=0.5)
            s.setblocking(False)
            s.send(b"GET /healthz HTTP/1.1\r\n")
            self.socks[i] = s
        except OSError:
            self.socks[i] = None

    def _run(self) -> None:
        for i in range(self.n):
            self._open(i)
        while not self.stop.wait(1.0):
            for i, s in enumerate(self.socks):
                try:
                    if s is None:
                        raise OSError
                    s.send(b"X")
                except OSError:
                    with contextlib.suppress(OSError):
                        s and s.close()
                    self.reconnects += 1
                    self._open(i)

    def __enter__(self) -> Tricklers:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=30)
        for s in self.socks:
            if s is not None:
                s.close()


def test_healthz_and_an_append_answer_while_hundreds_of_clients_trickle(quill):
    tok = token(quill, "write", "read", name="writer")
    with served(quill, preexec_fn=_low_fds) as base, Tricklers(_port(base), TRICKLERS):
        time.sleep(3)  # every trickler has connected (or tried to) and sent a few bytes
        for i in range(3):
            health = httpx.get(f"{base}/healthz", timeout=10)
            assert health.status_code == 200
            r = httpx.post(
                f"{base}/api/v1/sessions/abuse-{i}/messages",
                json={"messages": [MSG]},
                headers=bearer(tok),
                timeout=10,
            )
            assert r.status_code == 202, r.text
            time.sleep(0.5)
        # still answering (within the client's timeout: no timed assert on a shared machine)
        assert httpx.get(f"{base}/healthz", timeout=10).status_code == 200


def test_a_request_head_that_never_completes_is_cut_off_at_the_header_deadline(quill):
    _config(quill, header_timeout_s=1.0)
    with served(quill) as base:
        s = socket.create_connection(("127.0.0.1", _port(base)), timeout=10)
        s.send(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        began, closed = time.monotonic(), False
        while time.monotonic() - began < 8:
            try:
                s.send(b"X")
            except OSError:
                closed = True
                break
            s.settimeout(1.0)
            try:
                if s.recv(100) == b"":
                    closed = True
                    break
            except TimeoutError:
                pass
            except OSError:  # reset by the server: cut off as well
                closed = True
                break
        s.close()
        assert closed, "the server kept a connection that never finished its request head"
        assert httpx.get(f"{base}/healthz", timeout=10).status_code == 200


def test_a_body_that_does_not_arrive_in_time_gets_408(quill):
    _config(quill, body_timeout_s=1.0)
    with served(quill) as base:
        s = socket.create_connection(("127.0.0.1", _port(base)), timeout=10)
        s.send(
            b"POST /api/v1/sessions/slow/messages HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b'Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"messages"'
        )
        reply = b""
        while chunk := s.recv(4096):  # the server closes after the error
            reply += chunk
        s.close()
        assert reply.startswith(b"HTTP/1.1 408"), reply
        assert b"body-timeout" in reply


def test_a_client_past_its_request_budget_gets_429_and_healthz_still_answers(quill):
    _config(quill, requests_per_s=1.0, request_burst=5)
    with served(quill) as base, httpx.Client(timeout=10) as http:
        codes = [http.get(f"{base}/api/v1/sessions").status_code for _ in range(12)]
        assert codes[:5] == [200] * 5
        assert 429 in codes
        limited = http.get(f"{base}/api/v1/sessions")
        assert limited.status_code == 429
        assert int(limited.headers["Retry-After"]) >= 1
        assert limited.json()["error"]["reason"] == "too-many-requests"
        assert http.get(f"{base}/healthz").status_code == 200

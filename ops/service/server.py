"""Running the app with uvicorn: ``quill serve`` and the fleet's ``http`` child.

uvicorn's own access log is off (it prints raw paths and queries); the app logs each request
itself (``app._AccessLog``). ``listen`` is ``HOST:PORT`` (``[::1]:8765`` for IPv6).
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

import uvicorn

from quill.ops.service import guard
from quill.ops.service.app import create_app


class ListenError(ValueError):
    """``listen`` is not HOST:PORT, or a non-loopback bind would admit anonymous callers."""


def parse_listen(listen: str) -> tuple[str, int]:
    """``"127.0.0.1:8765"`` → ``("127.0.0.1", 8765)``; ``"[::1]:8765"`` → ``("::1", 8765)``."""
    host, sep, port = listen.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ListenError(f"listen must be HOST:PORT (got {listen!r})")
    return host, int(port)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (as uvicorn binds one: SO_REUSEADDR, backlog
    ``guard.ACCEPT_BATCH``). Bound before anything says the service is up, so a port already
    in use is an ``OSError`` here (errno EADDRINUSE) instead of uvicorn's exit after a success
    line."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(guard.ACCEPT_BATCH)
    except BaseException:
        sock.close()
        raise
    return sock


def bind_tokens(cfg: Any, log: Any) -> None:
    """Bind a ``tokens.db`` from before bindings to this data dir (``TokenStore.bind``) as
    the server starts. Never raises for the file: one bound elsewhere is logged (every token
    is refused until the owner decides), and one that cannot be written now (locked by
    another process, I/O) is logged and left unbound: the server serves, its tokens are
    checked as ever (an unbound file's tokens are accepted) and the next start binds it."""
    from quill.ops.service.tokens import TokensCopiedError, TokenStore, TokensUnavailableError

    try:
        TokenStore(cfg.tokens_db).bind()
    except TokensCopiedError as exc:
        log.error("http.tokens_copied", error=str(exc))
    except TokensUnavailableError as exc:
        log.warning("http.tokens_unbound", error=str(exc))


def serve(
    cfg: Any,
    log: Any,
    listen: str,
    *,
    anonymous: str | None = None,
    on_started: Any = None,
    sock: socket.socket | None = None,
) -> None:
    """Serve until SIGINT/SIGTERM, on ``sock`` when given (``bind``), else on ``listen``.
    Raises ``ListenError`` for a bad ``listen`` and ``OSError`` when it cannot be bound."""
    host, port = parse_listen(listen)
    sock = sock or bind(host, port)
    bind_tokens(cfg, log)
    app = create_app(cfg, log, anonymous=anonymous)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        access_log=False,
        log_config=None,
        server_header=False,
        timeout_graceful_shutdown=5,
        **guard.uvicorn_settings(cfg),
    )
    server = uvicorn.Server(config)
    if on_started is not None:
        app.router.on_startup.append(lambda: on_started(host, port))
    log.info("http.listening", host=host, port=port, anonymous=anonymous or cfg.http_anonymous)
    server.run(sockets=[sock])

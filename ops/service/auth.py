"""Who may call what: bearer tokens with scopes, and the anonymous-caller policy.

A request presents ``Authorization: Bearer quill_…`` (API clients) or the ``quill_token``
cookie the dashboard's sign-in form sets (HttpOnly, SameSite=Strict). A presented token must be
valid and unrevoked, else 401 — it never falls back to anonymous. Without a token, the
``[http] anonymous`` policy decides: ``loopback`` (default) lets callers on a loopback address
read and write (the same reach the local CLI has), ``none`` refuses everyone, ``any`` (an
explicit override, for a trusted network) admits every peer. Anonymous callers never get
``admin``: running jobs takes a token.

A loopback address alone does not make a caller the data dir's owner: on a machine with
several accounts every local user can reach 127.0.0.1. So the ``loopback`` policy admits an
anonymous caller only when the kernel's socket table shows the connection's client end owned
by the user the server runs as (``peer.peer_uid``: the data dir is that user's, 0700); another
local user needs a token like any remote caller.

A loopback peer alone does not make a loopback caller either: a web page on another site can reach
127.0.0.1 through the browser, by DNS rebinding (its own name resolved to 127.0.0.1, so the
page is same-origin with the service and its requests arrive from the loopback address). Such
requests carry the page's name in ``Host`` and ``Origin``, so the ``loopback`` policy also
requires both to name a loopback host (``localhost``, 127.0.0.0/8, ``::1``); a token is
required otherwise. The dashboard cookie is ``SameSite=Strict`` and scoped to the service's own
name, so a rebinding page never presents it.

``SameSite`` does not separate the ports of one host: a page served from another local port
(``http://127.0.0.1:18769``) is same-site with the dashboard and its form POSTs carry the
cookie. So a state change authenticated by the cookie (any method but GET, HEAD, OPTIONS)
must come from the dashboard's own origin: its ``Origin`` (or, without one, ``Referer``) must
name the same scheme, host and port as the request's ``Host`` (``same_origin``), else 403.
A bearer token in the ``Authorization`` header is never sent by a browser on its own, so API
clients are not asked for an origin.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from fastapi import Request

from quill.ops.service.errors import ApiError
from quill.ops.service.peer import peer_uid
from quill.ops.service.tokens import (
    Principal,
    TokensCopiedError,
    TokenStore,
    TokensUnavailableError,
)

COOKIE = "quill_token"
ANONYMOUS_SCOPES = frozenset({"read", "write"})
#: Seconds a ``tokens-unavailable`` answer asks the client to wait (a lock on ``tokens.db``
#: held past its 5 s busy timeout is a transaction someone left open).
TOKENS_RETRY_S = 5


def _loopback(host: str | None) -> bool:
    try:
        return host is not None and ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _loopback_name(host: str | None) -> bool:
    """Whether a host name (``Host`` header or URL host, without the port) names this
    machine's loopback interface: ``localhost`` (RFC 6761 §6.3), or a loopback address."""
    if not host:
        return False
    host = host.strip("[]").lower().rstrip(".")
    return host == "localhost" or host.endswith(".localhost") or _loopback(host)


def _names_loopback(request: Request) -> bool:
    """Whether the request's ``Host`` and (when present) ``Origin`` both name a loopback host:
    what a local client sends, and what a DNS-rebinding web page cannot (module doc)."""
    try:
        host = urlsplit(f"//{request.headers.get('host', '')}").hostname
        origin = request.headers.get("origin")
        origin_host = urlsplit(origin).hostname if origin is not None else None
    except ValueError:  # a malformed port or bracket: not a name we can vouch for
        return False
    return _loopback_name(host) and (origin is None or _loopback_name(origin_host))


def presented_token(request: Request) -> str | None:
    """The bearer token of the request (header first, then the dashboard cookie), or None."""
    header = request.headers.get("authorization")
    if header:
        kind, _, value = header.partition(" ")
        return value.strip() if kind.lower() == "bearer" and value.strip() else ""
    return request.cookies.get(COOKIE)


#: Methods that change nothing: a cookie-authenticated request of another method must be
#: same-origin (module doc).
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def same_origin(request: Request) -> bool:
    """Whether the request's ``Origin`` (or, without one, its ``Referer``) names the scheme,
    host and port the request was sent to (its URL scheme and ``Host`` header): a form POST of
    the dashboard's own pages, not of a page served elsewhere (another port of this host
    included). False when neither header is present."""
    source = request.headers.get("origin") or request.headers.get("referer")
    if not source or source == "null":
        return False
    try:
        parts = urlsplit(source)
        own = urlsplit(f"{request.url.scheme}://{request.headers.get('host', '')}")
        return (parts.scheme, parts.hostname, parts.port or _PORTS.get(parts.scheme)) == (
            own.scheme,
            own.hostname,
            own.port or _PORTS.get(own.scheme),
        )
    except ValueError:  # a malformed port or bracket
        return False


_PORTS = {"http": 80, "https": 443}


def require_same_origin(request: Request) -> None:
    """Raise ``ApiError`` 403 unless ``same_origin(request)`` (a cookie-authenticated state
    change from a page of another origin: cross-site request forgery)."""
    if not same_origin(request):
        raise ApiError(
            403,
            "forbidden",
            "a state change signed in by the dashboard cookie must come from the dashboard's "
            "own pages (Origin or Referer of this service); API clients send a bearer token",
        )


def _owner_on_loopback(request: Request) -> bool:
    """Whether the connection's client end belongs to the user this server runs as."""
    client, server = request.scope.get("client"), request.scope.get("server")
    if not client or not server:
        return False
    return peer_uid((client[0], client[1]), (server[0], server[1])) == os.geteuid()


def principal(request: Request) -> Principal:
    """Authenticate the request. Raises ``ApiError`` 401 for a bad token or a refused anonymous
    caller, 403 for a cookie-authenticated state change from another origin."""
    state = request.app.state
    token = presented_token(request)
    if (
        token is not None
        and not request.headers.get("authorization")
        and request.method not in SAFE_METHODS
    ):
        require_same_origin(request)
    if token is not None:
        try:
            found = TokenStore(state.cfg.tokens_db).verify(token) if token else None
        except TokensCopiedError as exc:  # the server's file, not the caller's token
            raise ApiError(503, "tokens-copied", str(exc)) from None
        except TokensUnavailableError as exc:  # locked by another process: it passes
            raise ApiError(
                503, "tokens-unavailable", str(exc), {"Retry-After": str(TOKENS_RETRY_S)}
            ) from None
        if found is None:
            raise ApiError(
                401,
                "unauthorized",
                "the token is malformed, unknown or revoked",
                headers={"WWW-Authenticate": 'Bearer error="invalid_token"'},
            )
        return found
    policy = state.anonymous
    peer = request.client.host if request.client else None
    if policy == "any":
        return Principal(None, ANONYMOUS_SCOPES)
    if policy == "loopback" and _loopback(peer):
        if not _owner_on_loopback(request):
            raise ApiError(
                401,
                "unauthorized",
                "anonymous access is only for the user the service runs as; another local "
                "user presents a bearer token (`quill token create`)",
                headers={"WWW-Authenticate": "Bearer"},
            )
        if _names_loopback(request):
            return Principal(None, ANONYMOUS_SCOPES)
        raise ApiError(
            401,
            "unauthorized",
            "anonymous access needs a loopback Host and Origin (a page of another "
            "site reaching 127.0.0.1 is refused); present a bearer token (`quill token create`)",
            headers={"WWW-Authenticate": "Bearer"},
        )
    raise ApiError(
        401,
        "unauthorized",
        "a bearer token is required (`quill token create`)",
        headers={"WWW-Authenticate": "Bearer"},
    )


def require(scope: str) -> Callable[[Request], Any]:
    """A FastAPI dependency: the request's ``Principal`` if it holds ``scope``, else 401/403."""

    def check(request: Request) -> Principal:
        who = principal(request)
        if not who.allows(scope):
            raise ApiError(403, "forbidden", f"this route needs the {scope!r} scope")
        request.state.principal = who
        return who

    check.__name__ = f"require_{scope}"
    return check

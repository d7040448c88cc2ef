"""Reaching a store's PostgreSQL server: whether a failed connection means its database is
missing (``database_missing``), and URLs with their passwords hidden for output (``redact``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import psycopg

from quill.store.errors import DatabaseMissingError

#: The databases asked whether a store's database exists when connecting to it failed
#: (``database_missing``): every PostgreSQL server has them unless an operator dropped both.
MAINTENANCE_DATABASES = ("postgres", "template1")
#: Seconds the maintenance connection may take, and the longest a failed connection may have
#: taken to be probed at all: a server that refuses a database answers at once, while one
#: that does not answer would otherwise double the wait of every retry.
PROBE_TIMEOUT_S = 2


def database_missing(
    failed: psycopg.OperationalError, url: str, params: Mapping[str, Any]
) -> DatabaseMissingError | None:
    """``DatabaseMissingError`` when the server of ``url`` answers and has no database by
    the name libpq resolved for the failed connection (URL, ``PGDATABASE``, else the user),
    else None (unreachable, refused, bad credentials, or the database exists: the failure was
    something else, mapped as before).

    Decided by result, not message text: libpq gives a failed connection no SQLSTATE, so the
    name is looked up in ``pg_database`` over a connection to a maintenance database with the
    same host, port, user and credentials. Only a failure without a SQLSTATE is probed."""
    resolved = failed.pgconn
    if failed.sqlstate is not None or resolved is None:
        return None
    enc = "utf-8"
    target = resolved.db.decode(enc, "replace") if resolved.db else ""
    probe = next((d for d in MAINTENANCE_DATABASES if d != target), None)
    if not target or probe is None:
        return None
    from quill.store.postgres.bounded import ANSWER_TIMEOUT, BoundedConnection

    timeout = min(int(params.get("connect_timeout") or PROBE_TIMEOUT_S), PROBE_TIMEOUT_S)
    libpq = {k: v for k, v in params.items() if k != ANSWER_TIMEOUT}
    try:
        with BoundedConnection.connect(
            url, **{**libpq, "connect_timeout": timeout}, dbname=probe, autocommit=True
        ) as conn:
            conn.answer_timeout = PROBE_TIMEOUT_S
            row = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [target]).fetchone()
            host, port, user = conn.info.host, str(conn.info.port), conn.info.user
    except psycopg.Error:
        return None  # the server is not answering either: nothing is known about the name
    return None if row is not None else DatabaseMissingError(target, host, port, user)


def redact(url: str) -> str:
    """``url`` with any password replaced by ``***`` (in the userinfo part and in a
    ``password=`` query parameter), for status output and logs. Never raises."""
    from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        if "@" in netloc:
            userinfo, host = netloc.rsplit("@", 1)
            if ":" in userinfo:
                netloc = userinfo.split(":", 1)[0] + ":***@" + host
        query = parts.query
        if query:
            pairs = parse_qsl(query, keep_blank_values=True)
            if any(k == "password" for k, _ in pairs):
                query = urlencode(
                    [(k, "***" if k == "password" else v) for k, v in pairs], safe="=,%*"
                )
        return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
    except ValueError:
        return "(unparseable URL)"

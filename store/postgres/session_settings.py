"""Server parameters of Quill's PostgreSQL sessions, set by ``PgConnection`` at connect
(``set_config``): ``SERVER_KEEPALIVES`` and ``SERVER_QUIET`` on every session,
``WRITER_SESSION`` on the sessions that write (a writer's, a migration's, an election's);
``open_session`` connects and sets them."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import psycopg

from quill.home import DEFAULTS
from quill.store.postgres.bounded import ANSWER_TIMEOUT, BoundedConnection
from quill.store.postgres.errors import mapped
from quill.store.postgres.reach import PROBE_TIMEOUT_S, database_missing

#: Server-side bounds on every Quill session: the server ends the session of a client that
#: vanished (a host off the network, a closed laptop lid) within ~15 s — 5 s idle + 3
#: keepalive probes 2 s apart, or 15 s of data left unacknowledged — instead of after TCP's
#: defaults (7200 + 9 × 75 s), and notices a vanished client during a long statement every
#: 5 s. Ending the session releases everything it holds: session and transaction advisory
#: locks (``schema.create``'s migration lock, ``apply``'s per-session locks), row and table
#: locks, an open transaction.
SERVER_KEEPALIVES: dict[str, str] = {
    "tcp_keepalives_idle": "5",
    "tcp_keepalives_interval": "2",
    "tcp_keepalives_count": "3",
    "tcp_user_timeout": "15000",
    "client_connection_check_interval": "5000",
}


#: Server messages below ERROR are not sent to Quill's sessions. During ``COPY … FROM STDIN``
#: the client only writes; a server that sends a NOTICE per row (``to_tsvector`` of every
#: word over 2,047 characters: "word is too long to be indexed", in the generated search
#: column) fills the socket both ways once the notices outgrow the buffers, and both sides
#: then wait on each other's writes forever: the writer hangs, and so does every ``DROP
#: DATABASE`` on the server (its barrier waits for the stuck backend). Nothing in Quill reads
#: notices or warnings; an error still ends the statement and reaches the caller.
SERVER_QUIET: dict[str, str] = {"client_min_messages": "error"}


#: Server-side bound on a session that writes (a writer's, a migration's): a transaction left
#: idle this long (ms) between statements — its process frozen (SIGSTOP, a debugger, a VM
#: paused) while the network stays up, so keepalives never end it — is ended by the server
#: (SQLSTATE 25P03, a ``TransientError``), releasing its locks: the per-session advisory
#: locks of ``store.postgres.apply``, the migration lock, claim rows. A chunk's statements
#: follow each other within milliseconds; nothing a writer does waits this long in between.
#: Readers are not bounded so (an export may pause between pages of one snapshot).
WRITER_SESSION: dict[str, str] = {"idle_in_transaction_session_timeout": "60000"}


def open_session(
    url: str,
    application_name: str,
    settings: Mapping[str, str] | None,
    conninfo: Mapping[str, Any],
) -> BoundedConnection:
    """A psycopg connection (``BoundedConnection``) to ``url`` in autocommit mode with
    ``SERVER_KEEPALIVES``, ``SERVER_QUIET`` and then ``settings`` set on the session (one
    round trip). ``conninfo``: libpq parameters over ``DEFAULTS.pg_client_params()``, and
    ``answer_timeout`` (s, None: unbounded), the longest one round trip may take. Raises the
    store error tree (``DatabaseMissingError`` when a quick refusal names a database that does
    not exist)."""
    params: dict[str, Any] = {**DEFAULTS.pg_client_params(), **conninfo}
    answer_timeout = params.pop(ANSWER_TIMEOUT)
    with mapped():
        # prepare_threshold=None: psycopg prepares nothing by itself. A prepared search
        # turns into a generic plan after five runs, and a generic plan cannot see the
        # pattern of ``left(content, 2000) ILIKE $1``, so it walks every row instead of
        # using the trigram index (bench/RESULTS.md). Only statements whose generic plan
        # is known to be the right one are prepared, by name (``PgConnection._generic``).
        began = time.monotonic()
        try:
            raw = BoundedConnection.connect(
                url,
                autocommit=True,
                application_name=application_name,
                prepare_threshold=None,
                **params,
            )
        except psycopg.OperationalError as exc:
            # A failure that took its time (a server not answering: a partition, a hung
            # host) is not probed, so a caller's bound on a failed connect holds.
            slow = time.monotonic() - began >= PROBE_TIMEOUT_S
            missing = None if slow else database_missing(exc, url, params)
            if missing is not None:
                raise missing from exc
            raise
        raw.answer_timeout = answer_timeout
        try:
            pairs = [*SERVER_KEEPALIVES.items(), *SERVER_QUIET.items(), *(settings or {}).items()]
            raw.execute(
                "SELECT " + ", ".join("set_config(%s, %s, false)" for _ in pairs),
                [x for pair in pairs for x in pair],
            )
        except BaseException:
            raw.close()
            raise
    return raw

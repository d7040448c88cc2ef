"""A PostgreSQL connection (psycopg 3) that speaks the SQL the shared store modules write.

The op appliers (``store.apply.sessions``, ``store.apply.messages``), projections, listings and
lineage are written once, in the SQL subset both engines accept, against apsw's calling
convention (``conn.execute(sql, args)`` returning an iterable cursor, ``executemany``,
``changes()``, ``in_transaction``). ``PgConnection`` offers the same convention over psycopg,
so those modules run unchanged on PostgreSQL. What it translates is a fixed, small list
(``store.postgres.dialect``).

A read snapshot's ``BEGIN`` is not sent on its own: it goes in one simple query with the first
statement of the snapshot (the snapshot is taken by that first statement either way), and a
snapshot that ran no statement ends without a round trip. Measured with psycopg 3.3 (BEGIN,
one indexed SELECT, COMMIT; loaded 2-core machine, p50): separate statements 0.19–0.20 ms,
BEGIN and the SELECT in pipeline mode 0.24–0.28 ms, in one simple query 0.13 ms. On a
read-only session (a reader's) the snapshot's ``COMMIT`` is sent without waiting for its
answer (``_send_commit``): a search found by one statement is one round trip.

SQLite's two-argument scalar ``max(a, b)``/``min(a, b)`` exist as SQL functions in the store
schema (``store.postgres.schema``). Everything else must be written portably by the shared
modules (an alias on every subquery in FROM, no ``LIMIT -1``).

Every psycopg error leaves here as the store error tree (``store.postgres.errors``).
"""

from __future__ import annotations

import contextlib
import functools
import re
import select
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import psycopg
from psycopg import pq
from psycopg.adapt import Transformer

from quill.store.postgres.bounded import LONG_WORK_ANSWER_S, NoAnswerError
from quill.store.postgres.cursor import ROWS, PgCursor
from quill.store.postgres.dialect import ordered_args, translate
from quill.store.postgres.errors import mapped
from quill.store.postgres.session_settings import open_session

_PLACEHOLDER = re.compile(r"%%|%s")
_ROLLBACK_TO = re.compile(r"ROLLBACK\s+TO\s+(?:SAVEPOINT\s+)?(\w+)$")
_SAVEPOINT = re.compile(r"SAVEPOINT\s+(\w+)$")


@functools.lru_cache(maxsize=512)
def _template(text: str, encoding: str) -> bytes:
    """``text`` (``translate``'s) encoded: a bytes ``%`` template for its arguments."""
    return text.encode(encoding)


#: Most rows an ``executemany`` sends as statements of its own with the queued ones
#: (``PgConnection.defer``); more go in psycopg's ``executemany`` after them.
EXECUTEMANY_QUEUED_ROWS = 64


#: The read snapshot's ``BEGIN`` as ``translate`` writes it (deferred: see module doc).
SNAPSHOT_BEGIN = "BEGIN ISOLATION LEVEL REPEATABLE READ"


class PgConnection:
    """One psycopg connection in autocommit mode, driven with explicit ``BEGIN``/``COMMIT``
    like an apsw connection. Raises the store error tree (``CantOpenError`` when the server
    cannot be reached is a ``TransientError``: see ``store.postgres.errors``)."""

    def __init__(
        self,
        url: str,
        *,
        application_name: str = "quill",
        settings: Mapping[str, str] | None = None,
        read_only: bool = False,
        **conninfo: Any,
    ):
        """``conninfo``: libpq connection parameters added to (or replacing) the defaults,
        which bound every network wait on the client side (``Settings.pg_client_params`` of
        ``DEFAULTS``: connect timeout, TCP keepalives, ``tcp_user_timeout``, and
        ``answer_timeout``: seconds one round trip may take, ``store.postgres.bounded``).
        Callers pass a data dir's own (``**cfg.pg_client_params()``), or tighter ones for a
        session whose waits must be shorter (``store.postgres.election.TCP_BOUNDS``).
        ``settings``: server parameters for this session, set after ``SERVER_KEEPALIVES`` and
        ``SERVER_QUIET`` (``set_config``, not the startup ``options``, which a pooler may
        refuse and which would replace a URL's own). ``read_only``: every transaction of the
        session is read-only (``default_transaction_read_only``), and its ``COMMIT`` is sent
        without waiting for the answer (``_send_commit``). Raises the store error tree."""
        self.url = url
        self.read_only = read_only
        if read_only:
            settings = {**(settings or {}), "default_transaction_read_only": "on"}
        # A ``COMMIT`` sent whose answer is not read yet (``_send_commit``).
        self._commit_sent = False
        self._raw = open_session(url, application_name, settings, conninfo)
        self._changes = 0
        # Statement text -> name of the prepared statement made for it on this session.
        self._prepared: dict[str, str] = {}
        # A read snapshot asked for and not sent yet (module doc): True from ``BEGIN`` to the
        # first statement after it, or to the ``COMMIT``/``ROLLBACK`` that ends it unused.
        self._begin_pending = False
        # Statements queued by ``defer`` (text, bound arguments, their cursor), in order: sent
        # in one query with the next statement that waits for the server (``flush``).
        self._queue: list[tuple[str, Sequence[Any] | None, PgCursor]] = []
        # Reads asked ahead (``ahead``) by (text, arguments): queued, then once answered
        # (``flush``) taken by an equal ``defer`` until anything else is sent.
        self._asking = False
        self._ahead_queued: dict[tuple[str, str], PgCursor] = {}
        self._ahead: dict[tuple[str, str], PgCursor] = {}
        # Quotes the queued statements' arguments (``_merged``), made at first use.
        self._tx: Transformer | None = None

    def execute(
        self, sql: str, args: Sequence[Any] | None = None, *, generic: bool = False
    ) -> PgCursor:
        """Run ``sql`` (SQLite dialect, ``translate``) with ``args``. ``generic``: run it as a
        named prepared statement with its generic plan (``_generic``): no planning after the
        first run on this session, but a plan made without the arguments' values, so only
        for statements whose plan cannot depend on them. Raises the store error tree."""
        text, order = translate(sql)
        self._ahead = {}  # whatever this sends may change what a read asked ahead found
        if text == SNAPSHOT_BEGIN and not self.in_transaction:
            self._begin_pending = True
            return PgCursor(None)
        if self._begin_pending and text.strip().upper() in ("COMMIT", "ROLLBACK"):
            self._begin_pending = False  # nothing ran inside: nothing to end
            return PgCursor(None)
        if self.read_only and not self._queue and text.strip().upper() == "COMMIT":
            return self._send_commit()
        params = ordered_args(order, args)
        if self._queue:
            ended = self._rollback_queued(text)
            if ended is not None:
                return ended
        if generic:
            self.flush()
            return self._generic(text, params)
        bind = params if params or "%s" in text or "%%" in text else None
        if self._queue:  # the queued statements and this one: one round trip
            out = PgCursor(None, self)
            self._queue.append((text, params, out))
            self.flush()
            return out
        with mapped():  # opening the cursor meets a lost connection first: map it too
            if self._begin_pending:
                cur = self._client_query(f"{SNAPSHOT_BEGIN}; {text}", bind, skip=1)
            else:
                cur = self.raw.cursor()
                cur.execute(text, bind)
        self._changes = max(cur.rowcount, 0)
        return PgCursor(cur)

    @property
    def raw(self) -> psycopg.Connection:
        """The psycopg connection, ready for a statement: the answer to a ``COMMIT`` sent
        without waiting is read first (``_settle``). Raises the store error tree."""
        if self._commit_sent:
            self._settle()
        return self._raw

    def _send_commit(self) -> PgCursor:
        """End a read-only session's transaction without waiting for the server's answer:
        the ``COMMIT`` is sent, and its answer read before the next statement (``raw``).

        Why it may go unwaited: a transaction of a read-only session wrote nothing, so its
        ``COMMIT`` has nothing to make durable and no deferred check to run; it can fail only
        with the connection, which the next statement meets as it would anyway. The server
        ends the transaction (its snapshot, its locks) when it reads the message, not when the
        client reads the answer, so nothing is held longer. A read snapshot then costs the
        round trip of its statements alone."""
        pg = self.raw.pgconn  # a COMMIT sent before this one is answered first
        if pg.transaction_status != pq.TransactionStatus.INTRANS:
            with mapped():  # none open (or an aborted one): the server's answer is needed
                self._raw.execute("COMMIT")
            return PgCursor(None)
        with mapped():
            pg.send_query(b"COMMIT")
            while pg.flush():  # a few bytes: sent at once unless the socket is full
                self._ready([], [pg.socket])
        self._commit_sent = True
        return PgCursor(None)

    def _ready(self, reads: list[int], writes: list[int]) -> None:
        """Wait until the socket is ready as asked, within the session's ``answer_timeout``
        (``BoundedConnection``): past it the connection is closed and ``NoAnswerError``
        raised (inside ``mapped``: a ``TransientError``)."""
        bound = self._raw.answer_timeout
        if not any(select.select(reads, writes, [], bound)):
            self._raw.pgconn.finish()
            raise NoAnswerError(
                f"no answer from the PostgreSQL server within {bound:g} s to a COMMIT "
                "(a hung server, or a proxy or network that holds the connection): "
                "connection closed"
            )

    def _settle(self) -> None:
        """Read the answer to the ``COMMIT`` ``_send_commit`` sent. Raises the store error
        tree (the connection lost, or the server refused it)."""
        self._commit_sent = False
        pg = self._raw.pgconn
        failed: Exception | None = None
        with mapped():
            pg.consume_input()
            while pg.is_busy():
                self._ready([pg.socket], [])
                pg.consume_input()
            while (res := pg.get_result()) is not None:
                if res.status != pq.ExecStatus.COMMAND_OK and failed is None:
                    failed = psycopg.errors.error_from_result(res)
            if failed is not None:
                raise failed

    def defer(self, sql: str, args: Sequence[Any] | None = None) -> PgCursor:
        """Queue ``sql`` (as ``execute`` takes it) inside the open transaction instead of
        sending it: it goes to the server in one query (one round trip) with the
        statements queued after it and the next statement that waits for an answer — any
        ``execute``, ``executemany``, ``copy_rows``, ``execute_script``, ``flush``, or the
        first fetch from a cursor ``defer`` returned. ``changes()`` then counts the last of
        them.

        For statements whose outcome nobody needs before then. An error of a queued
        statement is raised by the call that sends it (as the store error tree), and the
        statements after it in the query do not run; so a caller that must see a queued
        statement's error within a savepoint's scope sends something that waits before the
        scope ends (the op appliers' scopes end with their ledger insert, which waits).
        ``ROLLBACK`` and ``ROLLBACK TO`` discard the queued statements they would undo, unsent
        (every queued statement came after the last one sent, so after every savepoint
        already made); ``COMMIT`` sends them with itself. Outside a transaction (none open,
        no ``BEGIN`` queued) the statement runs at once, as ``execute``: nothing is ever left
        queued by a caller that does not end a transaction. Raises the store error tree."""
        text, order = translate(sql)
        if not self.in_transaction and text.strip().upper() != "BEGIN":
            return self.execute(sql, args)
        if self._begin_pending:  # a read snapshot's first statement takes its BEGIN along
            return self.execute(sql, args)
        params = ordered_args(order, args)
        # the key of a read asked ahead, made only while one may be asked or taken
        key = (text, repr(params)) if self._ahead or self._asking else None
        if key in self._ahead and all(_SAVEPOINT.match(t.strip().upper()) for t, *_ in self._queue):
            return self._ahead.pop(key)  # nothing sent or queued since could change its rows
        out = PgCursor(None, self)
        self._queue.append((text, params, out))
        if self._asking:
            self._ahead_queued[key] = out
        return out

    @contextlib.contextmanager
    def ahead(self) -> Iterator[None]:
        """Reads ``defer``red inside the block are asked ahead: sent with the queue, and once
        answered, a later ``defer`` of the same statement with the same arguments takes their
        rows instead of sending it again, while nothing else was sent since the answer and
        nothing but ``SAVEPOINT``s is queued (so the store it would read is the one they
        read, as far as this session goes). For reads of rows only this transaction may
        change: under its locks (``store.postgres.apply``). Any other statement sent drops
        them (``execute``, ``flush``)."""
        self._asking = True
        try:
            yield
        finally:
            self._asking = False

    def flush(self) -> list[int]:
        """Send the queued statements (``defer``) in one simple query (one round trip; the
        arguments bound on the client, psycopg's ``ClientCursor``) and read every answer.
        Not libpq's pipeline mode: psycopg ends a pipeline with a Flush after its Sync, and
        a server that reads a message after its ReadyForQuery does not arm
        ``idle_in_transaction_session_timeout`` again, so a writer frozen inside its
        transaction would hold its locks for ever (``WRITER_SESSION``). Raises the store
        error tree: the first queued statement's error (the ones after it do not run).
        Returns the rows each statement changed, in order."""
        queue, self._queue = self._queue, []
        self._ahead, asked, self._ahead_queued = {}, self._ahead_queued, {}
        if not queue:
            return []
        cur = psycopg.ClientCursor(self.raw)
        counts: list[int] = []
        try:
            with mapped():
                query = self._merged(queue)
                for _, _, out in queue:
                    out.sent = True
                cur.execute(query)  # no arguments: sent as it is
                for i, (_, _, out) in enumerate(queue):
                    if i:
                        cur.nextset()
                    res = cur.pgresult
                    rows = res is not None and (res.nfields > 0 or res.status in ROWS)
                    out._got = cur.fetchall() if rows else []
                    counts.append(max(cur.rowcount, 0))
        except BaseException:
            for _, _, out in queue:
                out._dropped = out._got is None
            raise
        finally:
            for _, _, out in queue:
                out._owner = None
        self._changes = counts[-1]
        if asked:  # answered now; usable when nothing ran after them (they end the query)
            tail = [out for _, _, out in queue[len(queue) - len(asked) :]]
            if [id(c) for c in tail] == [id(c) for c in asked.values()]:
                self._ahead = asked
        return counts

    def _merged(self, queue: Sequence[tuple[str, Sequence[Any] | None, Any]]) -> bytes:
        """The queued statements as one query, each with its arguments quoted as literals
        (psycopg's own dumpers, ``Transformer.as_literal``: what ``ClientCursor`` sends).

        Each statement's text is a template for bytes' ``%`` (``translate``: every ``%s`` an
        argument, every other ``%`` doubled), merged alone: psycopg would split the joined
        text anew on each call once it is longer than its cache takes (4 KiB, or more than
        its largest argument count), a turn's writes among them (measured: the largest
        part of a turn's client CPU, bench/RESULTS.md). Raises psycopg's ``DataError`` for a
        value it cannot send (NUL in text), before anything is sent."""
        if self._tx is None:
            self._tx = Transformer(self._raw)
        quote = self._tx.as_literal
        encoding = self._raw.info.encoding
        return b"; ".join(
            _template(text, encoding)
            % tuple(b"NULL" if a is None else quote(a) for a in bind or ())
            for text, bind, _ in queue
        )

    def _rollback_queued(self, text: str) -> PgCursor | None:
        """Discard the queued statements ``text`` (a ``ROLLBACK`` or ``ROLLBACK TO``) would
        undo; returns a cursor when nothing is left to send for it, else None (the caller
        sends ``text``)."""
        upper = text.strip().upper()
        if upper == "ROLLBACK":
            self._drop(0)
            if self.raw.info.transaction_status == pq.TransactionStatus.IDLE:
                return PgCursor(None)  # its BEGIN was never sent: nothing to end
            return None
        m = _ROLLBACK_TO.match(upper)
        if m is None:
            return None
        made = [
            i
            for i, (t, _, _) in enumerate(self._queue)
            if (sp := _SAVEPOINT.match(t.strip().upper())) and sp[1] == m[1]
        ]
        if made:  # the savepoint is queued: nothing after it ran, so it is already "rolled to"
            self._drop(made[-1] + 1)
            return PgCursor(None)
        self._drop(0)  # the savepoint was sent before every queued statement
        return None

    def _drop(self, start: int) -> None:
        self._ahead, self._ahead_queued = {}, {}
        for _, _, out in self._queue[start:]:
            out._owner, out._dropped = None, True
        del self._queue[start:]

    def _client_query(self, text: str, bind: Sequence[Any] | None, skip: int) -> Any:
        """Run ``text`` (several statements, a pending ``BEGIN`` first) as one simple query
        and return the cursor on the result of the statement after the first ``skip``."""
        # One simple query holding every statement: the arguments are bound on the client
        # (psycopg's ClientCursor quotes them as literals), the server plans with their
        # values as it does an unnamed extended-protocol statement.
        began = self._begin_pending
        self._begin_pending = False
        cur = psycopg.ClientCursor(self.raw)
        try:
            cur.execute(text, bind)
        except BaseException:
            # Refused before the BEGIN ran (an argument the client cannot send, a query the
            # server cannot parse): no snapshot was taken, and the next statement must take
            # it, not run outside it in autocommit.
            if began and self.raw.info.transaction_status == pq.TransactionStatus.IDLE:
                self._begin_pending = True
            raise
        for _ in range(skip):
            cur.nextset()
        return cur

    def _generic(self, text: str, params: Sequence[Any]) -> PgCursor:
        """``text`` (psycopg's ``%s`` placeholders) through a named prepared statement,
        made on this session by its first use (one round trip: ``PREPARE`` is not
        transactional, so the name is recorded only once the server has it), then run in
        one simple query as ``EXECUTE`` between ``SET plan_cache_mode =
        force_generic_plan`` and ``RESET`` (with a pending ``BEGIN`` in front): the plan is
        made once, without the arguments, and kept. The setting covers this statement only:
        an error rolls the ``SET`` back with the transaction it aborts."""
        name = self._prepared.get(text)
        with mapped():
            if name is None:
                name = f"quill_g{len(self._prepared)}"
                numbered = iter(range(1, text.count("%s") + 1))
                body = _PLACEHOLDER.sub(
                    lambda m: m[0] if m[0] == "%%" else f"${next(numbered)}", text
                )
                psycopg.ClientCursor(self.raw).execute(f"PREPARE {name} AS {body}", ())
                self._prepared[text] = name
            call = (
                f"EXECUTE {name}({', '.join('%s' for _ in params)})"
                if params
                else f"EXECUTE {name}"
            )
            query = f"SET plan_cache_mode = force_generic_plan; {call}; RESET plan_cache_mode"
            pending = self._begin_pending
            if pending:
                query = f"{SNAPSHOT_BEGIN}; {query}"
            cur = self._client_query(query, params, skip=1 + pending)
        self._changes = max(cur.rowcount, 0)
        return PgCursor(cur)

    def _send_begin(self) -> None:
        """Send a deferred ``BEGIN`` now (before a statement that is not ``execute``'s)."""
        if self._begin_pending:
            self._begin_pending = False
            with mapped():
                self.raw.execute(SNAPSHOT_BEGIN)

    def executemany(self, sql: str, seq: Iterable[Sequence[Any]]) -> None:
        text, order = translate(sql)
        rows = [ordered_args(order, a) for a in seq]
        if not rows:
            return
        self._send_begin()
        if self._queue and len(rows) <= EXECUTEMANY_QUEUED_ROWS:
            for row in rows:  # with the queued statements, in their round trip
                self._queue.append((text, row, PgCursor(None, self)))
            self._changes = sum(self.flush()[-len(rows) :])  # as psycopg's executemany counts
            return
        self.flush()
        self._ahead = {}  # what follows may change what they read
        with mapped(), self.raw.cursor() as cur:
            cur.executemany(text, rows)
            self._changes = max(cur.rowcount, 0)

    def copy_rows(self, table: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
        """``COPY table (columns) FROM STDIN`` of ``rows`` (text format: each value as its
        text). ``table`` and ``columns`` are trusted names (the schema's own, never input).
        Raises the store error tree."""
        names = ", ".join(f'"{c}"' for c in columns)
        self._send_begin()
        self.flush()  # a COPY goes alone: the queued statements first
        self._ahead = {}  # what follows may change what they read
        with mapped(), self.raw.cursor() as cur:
            with cur.copy(f"COPY {table} ({names}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
            self._changes = max(cur.rowcount, 0)

    def execute_script(self, sql: str) -> None:
        """Run ``sql`` (several statements, no placeholders, no translation) as one simple
        query: schema DDL. Raises the store error tree."""
        self._send_begin()
        self.flush()
        self._ahead = {}  # what follows may change what they read
        with mapped():
            self.raw.execute(sql.encode())

    @contextlib.contextmanager
    def longer(self, seconds: float) -> Iterator[None]:
        """Within the block, one round trip may take up to ``seconds`` instead of the
        session's ``answer_timeout`` (``BoundedConnection.longer``): for statements whose
        work grows with the store (an index build, ANALYZE, amcheck)."""
        with self._raw.longer(seconds):
            yield

    def changes(self) -> int:
        """Rows changed by the last statement (apsw's ``changes()``)."""
        return self._changes

    @property
    def in_transaction(self) -> bool:
        """True inside a transaction, a read snapshot whose ``BEGIN`` is deferred included."""
        return (
            self._begin_pending
            or bool(self._queue)  # ``defer`` queues only inside one (its BEGIN maybe queued)
            or self.raw.info.transaction_status != pq.TransactionStatus.IDLE
        )

    def cancel(self) -> None:
        """Ask the server to cancel the statement this connection runs now, from any thread
        (nothing happens when none runs). The statement then raises ``TransientError`` in
        the thread that ran it. Raises the store error tree when the server cannot be told."""
        with mapped():  # from another thread: never waits for a COMMIT
            self._raw.cancel_safe(timeout=self._raw.answer_timeout or LONG_WORK_ANSWER_S)

    def close(self) -> None:
        self._begin_pending = False
        self._commit_sent = False  # its answer is not needed: the server has the COMMIT
        self._drop(0)  # closing ends the transaction they were in: rolled back
        with mapped():
            self._raw.close()

    @property
    def closed(self) -> bool:
        return self._raw.closed

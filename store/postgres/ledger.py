"""The ledger of the shared PostgreSQL store (``store.apply.ledger.Ledger``): batch ids and
their outcomes in ``applied_batches``/``rejected_batches``, keyed store-wide, and the ids a
bulk run draws from the identity sequences (``store.apply.bulk``).

Most of its statements are queued (``PgConnection.defer``) so that they go with the next
statement that waits; a chunk's round trips are where the writer needs an answer.
"""

from __future__ import annotations

from typing import Any

from quill.store.apply.message_rows import STATE_ID_COLUMNS
from quill.store.contract import BadDataError
from quill.store.errors import InvalidOpError
from quill.store.postgres.connection import PgConnection

#: Errors that mean "this op's data cannot be stored" (see store.apply._BAD_DATA): the op is
#: quarantined and the drain goes on. BadDataError = SQLSTATE class 22/23 from the server.
_BAD_DATA: tuple[type[BaseException], ...] = (
    InvalidOpError,
    BadDataError,
    OverflowError,
    TypeError,
    ValueError,
    RecursionError,
)

#: Most rows a bulk run writes with one queued ``INSERT`` rather than a ``COPY``
#: (``PgLedger.insert_rows``).
INSERT_MAX_ROWS = 32

#: The identity sequences a bulk run draws from (``PgLedger.give_back``), in lock order.
_SEQUENCES = ("messages", "usage", "batches")

#: Their values before a chunk's draws, read with its first round trip (``ask_bases``).
_BASES = "SELECT " + ", ".join(
    f"pg_sequence_last_value(pg_get_serial_sequence('{t}', 'id')::regclass)" for t in _SEQUENCES
)

#: A run's message ids drawn inside its writes' query (``PgLedger.numbers``, inline): kept,
#: ascending, in a setting of the transaction (a savepoint's rollback undoes it) that the
#: message rows' ``INSERT`` later in the same query reads (``Drawn``).
_DRAW_IDS = (
    "SELECT set_config('quillrun.ids', array_agg(id ORDER BY id)::text, true) FROM "
    "(SELECT nextval(pg_get_serial_sequence('messages', 'id')) AS id "
    "FROM generate_series(1, ?)) AS d"
)
#: The run's batch numbers, the same way (``batch_refs``' statement): element k is the
#: number of the k-th batch given.
_DRAW_REFS = (
    "WITH added AS (INSERT INTO batches (batch_id) "
    "SELECT b FROM unnest(?1::text[]) WITH ORDINALITY AS u(b, n) ORDER BY n "
    "ON CONFLICT (batch_id) DO NOTHING RETURNING batch_id, id), "
    "got AS (SELECT batch_id, id FROM added UNION ALL "
    "SELECT batch_id, id FROM batches WHERE batch_id = ANY(?1::text[])) "
    "SELECT set_config('quillrun.refs', (SELECT array_agg(g.id ORDER BY u.n) "
    "FROM unnest(?1::text[]) WITH ORDINALITY AS u(b, n) JOIN got AS g ON g.batch_id = u.b)"
    "::text, true)"
)


#: The columns of a message row that ``numbers`` may hand a ``Drawn`` for: id, batch.
_DRAWN_COLUMNS = (STATE_ID_COLUMNS.index("id"), STATE_ID_COLUMNS.index("batch"))


class Drawn:
    """A number the run's writes' query draws itself (``PgLedger.numbers``, inline), in place
    of its value in a message row: element ``index`` (1-based) of the array kept in the
    transaction's setting ``setting`` (``_DRAW_IDS``, ``_DRAW_REFS``). Only
    ``PgLedger.insert_rows`` takes it; any other use fails (psycopg cannot send it)."""

    __slots__ = ("setting", "index")

    def __init__(self, setting: str, index: int):
        self.setting = setting
        self.index = index

    def __repr__(self) -> str:
        return f"Drawn({self.setting!r}, {self.index})"


class PgLedger:
    """``applied_batches``/``rejected_batches`` of the shared store: keyed by batch id
    store-wide, with the spool that decided it. Two hosts may carry the same batch (a spool
    copied with its data dir): the second to record it finds the row taken and its copy is
    rolled back as a duplicate."""

    bad_data = _BAD_DATA
    #: Runs of appends together (store.apply.bulk): ids are drawn from the identity sequence
    #: up front (``message_ids``), and a batch another host decided meanwhile sends the run
    #: back to the op-at-a-time path (``record_applied_many``).
    bulk_append = True

    def __init__(self, spool_id: str, *, unwaited: bool = False):
        """``unwaited``: a chunk that is one run sends its ledger insert with the cursor and
        the ``COMMIT`` (``last_run``); the caller redoes the chunk checked when that query is
        refused (``unwaited_sent``)."""
        self.spool_id = spool_id
        self._unwaited = unwaited
        #: The chunk's ledger insert went unwaited: a refusal now comes with the ``COMMIT``.
        self.unwaited_sent = False
        self._last = False
        #: ``ask_decided``'s batches and its queued read.
        self._asked: tuple[list[str], Any] | None = None
        #: Per identity sequence a bulk run draws from (``_SEQUENCES``): ``[value before
        #: the run's first draw (None: never drawn), values the run drew]``.
        self._drawn: dict[str, list] = {}
        #: ``ask_bases``' queued read, until ``numbers`` takes it.
        self._bases: Any = None
        #: The inline draws' statement (``numbers``), queued: they happened iff it was sent.
        self._draws: Any = None

    def open_run(self) -> None:
        self._drawn = {}

    def last_run(self) -> None:
        self._last = self._unwaited

    def drew(self, table: str, n: int) -> None:
        if table in self._drawn:
            self._drawn[table][1] += n

    def give_back(self, conn: PgConnection) -> None:
        """Return the ids a refused run drew (``Ledger.give_back``), in one round trip.

        A sequence is not rolled back with the savepoint, so without this the rows after a
        refused run would start after a gap whose size depends on how the spool was chunked
        (a replay would number them differently). Each sequence is set back to its value
        before the run only when every value drawn since is provably the run's own: its
        ``last_value`` equals that value plus the draws counted (a draw by another writer,
        or one the run did not count, makes it larger; then the gap stays, as it does for
        any op rolled back on a shared store). The check and the reset run under ``ALTER
        SEQUENCE``'s lock, which blocks every other ``nextval`` on it until this chunk ends
        (only after a refused run), so no draw can slip between them. Sequences are locked
        in ``_SEQUENCES`` order, the same on every host. Needs the sequences' owner (the
        role that created the schema). Raises the store error tree."""
        if self._draws is not None and not self._draws.sent:
            self._drawn = {}  # refused before its query went out (a value psycopg cannot send)
        self._draws = None
        steps = []
        for table in _SEQUENCES:
            before, count = self._drawn.get(table, (None, 0))
            if count <= 0:
                continue
            base = before or 0  # identity values start at 1: 0 means none drawn yet
            reset = f"setval(s, {int(base)}, true)" if base > 0 else "setval(s, 1, false)"
            steps.append(
                f"s := pg_get_serial_sequence('{table}', 'id')::regclass; "
                "EXECUTE 'ALTER SEQUENCE ' || s::text || ' NO CYCLE'; "  # the lock, no change
                f"IF coalesce(pg_sequence_last_value(s), 0) = {int(base + count)} "
                f"THEN PERFORM {reset}; END IF;"
            )
        self._drawn = {}
        if steps:
            conn.execute("DO $$ DECLARE s regclass; BEGIN " + " ".join(steps) + " END $$")

    def ask_decided(self, conn: PgConnection, batches: list[str]) -> None:
        """Queue ``decided``'s read of ``batches`` (``PgConnection.defer``), so it goes with
        the chunk's first statements; ``decided`` of the same list then reads its rows."""
        self._asked = (
            batches,
            conn.defer(
                "SELECT batch_id, digest FROM applied_batches WHERE batch_id = ANY(?1) UNION ALL "
                "SELECT batch_id, NULL FROM rejected_batches WHERE batch_id = ANY(?1)",
                (batches,),
            ),
        )

    def decided(self, conn: PgConnection, batches: list[str]) -> dict[str, str | None]:
        # Every batch of the chunk in one round trip (or none of its own: ``ask_decided``).
        if self._asked is None or self._asked[0] != batches:
            self.ask_decided(conn, batches)
        rows, self._asked = self._asked[1], None
        return {r[0]: r[1] for r in rows}

    def record_applied(
        self, conn: PgConnection, batch: str, position: str, now: float, digest: str
    ) -> bool:
        conn.execute(
            "INSERT INTO applied_batches (batch_id, spool_id, position, applied_at, digest) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            (batch, self.spool_id, position, now, digest),
        )
        return conn.changes() > 0

    def message_ids(self, conn: PgConnection, n: int) -> list[int]:
        """``n`` ids from ``messages``' identity sequence, ascending, in one round trip.
        Within a session they follow commit order: the chunk holds the session's lock."""
        return self._ids(self._ask_ids(conn, n), n)

    def ask_bases(self, conn: PgConnection) -> None:
        """On an ``unwaited`` ledger, queue the read of the sequences' values before the
        chunk draws (``PgConnection.defer``), to go with the chunk's first statements:
        ``numbers`` needs them to draw inline."""
        if self._unwaited:
            self._bases = conn.defer(_BASES)

    def numbers(
        self, conn: PgConnection, n: int, batches: list[str], *, named: bool = True
    ) -> tuple[list[Any], dict[str, Any]]:
        """``message_ids`` and ``batch_refs`` (``Ledger.numbers``) in one round trip: both
        statements queued, in that order (``give_back`` counts on the ids' statement reading
        the sequences before the batch numbers are drawn).

        Inline, without a round trip of their own, when the caller needs no value
        (``named`` False: no usage row names an id), the run is the chunk's last on an
        ``unwaited`` ledger (``last_run``), its ``n`` rows go in one ``INSERT``
        (``INSERT_MAX_ROWS``) and ``ask_bases`` was answered: both draws are queued, and
        ``Drawn`` stands for each id and number, which ``insert_rows`` writes as the
        element the draws kept. The chunk's writes and ``COMMIT`` then carry them.

        Why ``give_back`` still holds: the draws are the run's first statements after its
        ``SAVEPOINT``, and neither can be refused for the data (a count; batch ids the
        chunk's first round trip already sent), so a refusal of the query they went in
        comes after they drew every value counted; one refused before it was sent (a value
        psycopg cannot send) drew none (``PgCursor.sent``). The values before them are read
        in the chunk's first round trip, after which another writer's draw makes the
        count differ, as on the waited path."""
        if named or not self._last or self._bases is None or not 0 < n <= INSERT_MAX_ROWS:
            return self._numbers(conn, n, batches)
        before = self._bases.fetchone()
        self._bases = None
        self._draws = conn.defer(_DRAW_IDS, (n,))
        self._drawn = {t: [v, 0] for t, v in zip(_SEQUENCES, before)}
        self._drawn["messages"][1] = n
        refs: dict[str, Any] = {}
        if batches:
            conn.defer(_DRAW_REFS, (batches,))
            self.drew("batches", len(batches))
            refs = {b: Drawn("quillrun.refs", k) for k, b in enumerate(batches, 1)}
        return [Drawn("quillrun.ids", i) for i in range(1, n + 1)], refs

    def _numbers(
        self, conn: PgConnection, n: int, batches: list[str]
    ) -> tuple[list[Any], dict[str, Any]]:
        asked_ids = self._ask_ids(conn, n)
        asked_refs = self._ask_refs(conn, batches)
        ids = self._ids(asked_ids, n)
        return ids, self._refs(asked_refs, batches)

    def _ask_ids(self, conn: PgConnection, n: int) -> Any:
        if n <= 0:
            return None
        return conn.defer(
            "SELECT nextval(pg_get_serial_sequence('messages', 'id')) AS id, "
            "(SELECT pg_sequence_last_value(pg_get_serial_sequence('usage', 'id')::regclass)), "
            "(SELECT pg_sequence_last_value(pg_get_serial_sequence('batches', 'id')::regclass)) "
            "FROM generate_series(1, ?) ORDER BY id",
            (n,),
        )

    def _ids(self, asked: Any, n: int) -> list[int]:
        if asked is None:
            return []
        rows = asked.fetchall()
        ids = [r[0] for r in rows]
        # The values before the run's draws (``give_back``; read once per statement): the run
        # draws usage and batch ids only after this statement. Had another writer drawn
        # between, ``give_back`` finds more values taken than counted and keeps the gap.
        self._drawn = {
            "messages": [ids[0] - 1, n],
            "usage": [rows[0][1], 0],
            "batches": [rows[0][2], 0],
        }
        return ids

    def batch_refs(self, conn: PgConnection, batches: list[str]) -> dict[str, int]:
        """``{batch id: number}`` (``store.apply.batches``) in one round trip: the new ids
        inserted in the order given (each gets the next identity value), the others read.
        The statement's snapshot does not see its own inserts, so each id comes from
        exactly one of the two arms."""
        asked = self._ask_refs(conn, batches)
        return self._refs(asked, batches)

    def _refs(self, asked: Any, batches: list[str]) -> dict[str, int]:
        if asked is None:
            return {}
        # every row offered takes a value, even one ON CONFLICT then drops
        self.drew("batches", len(batches))
        return dict(asked.fetchall())

    def _ask_refs(self, conn: PgConnection, batches: list[str]) -> Any:
        if not batches:
            return None
        return conn.defer(
            "WITH added AS (INSERT INTO batches (batch_id) "
            "SELECT b FROM unnest(?1::text[]) WITH ORDINALITY AS u(b, n) ORDER BY n "
            "ON CONFLICT (batch_id) DO NOTHING RETURNING batch_id, id) "
            "SELECT batch_id, id FROM added UNION ALL "
            "SELECT batch_id, id FROM batches WHERE batch_id = ANY(?1::text[])",
            (batches,),
        )

    def insert_rows(self, conn: PgConnection, rows: list[tuple]) -> None:
        """The run's message rows in one ``COPY … FROM STDIN`` (one statement, parsed and
        planned once, where an INSERT per row is parsed and planned per row). A value the
        server refuses fails the COPY (class 22/23: ``BadDataError``), and the run goes op
        at a time. Up to ``INSERT_MAX_ROWS`` rows (a turn or two of one agent) go in one
        multi-row ``INSERT`` instead, queued (``PgConnection.defer``) to go with the run's
        other writes and its ledger insert in one round trip: a COPY cannot share a query,
        and costs two more (the statements before it, then its own)."""
        if len(rows) > INSERT_MAX_ROWS:
            conn.copy_rows("messages", STATE_ID_COLUMNS, rows)
            return
        if rows:
            marks = []
            args: list[Any] = []
            for row in rows:
                cells = ["?"] * len(row)
                for i in _DRAWN_COLUMNS:  # the only values a run's draws may stand for
                    if isinstance(row[i], Drawn):
                        cells[i] = f"(current_setting('{row[i].setting}')::int8[])[?]"
                marks.append(f"({', '.join(cells)})")
                args += [v.index if isinstance(v, Drawn) else v for v in row]
            conn.defer(
                f"INSERT INTO messages ({', '.join(STATE_ID_COLUMNS)}) VALUES " + ", ".join(marks),
                args,
            )

    def record_applied_many(
        self, conn: PgConnection, rows: list[tuple[str, str, float, str]]
    ) -> bool:
        """One statement for the run's batches; False when any was taken meanwhile (another
        host carrying the same batch), so the caller rolls the run back.

        The chunk's last run (``last_run``, on an ``unwaited`` ledger) queues it instead,
        without ``ON CONFLICT``, to go with the cursor and the ``COMMIT`` in one round trip,
        and returns True: a batch taken meanwhile is then a unique violation, and it or any
        other refusal of the run's queued writes aborts the whole transaction at the
        ``COMMIT`` (nothing of the chunk is committed). ``unwaited_sent`` tells the caller
        to redo the chunk on a checked ledger, which quarantines or skips the op alone."""
        if not rows:
            return True
        batches, positions, times, digests = (list(c) for c in zip(*rows))
        sql = (
            "INSERT INTO applied_batches (batch_id, spool_id, position, applied_at, digest) "
            "SELECT b, ?, p, t, d FROM unnest(?::text[], ?::text[], ?::float8[], ?::text[]) "
            "AS u(b, p, t, d)"
        )
        args = (self.spool_id, batches, positions, times, digests)
        if self._last:
            conn.defer(sql, args)
            self.unwaited_sent = True
            return True
        conn.execute(sql + " ON CONFLICT DO NOTHING", args)
        return conn.changes() == len(rows)

    def record_rejected(
        self, conn: PgConnection, batch: str, position: str, reason: str, now: float
    ) -> None:
        conn.execute(
            "INSERT INTO rejected_batches (batch_id, spool_id, position, reason, rejected_at) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
            (batch, self.spool_id, position, reason, now),
        )


def refused_here(conn: PgConnection, spool_id: str, batches: dict[str, str]) -> set[str]:
    """The batches of ``batches`` (``{batch id: spool position}``) whose refusal at that
    position of spool ``spool_id`` is committed in the shared ledger (``rejected_batches``;
    a refusal by another host is not this spool's)."""
    rows = conn.execute(
        "SELECT batch_id, position FROM rejected_batches WHERE batch_id = ANY(?) AND spool_id = ?",
        (list(batches), spool_id),
    ).fetchall()
    return {batch for batch, position in rows if batches.get(batch) == position}

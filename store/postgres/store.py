"""``PgStore``: a shared PostgreSQL store behind the store contract, for one spool's writer.

What differs from the embedded SQLite store (``store.sqlite.store``), as capability flags:

* several hosts' writers share the store, so the cursor row is keyed by this data dir's spool
  id and the halt lives in the store (``store.postgres.halt``): every chunk meets it inside
  its transaction, so there is nothing to read before opening (``startup_halt`` is None);
* the server being down, a lost connection, a deadlock or a serialization failure are
  ``TransientError``: the writer drops the connection, backs off (0.5 s doubling to 5 s),
  reconnects and re-reads its cursor from the store, so a COMMIT whose answer was lost is
  seen as applied, never applied twice (``reconnect_on_error``);
* no FTS slices, guard or WAL checkpoints: PostgreSQL maintains its indexes in the
  transaction and its own storage. A halted writer keeps recording this host's job runs
  (bookkeeping, so a failed check shows in job history: ``jobs_while_halted``);
* a writer claims its spool id before it applies anything (``store.postgres.claims``): a
  copied data dir with the same id is refused (``SpoolClaimedError``) while the claim is
  live; chunks renew the claim in their transaction, an idle writer every ``RENEW_S``;
* a writer that died mid-job (``kill -9``) leaves its run ``running``; whoever next holds that
  spool id's claim closes it as ``interrupted`` at connect, as the SQLite writer does, and so
  does any writer for a run whose spool claim has expired or changed hands (a host gone for
  good): each run names its process and claim (``home.runner_tag``), so a live writer's run on
  another host is never closed (``close_dead_runs``);
* a writer that finds the order-key index missing or ``INVALID`` (a store migrated from an
  older layout, a restore) builds it concurrently in a thread (``store.postgres.order_index``)
  while it applies; one build at a time store-wide;
* idle upkeep is the spool's: segments the store has applied and older than
  ``spool.retention_s`` are collected (there is no local snapshot; the database is the
  server's to back up, so keep the retention longer than the backup interval).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from quill.home import Halt, runner_dead
from quill.store.capabilities import PostgresCapabilities
from quill.store.contract import HaltAction, NullLog
from quill.store.postgres import PostgresBackend, claims, halt, order_index, scan_index, schema
from quill.store.postgres.connection import PgConnection
from quill.store.postgres.session_settings import WRITER_SESSION
from quill.store.sqlite.job_runs import close_interrupted

#: How often an idle writer collects its spool (seconds); the first time a minute after start.
GC_INTERVAL_S = 3600.0
GC_FIRST_S = 60.0
#: The clock difference (s) allowed between a writer's host and the PostgreSQL server when a
#: run's start (the writer's clock) is compared with a claim's time (the server's).
CLOCK_SKEW_S = 300.0


class PgStore(PostgresCapabilities, PostgresBackend):
    """The store at ``url`` for the writer of spool ``spool_id``; unopened until ``connect``
    (which creates or migrates the schema). ``spool_dir``/``retention_s``: the spool this
    writer collects when idle (None: no collection)."""

    jobs_while_halted = True
    reconnect_on_error = True
    retry_first_s: float | None = 0.5
    halt_poll_s = 2.0
    recover_hint = "quill recover (after REINDEX or a restore)"
    OPTIONS = ("log", "spool_dir", "retention_s", "application_name", "holder", "client")

    def __init__(
        self,
        url: str,
        spool_id: str,
        *,
        log: Any = None,
        spool_dir: Path | None = None,
        retention_s: float | None = None,
        application_name: str | None = None,
        holder: dict[str, Any] | None = None,
        client: dict[str, Any] | None = None,
    ):
        # The base class connects at construction; this store connects in ``connect``.
        self.url = url
        self.client = dict(client or {})  # libpq bounds (Settings.pg_client_params)
        self.spool_id = spool_id
        self.log = log if log is not None else NullLog()
        self.spool_dir = spool_dir
        self.retention_s = retention_s
        self.application_name = application_name or f"quill-writer:{spool_id}"
        self.conn: PgConnection | None = None
        self._next_gc = time.monotonic() + GC_FIRST_S
        # The writer's claim on its spool id (store.postgres.claims); None: no claim taken.
        self.holder = holder
        self.holder_token = holder["token"] if holder else None
        self._next_renew = 0.0
        self._index_builder: order_index.Builder | None = None

    @property
    def connected(self) -> bool:
        return self.conn is not None

    def connect(self) -> dict[str, Any]:
        """Connect, create or migrate the schema and, for a writer (``holder``), claim this
        spool id before anything is applied (``claims.claim``), then close the job runs dead
        writers left running (``close_dead_runs``). Figures: ``spool_id``, the claim's
        ``claim`` outcome (``taken_over`` is logged with the previous holder) and
        ``interrupted_runs``.
        Raises ``TransientError`` when the server cannot be reached and ``SpoolClaimedError``
        while another holder's claim is live (the connection is then closed)."""
        self.conn = PgConnection(
            self.url,
            application_name=self.application_name,
            settings=WRITER_SESSION,
            **self.client,
        )
        try:
            schema.create(self.conn)
            figures: dict[str, Any] = {"spool_id": self.spool_id}
            if self.holder is not None:
                got = claims.claim(self.conn, self.spool_id, self.holder)
                self._next_renew = time.monotonic() + claims.RENEW_S
                figures["claim"] = got["outcome"]
                if got["previous"] is not None:
                    self.log.warning(
                        "writer.spool_claim_taken_over",
                        spool_id=self.spool_id,
                        previous=got["previous"],
                        why="the previous holder's claim expired; the cursor is checked "
                        "against this spool before anything is applied",
                    )
                figures["interrupted_runs"] = self.close_dead_runs()["interrupted"]
                self._build_order_index()
        except BaseException:
            self.disconnect()
            raise
        return figures

    def close_dead_runs(self) -> dict[str, Any]:
        """Mark ``interrupted`` the writer job runs left ``running`` by a writer that is gone
        (``job_runs.close_interrupted``): one of this spool id (this writer holds its claim,
        so any other writer of it is gone), one whose process this host proves gone, or one
        whose spool claim has expired or passed to another holder since it started. Runs of
        live writers, here or on other hosts, are left alone. A row from before runs named
        their writer (no ``holder``) is closed when every live claim was taken more than
        ``CLOCK_SKEW_S`` after it started: none of the writers alive now was running then,
        and a writer runs jobs only while it holds its claim (``claimed_at`` stays while the
        same holder renews). Returns its figures. Raises the store error tree."""
        live = {c["spool_id"]: c for c in claims.claims(self.conn) if c["expires_in_s"] > 0}

        def judge(holder: dict[str, Any]) -> bool | None:
            spool_id = holder.get("spool_id")
            if spool_id == self.spool_id:
                return True
            here = runner_dead(holder)  # this host's process: its pid is the evidence
            if here is not None or spool_id is None:
                return here
            claim = live.get(spool_id)
            return claim is None or claim["holder"] != holder.get("claim")

        def nobody_then(started_at: float) -> bool:
            # claimed_at is the server's clock, started_at the writer's: a margin for skew.
            return all(c["claimed_at"] > started_at + CLOCK_SKEW_S for c in live.values())

        return self.run_job(
            close_interrupted, "writer", float("inf"), judge=judge, untagged=nobody_then
        )

    def _build_order_index(self) -> None:
        """Start the thread that builds the order-key and substring indexes concurrently
        (``order_index.Builder``) when the store lacks a valid one and no such thread of this
        store runs; the writer goes on applying meanwhile."""
        if self._index_builder is not None and self._index_builder.alive:
            return
        missing = tuple(
            i
            for i in (order_index.ACK, scan_index.SCAN)
            if order_index.state(self.conn, i) != "valid"
        )
        if missing:
            self.log.info(
                "store.order_index_building",
                indexes=[i.name for i in missing],
                why="built concurrently: writers go on; "
                + "; ".join(i.without for i in missing)
                + " until it is done",
            )
            self._index_builder = order_index.Builder(
                self.url, self.log, self.client, indexes=missing
            ).start()

    def disconnect(self) -> None:
        if self.conn is not None:
            super().close()
            self.conn = None

    def close(self) -> None:
        """Disconnect, and stop a build of the order-key index in progress (it is left
        ``INVALID``; the next writer to connect builds it again)."""
        if self._index_builder is not None:
            self._index_builder.stop()
            self._index_builder = None
        self.disconnect()

    def _ensure(self) -> PgConnection:
        if self.conn is None:
            self.connect()
        return self.conn

    # -- the drain -------------------------------------------------------------------------

    def check(self) -> None:
        """Before each unit of work (a chunk, a store job, idle upkeep): renew the claim on
        this spool id when ``RENEW_S`` has passed (chunks also renew it in their own
        transaction), so a writer whose claim another holder took runs nothing more, not even
        a queued store job. Raises ``SpoolClaimedError`` then. The halt is read inside each
        chunk's transaction."""
        now = time.monotonic()
        if self.holder_token is not None and self.conn is not None and now >= self._next_renew:
            claims.renew(self.conn, self.spool_id, self.holder_token)
            self._next_renew = now + claims.RENEW_S

    def committed(self) -> None:
        """Nothing: there is no file guard."""

    def index_step(self, max_rows: int) -> tuple[int, dict[str, Any] | None]:
        return 0, None

    def idle_work(self, now: float, cursor: Any, was_busy: bool) -> dict[str, Any]:
        if self.spool_dir is not None and now >= self._next_gc:
            self._next_gc = now + GC_INTERVAL_S
            gone = self.collect_spool(cursor)
            if gone["deleted"]:
                self.log.info("writer.spool_gc", **gone)
        return {}

    def collect_spool(self, cursor: Any, now: float | None = None) -> dict[str, Any]:
        """Delete spool segments this store has applied (``cursor``, a ``spool.Position``,
        is past their last byte) that are older than the retention (``now``: epoch s,
        default the clock). The newest segment is never deleted. Returns ``{"deleted":
        [segment numbers], "bytes_freed"}``."""
        from quill.spool import retention

        return retention.collect(self.spool_dir, cursor, cursor, self.retention_s, now)

    def status_fields(self) -> dict[str, Any]:
        return {"backend": "postgres", "spool_id": self.spool_id, "fts_indexed_upto": 0}

    def describe(self, exc: Exception) -> str:
        return f"{type(exc).__name__}: {exc}"

    def run_job(self, func: Any, *args: Any, **kwargs: Any) -> Any:
        return func(self._ensure(), *args, **kwargs)

    # -- the store-wide halt ---------------------------------------------------------------

    def startup_halt(self) -> Halt | None:
        return None

    def halt(self, cause: Halt) -> bool:
        """Make ``cause`` the store's halt unless one is set (corruption the server reported
        while this writer applied a chunk becomes the store's halt, so every host stops and
        ``quill recover`` decides). Raises the store error tree (the writer retries)."""
        conn = self._ensure()
        if halt.read(conn) is None:
            halt.declare(conn, cause.cause, cause.detail, cause.at)
        return True

    def serve_halted(self) -> HaltAction:
        """``resume`` once the store's halt was lifted (``quill recover`` after REINDEX or a
        restore, on any host), else ``halted``. Raises the store error tree."""
        return "resume" if halt.read(self._ensure()) is None else "halted"

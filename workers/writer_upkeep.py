"""The writer's upkeep between ops: search-index slices, queued store jobs, the idle work of
the store, torn tails, and the status it publishes (``run/writer.json``). Mixed into
``workers.writer.Writer``, whose module doc gives the loop; kept apart so that the loop reads
in one screen.

The next op comes first. A client waiting for its write (read-your-writes) is rung as soon as
its chunk commits, and its next op often arrives a millisecond later; upkeep done in between
delays that op by its own cost (a status file replaced by rename costs milliseconds on ext4:
the rename makes the kernel allocate and write the new file's blocks; an index slice and a
look at the job queue cost fractions of one). So after a commit:

* a *full* chunk (``chunk_rows`` rows or more: a backlog is being drained) is followed by
  the busy upkeep at once, as before: one index slice, one store job that does not need an
  idle spool;
* a partial chunk (the writer has caught up) defers it. The writer first *lingers*: it waits
  up to ``LINGER_S`` for the doorbell, and a ring is drained before any upkeep. Only a
  quiet ``LINGER_S`` (or ``until_idle``, which never lingers) lets the idle upkeep run.
  While ops keep coming, the busy upkeep still runs once ``UPKEEP_DUE_S`` after the first
  deferred commit, so indexing and jobs are never starved.

The status (``run/writer.json``) says what readers act on as soon as it changes: the first
commit after an idle status publishes "busy" at once (after the waiters are rung), as do a
job's start, a retryable error, and the idle upkeep once the cursor moved; so an ``idle``
status is true when published (written only after a drain found the spool's end, nothing
left to index and no job to run) and is replaced by the first commit after it, as before.
What did not change (more commits while busy, an idle writer that keeps turning) is
published at most every ``PUBLISH_S``: its cursor and counters are at most that stale while
the writer turns. The supervisor's idle check wants an idle status under a second old (the
idle writer republishes every ``PUBLISH_S``), its hung check one under ``[writer]
hung_after_s``; a cursor read from the status is a lower bound of what is applied
(``ops.status.guard``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from quill.home import RunDir, Settings, Throttle, WriterStatus, doorbell
from quill.store.contract import Store
from quill.workers import status
from quill.workers.drain import Drain
from quill.workers.job_runner import StoreJobRunner

#: While nothing a reader acts on changes, the status is published at most this often (s).
PUBLISH_S = 0.25
#: After a partial chunk the running writer waits this long (s) for the next op before its
#: upkeep (``Writer.loop_once(linger=True)``).
LINGER_S = 0.02
#: Upkeep deferred by a stream of partial chunks runs at the latest this long (s) after the
#: first of them.
UPKEEP_DUE_S = 0.25


class Upkeep:
    """The upkeep half of ``Writer`` (which provides ``cfg``, ``log``, ``store``, ``run_dir``,
    ``jobs``, ``drain``, ``cursor``, ``totals`` and ``commit_hist``)."""

    cfg: Settings
    log: Any
    store: Store
    run_dir: RunDir
    jobs: StoreJobRunner | None
    drain: Drain
    commit_hist: dict[str, Any]
    _ring_warn: Throttle
    cursor: Any  # ``Writer.cursor``: the drain's committed ``spool.Position``
    totals: Any  # ``Writer.totals`` (read-only): the drain's counts, ``{name: int}``
    _job_runner: Callable[[], StoreJobRunner]  # ``Writer._job_runner``: made at the start

    def _init_upkeep(self) -> None:
        self._was_busy = False  # committed since the last idle upkeep
        self._linger_until: float | None = None  # the linger's end (``now`` clock), if one began
        #: Seconds the last step asks to wait for a ring before the upkeep (0: it did not
        #: linger).
        self.lingering = 0.0
        self._upkeep_due: float | None = None  # when deferred upkeep must run (``now`` clock)
        self._idle_fields: dict[str, Any] = {}
        #: What the last status said that readers act on (``_publish``); None: nothing yet,
        #: or a halt or refusal was published since (``writer_halt``).
        self._published: tuple[Any, ...] | None = None
        self._published_at = float("-inf")

    # -- after each step -----------------------------------------------------------------

    def _committed(self, now: float, *, full: bool) -> None:
        """A chunk was committed (its waiters rung). ``full``: it held ``chunk_rows`` rows
        or more, so more are probably waiting. Publishes "busy" (at once after an idle
        status), then runs the busy upkeep now when ``full`` or when deferred upkeep is due,
        else defers it (module doc)."""
        self._was_busy = True
        self._linger_until = None
        self._publish(now, idle=False)
        if self._upkeep_due is None:
            self._upkeep_due = now + UPKEEP_DUE_S
        if not full and now < self._upkeep_due:
            return
        self._upkeep_due = None
        self._index()
        if self._job_runner().run_one(self.store, idle=False, on_start=self._job_started):
            self._wake_waiters()

    def _caught_up(self, now: float, *, linger: float) -> bool:
        """The drain found the spool's end. After a commit, until ``linger`` seconds have
        passed since the first such step, it only sets ``lingering`` to the seconds left
        (the caller waits that long for the doorbell; a ring for an op that was drained
        already wakes it early and it lingers on). Then the idle upkeep: an index slice, one
        store job (idle ones too), the store's idle work, torn tails, the status. True when
        it found work."""
        self.lingering = 0.0
        if linger > 0 and self._was_busy:
            if self._linger_until is None:
                self._linger_until = now + linger
            if now < self._linger_until:
                self.lingering = self._linger_until - now
                return False
        # ``_linger_until`` stays set (passed) until the next commit: the steps after this
        # one (more index slices, jobs) do not linger again.
        self._upkeep_due = None
        if self._index() >= self.cfg.index_slice_rows:
            # More to index than one slice: as between chunks, one job that needs no idle
            # spool. A smaller slice took every row above the watermark: search is caught up.
            if self._job_runner().run_one(self.store, idle=False, on_start=self._job_started):
                self._wake_waiters()
            return True
        if self._job_runner().run_one(self.store, idle=True, on_start=self._job_started):
            self._wake_waiters()  # its run is recorded: `quill jobs run --wait` reads it now
            return True
        self._idle_fields = self.store.idle_work(now, self.cursor, self._was_busy)
        self._was_busy = False
        sealed = self.drain.seal_torn_tails()
        self._publish(now, idle=not sealed)
        return sealed

    # -- pieces ----------------------------------------------------------------------------

    def _ring_applied(self, step: Any) -> None:
        """A chunk (``step``: ``workers.drain.Step``) was committed: ring the waiting clients
        with the ``[position, batch id]`` of each op it applied (``doorbell.applied_note``).
        A batch named in ``result.batches`` was applied by this commit; one that occurs twice
        in the chunk (its second entry a duplicate or refused) is left out, so every pair
        named is exactly an applied op, never a duplicate or a quarantined one.

        A store file (``local_file``) is first checked by its guard, with the commit as its
        baseline: a ``state.db`` (or its WAL) removed or replaced while the chunk ran took
        the commit into a file no reader sees, so ``ReplacedError`` (the writer's halt) is
        raised here and nobody is rung: a waiter's look at the store is then the answer.
        PostgreSQL fences a writer inside the chunk's transaction (its claim): no check."""
        if self.store.local_file:
            self.store.committed()
            self.store.check()
        applied = set(step.result.batches)
        seen: dict[str, int] = {}
        pairs = []
        for entry in step.entries:
            batch = entry.record.get("batch") if entry.record else None
            if isinstance(batch, str):
                seen[batch] = seen.get(batch, 0) + 1
                pairs.append((str(entry.position), batch))
        pairs = [(p, b) for p, b in pairs if b in applied and seen[b] == 1]
        self._wake_waiters(doorbell.applied_note(pairs))

    def _wake_waiters(self, note: bytes = doorbell.RING) -> None:
        """The cursor moved or a job's run was recorded (committed): ring the clients waiting
        for either (``note``: ``doorbell.ring_all``'s). A failure is logged (throttled), never
        fatal: a waiter that is not woken still looks every poll."""
        try:
            doorbell.ring_all(self.cfg.waiters_dir, note)
        except OSError as exc:
            suppressed = self._ring_warn.ready("ring")
            if suppressed is not None:
                self.log.warning("writer.ring_failed", error=str(exc), suppressed=suppressed)

    def _index(self) -> int:
        """One search-index slice; damage confined to the indexes detaches them (the store
        decides) and queues their rebuild, while writes go on."""
        rows, detached = self.store.index_step(self.cfg.index_slice_rows)
        if detached:
            self._job_runner().enqueue("fts_rebuild")  # held while the queue is unreachable
            self.log.error(
                "writer.fts_detached", damaged=detached["damaged"], error=detached["error"]
            )
        return rows

    def _job_started(self, name: str) -> None:
        self._publish(time.monotonic(), idle=False, job=name, at_once=True)

    def _publish(
        self,
        now: float,
        *,
        idle: bool,
        error: str | None = None,
        job: str | None = None,
        at_once: bool = False,
    ) -> None:
        """Publish the writer's status (``now``: the loop's monotonic clock): at once when
        ``at_once``, when ``idle``/``error``/``job`` differ from the last published, or when
        an idle status would carry another cursor; else at most every ``PUBLISH_S``."""
        state = (idle, error, job, str(self.cursor) if idle else None)
        if not at_once and state == self._published and now - self._published_at < PUBLISH_S:
            return
        # An immediate one does not start the interval: the next change-free one is not held.
        self._published, self._published_at = state, (float("-inf") if at_once else now)
        fields = self.store.status_fields() if self.store.connected else {}
        if self.jobs is not None:
            fields = {**fields, **self.jobs.queue_fields()}
        published = WriterStatus(
            idle=idle,
            cursor=str(self.cursor),
            job=job,
            error=error,
            commit_hist=self.commit_hist,
            backend=self.store.kind,
            spool_id=self.store.spool_id,
        )
        # The store's fields and the drain's totals name WriterStatus fields (ValueError if not).
        published = published._replace(**{**self._idle_fields, **fields, **self.totals})
        self.run_dir.publish("writer", published.to_json())

    def observe_commit(self, seconds: float) -> None:
        """Add one chunk's read+apply+commit time (s) to the published histogram."""
        status.observe(self.commit_hist, seconds)

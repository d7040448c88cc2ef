"""The supervisor: starts the fleet, restarts what dies, stops it all cleanly.

* Children are real processes (``python -m ENTRY ROLE --home H``): writer, scheduler,
  consumer, plus ``watch`` (live capture of agent folders, ``workers/watch.py``) when
  ``[watch] enabled`` and the run is not ``until_idle`` (a drain-and-exit run captures
  nothing new), plus ``http`` when ``[http] listen`` is set. The entry modules are handed in by
  ``quill run``: they are composition roots in ``ops``, a layer above this one.
  One fleet per data dir (``run/fleet.lock``).
* A child that exits is restarted after a backoff (0.5 s doubling to 10 s). Five exits within
  60 s is a crash loop: it is logged, printed on the console and shown by ``quill status``
  (every crash-looping role, with restart counts and last exit codes), and restarts slow to
  one a minute (the others keep running: producers never depend on the fleet). The writer
  is the exception: nothing is applied while it is down, so its delay never exceeds
  ``WRITER_MAX_DELAY_S``, crash loop or not. With ``until_idle`` a crash loop ends the run
  with ``EXIT_CRASH_LOOP``, since idle cannot come.
* A child orphaned by a supervisor that died (``kill -9``) may still do its role, holding
  its lease or port while it finishes its chunk: the role's new child waits until it is
  gone (``workers.orphans``: proved this data dir's, asked to stop, killed after 15 s). An
  exit for a lease such an orphan holds is waiting, not a crash; status shows the orphan.
* A job-worker whose running job outlives its catalog ``timeout`` is killed and restarted.
* A writer whose status heartbeat is older than ``writer.hung_after_s`` (default 120 s;
  ``JOB_HUNG_AFTER_S`` while it reports a running store job) is taken for hung: SIGKILL, then
  restarted. Nothing is lost: uncommitted work is replayed from the spool.
* SIGTERM/SIGINT: forward SIGTERM to every child, wait up to ``STOP_TIMEOUT_S``, SIGKILL
  what is left. The writer finishes its chunk first, so nothing committed is lost and
  nothing uncommitted was acknowledged as applied.
* ``until_idle`` without ``timeout``: a writer that keeps failing to apply (its status
  carries the error: a store it cannot open, a database that does not exist) for
  ``writer_give_up_s`` ends the run with ``EXIT_CANNOT_APPLY`` (``cannot_apply`` says why).
* ``until_idle``: exit 0 once the spool is drained, the FTS index caught up, due scheduled
  jobs fired and both queues empty (observed twice in a row, 0.3 s apart). The queue is
  optional to the drain: when it is unreachable (Redis down) the run ends the same way once
  the spool is drained and the index caught up, with ``EXIT_QUEUE_UNAVAILABLE`` — queued
  and due jobs wait for the queue, and the console says so.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from quill.home import RunDir, Settings, WriterStatus
from quill.jobs.errors import QueueUnavailableError
from quill.jobs.queues import build_for
from quill.store.lease import Lease
from quill.workers.child import CRASH_LOOP, Child
from quill.workers.lifeline import EXIT_LEASE_HELD
from quill.workers.orphans import OrphanStopper
from quill.workers.writer_reports import WriterReports

ROLES = ("writer", "scheduler", "consumer")
STOP_TIMEOUT_S = 15.0
EXIT_OK, EXIT_TIMEOUT, EXIT_HALTED, EXIT_CRASH_LOOP = 0, 4, 5, 6
EXIT_QUEUE_UNAVAILABLE = 8  # until idle: the spool was drained, the job queue unreachable
EXIT_CANNOT_APPLY = 1  # until idle, no timeout: the writer kept failing ``writer_give_up_s``
JOB_HUNG_AFTER_S = 3600.0


class Supervisor:
    """Runs the fleet for one data dir in the foreground. ``run()`` returns an exit code."""

    def __init__(
        self,
        cfg: Settings,
        log: Any,
        *,
        worker_entry: str,
        http_entry: str,
        until_idle: bool = False,
        timeout: float | None = None,
        console: Any = None,
    ):
        """``worker_entry``: the module each worker role runs as (``python -m worker_entry ROLE
        --home H --parent PID``); ``http_entry``: the module of the ``http`` child (same options,
        no role). ``console(text)``, when given, is told of every worker exit and restart (the
        ``quill run`` terminal), in addition to the log."""
        self.cfg = cfg
        self.log = log
        self.console = console or (lambda text: None)
        self.writer_reports = WriterReports(self.console, log)
        self.run_dir = RunDir(cfg.home, log)  # a full disk is reported, never fatal
        self.until_idle = until_idle
        self.timeout = timeout
        #: The writer's error when an until-idle run without ``timeout`` gave up on it
        #: (``EXIT_CANNOT_APPLY``); None otherwise.
        self.cannot_apply: str | None = None
        self.entries = {"http": http_entry, "worker": worker_entry}
        self.orphans = OrphanStopper(log, self.console)
        tail = ["--home", str(cfg.home), "--parent", str(os.getpid())]
        roles = [*ROLES, "watch"] if cfg.watch_enabled and not until_idle else ROLES
        self.children = [Child(r, [sys.executable, "-m", worker_entry, r, *tail]) for r in roles]
        if cfg.http_listen:  # [http] listen set: the API and dashboard run as one more child
            self.children.append(Child("http", [sys.executable, "-m", http_entry, *tail]))
        self._stop_signal: int | None = None
        self._queue_down: QueueUnavailableError | None = None  # until idle: the queue failed
        self._queues: Any = None  # until idle: the queues, once opened

    @property
    def crash_loops(self) -> list[dict[str, Any]]:
        """Every role in a crash loop now: role, last exit code, log file."""
        return [
            {
                "role": c.role,
                "last_code": c.last_exit_code,
                "restarts": c.restarts,
                "logs": str(self.cfg.logs_dir / f"{c.role}.log"),
            }
            for c in self.children
            if c.crash_loop
        ]

    def run(self) -> int:
        lease = Lease(self.run_dir.lock("fleet")).acquire()
        if lease.unrecorded:
            self.log.warning(
                "supervisor.lease_unrecorded", file=str(lease.path), error=lease.unrecorded
            )
        previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        self._publish()
        code = EXIT_OK
        try:
            code = self._supervise()
        finally:
            self._stop_children()
            for s, handler in previous.items():
                signal.signal(s, handler)
            self._publish(state="stopped", exit_code=code)
            lease.release()
        self.log.info("supervisor.stopped", code=code)
        return code

    def _on_signal(self, signum: int, frame: Any) -> None:
        self._stop_signal = signum

    def _supervise(self) -> int:
        started = time.monotonic()
        for child in self.children:
            if not self._orphan_waits(child):
                self._start(child)
        idle_streak = 0
        queues = (lambda: build_for(self.cfg)) if self.until_idle else None
        while self._stop_signal is None:
            for child in self.children:
                code = self._check(child)
                if code is not None:
                    return code
            self._check_hung_writer()
            self._check_job_timeout()
            writer = WriterStatus.from_json(self._live_status("writer"))
            self.writer_reports.update(writer)
            if queues is not None:
                if writer.halted:
                    self.log.error(
                        "supervisor.writer_halted", **(writer.halt.to_json() if writer.halt else {})
                    )
                    return EXIT_HALTED
                idle_streak = idle_streak + 1 if self._fleet_idle(queues, writer) else 0
                if idle_streak >= 2:
                    self.log.info("supervisor.idle", seconds=round(time.monotonic() - started, 2))
                    return self._idle_code()
                if self.timeout is not None and time.monotonic() - started > self.timeout:
                    self.log.error("supervisor.idle_timeout", timeout=self.timeout)
                    return EXIT_TIMEOUT
                if (
                    self.timeout is None
                    and writer.error
                    and self.writer_reports.failing_s() > self.cfg.writer_give_up_s
                ):  # idle cannot come: without a timeout the run would wait for ever
                    self.cannot_apply = writer.error
                    self.log.error(
                        "supervisor.writer_cannot_apply",
                        error=writer.error,
                        give_up_s=self.cfg.writer_give_up_s,
                    )
                    return EXIT_CANNOT_APPLY
            time.sleep(0.3 if queues is not None else 0.5)
        self.log.info("supervisor.signal", signal=signal.Signals(self._stop_signal).name)
        return EXIT_OK

    def _fleet_idle(self, queues: Callable[[], Any], writer: WriterStatus) -> bool:
        # Only what the current children published counts: a file left by a previous run
        # (or by a child just replaced) says nothing about now.
        sched = self._live_status("scheduler")
        consumer = self._live_status("consumer")
        fresh = time.time() - (writer.updated_at or 0) < 1.0
        try:
            if self._queues is None:  # opened here: an unopenable queue.db is an outage too
                self._queues = queues()
            pending = self._queues.pending()
            self._queue_down = None
        except QueueUnavailableError as exc:  # jobs wait for it; the drain does not
            pending = None
            self._queue_down = self._queue_down or exc
        return bool(
            writer.idle
            and fresh
            # a scheduler waiting out a damaged schedule.db fires nothing: nothing to wait for
            and (
                sched.get("ready")
                or sched.get("schedule_damaged")
                or (pending is None and sched.get("waiting_for_queue"))
            )
            and consumer.get("in_flight") == 0
            and (pending is None or pending["store"] == pending["worker"] == 0)
        )

    def _idle_code(self) -> int:
        """The exit code of an until-idle run that reached idle: ``EXIT_OK``, or
        ``EXIT_QUEUE_UNAVAILABLE`` (said on the console and in the log) when the queue could
        not be read: the spool is drained, jobs wait."""
        down = self._queue_down
        if down is None:
            return EXIT_OK
        self.log.error("supervisor.idle_queue_unavailable", error=str(down), since=down.since)
        self.console(
            f"quill: the spool is drained, but {down}: queued and due jobs were not run "
            "(they wait for the queue; `quill status` shows it)"
        )
        return EXIT_QUEUE_UNAVAILABLE

    def _live_status(self, role: str) -> dict[str, Any]:
        child = next(c for c in self.children if c.role == role)
        if child.proc is None:
            return {}
        return self.run_dir.live(role, pid=child.proc.pid) or {}

    def _start(self, child: Child) -> None:
        if child.last_exit_at is not None:
            self.console(f"quill: restarting the {child.role} (restart {child.restarts})")
        child.proc = subprocess.Popen(
            child.argv,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "QUILL_HOME": str(self.cfg.home)},
        )
        self.log.info("supervisor.child_started", child=child.role, child_pid=child.proc.pid)
        if child.restarts:
            self._publish()

    def _check(self, child: Child) -> int | None:
        """Restart ``child`` if it exited; returns an exit code when the fleet must stop."""
        now = time.monotonic()
        if child.proc is None:
            if now >= child.restart_at and not self._orphan_waits(child):
                self._start(child)
            return None
        code = child.proc.poll()
        if code is None:
            if now - child.restart_at > 30.0:
                child.backoff = 0.5  # it has stayed up: forget the old backoff
                if child.crash_loop:
                    self.log.info("supervisor.crash_loop_over", child=child.role)
                    self.console(f"quill: the {child.role} has stayed up for 30 s: crash loop over")
                    child.crash_loop = False
                    self._publish()
            return None
        if code == EXIT_LEASE_HELD and self._orphan_waits(child):
            # Not a crash: an orphan of the fleet that died holds the role's lease. The child
            # starts once it is gone (``_orphan_waits``), so this exit is not counted.
            self.log.warning("supervisor.child_waits_for_orphan", child=child.role, code=code)
            child.proc = None
            child.restart_at = now
            return None
        child.exits.append(now)
        child.restarts += 1
        child.last_exit_code, child.last_exit_at = code, time.time()
        self.log.warning(
            "supervisor.child_exited", child=child.role, code=code, child_pid=child.proc.pid
        )
        self.console(f"quill: the {child.role} (pid {child.proc.pid}) exited with code {code}")
        child.proc = None
        if len(child.exits) == CRASH_LOOP[0] and now - child.exits[0] < CRASH_LOOP[1]:
            if not child.crash_loop:
                self.log.critical(
                    "supervisor.crash_loop",
                    child=child.role,
                    exits=len(child.exits),
                    window_s=CRASH_LOOP[1],
                    last_code=code,
                )
                self.console(
                    f"quill: the {child.role} is crash-looping ({len(child.exits)} exits in "
                    f"{CRASH_LOOP[1]:g} s, last code {code}); "
                    f"see {self.cfg.logs_dir / (child.role + '.log')}"
                )
            child.crash_loop = True
            if self.until_idle:
                self._publish()
                return EXIT_CRASH_LOOP
        delay = min(child.backoff, child.max_delay(False))
        if child.crash_loop:
            delay = child.max_delay(True)
        child.restart_at = now + delay
        child.backoff = min(child.backoff * 2, child.max_delay(False))
        self.log.info(
            "supervisor.restart_scheduled",
            child=child.role,
            restart_in_s=delay,
            crash_loop=child.crash_loop,
        )
        self._publish()
        return None

    def _orphan_waits(self, child: Child) -> bool:
        """True while an orphan of a fleet of this data dir that died still does ``child``'s
        role (``workers.orphans``: proved by its records, command line and dead parent); it
        is asked to stop, then killed after ``ORPHAN_GRACE_S``. A change is published
        (``orphans`` in the supervisor's status)."""
        waits, changed = self.orphans.look(self.run_dir, child.role, self.entries)
        if changed:
            self._publish()
        return waits

    def _check_hung_writer(self) -> None:
        writer = next(c for c in self.children if c.role == "writer")
        if writer.proc is None or writer.proc.poll() is not None:
            return
        published = self._live_status("writer")
        st = WriterStatus.from_json(published)
        if not published or st.halted:
            return  # not yet started up (it publishes once running), or halted on purpose
        limit = JOB_HUNG_AFTER_S if st.job else self.cfg.writer_hung_after_s
        age = time.time() - (st.updated_at if st.updated_at is not None else time.time())
        if age > limit:
            self.log.error(
                "supervisor.writer_hung",
                child_pid=writer.proc.pid,
                silent_s=round(age, 1),
                job=st.job,
            )
            writer.proc.kill()

    def _check_job_timeout(self) -> None:
        """Kill (and so restart) a consumer whose running job outlived its catalog timeout:
        one hung snapshot or check must not block every later job. Jobs are idempotent."""
        consumer = next(c for c in self.children if c.role == "consumer")
        if consumer.proc is None or consumer.proc.poll() is not None:
            return
        st = self._live_status("consumer")
        if not st.get("in_flight") or not st.get("timeout"):
            return
        if time.time() - st.get("started_at", time.time()) > st["timeout"]:
            self.log.error(
                "supervisor.job_timeout",
                job=st.get("last"),
                timeout_s=st["timeout"],
                child_pid=consumer.proc.pid,
            )
            consumer.proc.kill()

    def _publish(self, state: str = "running", **extra: Any) -> None:
        loops = self.crash_loops
        self.run_dir.publish(  # a full disk is reported (throttled), never fatal
            "supervisor",
            {
                "state": state,
                "until_idle": self.until_idle,
                "crash_loops": loops,
                "crash_loop": loops[0] if loops else None,
                "restarts": {c.role: c.restarts for c in self.children},
                "children": {c.role: c.summary() for c in self.children},
                # role → the orphan of a dead fleet being stopped (``workers.orphans``).
                "orphans": {r: dict(o) for r, o in self.orphans.seen.items()},
                **extra,
            },
        )

    def _stop_children(self) -> None:
        live = [(c, c.proc) for c in self.children if c.proc is not None and c.proc.poll() is None]
        for _, proc in live:
            proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for child, proc in live:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.log.error("supervisor.kill", child=child.role, child_pid=proc.pid)
                proc.kill()
                proc.wait()

"""The supervisor: starts the fleet, restarts what dies, stops it all cleanly.

* Children are real processes (``python -m workers ROLE --home H``): writer, scheduler,
  consumer, plus ``http`` (``python -m quill.ops.service``) when ``[http] listen`` is set.
  One fleet per data dir (``run/fleet.lock``).
* A child that exits is restarted after a backoff (0.5 s doubling to 10 s). Five exits within
  60 s is a crash loop: it is logged and shown by ``quill status``, and restarts slow to one a
  minute (the others keep running: producers never depend on the fleet). With
  ``until_idle`` a crash loop ends the run with ``EXIT_CRASH_LOOP``, since idle cannot come.
* A job-worker whose running job outlives its catalog ``timeout`` is killed and restarted.
* A writer whose status heartbeat is older than ``writer.hung_after_s`` (default 120 s;
  ``JOB_HUNG_AFTER_S`` while it reports a running store job) is taken for hung: SIGKILL, then restarted. Nothing is
  lost: uncommitted work is replayed from the spool.
* SIGTERM/SIGINT: forward SIGTERM to every child, wait up to ``STOP_TIMEOUT_S``, SIGKILL
  what is left. The writer finishes its chunk first, so nothing committed is lost and
  nothing uncommitted was acknowledged as applied.
* ``until_idle``: exit 0 once the spool is drained, the FTS index caught up, due scheduled
  jobs fired and both queues empty (observed twice in a row, 0.3 s apart).
"""
from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from quill.jobs.queues import build as build_queues
from quill.ops.config import Config
from quill.store.lease import Lease

from . import status

ROLES = ("writer", "scheduler", "consumer")
STOP_TIMEOUT_S = 15.0
CRASH_LOOP = (5, 60.0)  # exits, within seconds
EXIT_OK, EXIT_TIMEOUT, EXIT_HALTED, EXIT_CRASH_LOOP = 0, 4, 5, 6
JOB_HUNG_AFTER_S = 3600.0
CRASH_LOOP_BACKOFF_S = 60.0


@dataclass
class Child:
    """A supervised child process and its restart history."""

    role: str
    argv: list[str]
    proc: subprocess.Popen | None = None
    exits: collections.deque = field(default_factory=lambda: collections.deque(maxlen=CRASH_LOOP[0]))
    restart_at: float = 0.0
    backoff: float = 0.5
    restarts: int = 0              # exits since the fleet started (published for status/metrics)


class Supervisor:
    """Runs the fleet for one data dir in the foreground. ``run()`` returns an exit code."""

    def __init__(self, cfg: Config, log: Any, *, until_idle: bool = False, timeout: float | None = None):
        self.cfg = cfg
        self.log = log
        self.until_idle = until_idle
        self.timeout = timeout
        tail = ["--home", str(cfg.home), "--parent", str(os.getpid())]
        self.children = [Child(r, [sys.executable, "-m", "quill.workers", r, *tail]) for r in ROLES]
        if cfg.http_listen:  # [http] listen set: the API and dashboard run as one more child
            self.children.append(Child("http", [sys.executable, "-m", "quill.ops.service", *tail]))
        self._stop_signal: int | None = None
        self.crash_loop: dict | None = None

    def run(self) -> int:
        lease = Lease(self.cfg.run_dir / "fleet.lock").acquire()
        previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        self._publish()
        code = EXIT_OK
        try:
            code = self._supervise()
        finally:
            self._stop_children()
            for s, handler in previous.items():
                signal.signal(s, handler)
            try:
                status.publish(self.cfg.run_dir / "supervisor.json",
                               {"state": "stopped", "exit_code": code, "crash_loop": self.crash_loop})
            except OSError as exc:
                self.log.error("supervisor.status_unwritable", error=str(exc))
            lease.release()
        self.log.info("supervisor.stopped", code=code)
        return code

    def _on_signal(self, signum: int, frame: Any) -> None:
        self._stop_signal = signum

    def _supervise(self) -> int:
        started = time.monotonic()
        for child in self.children:
            self._start(child)
        idle_streak = 0
        queues = build_queues(self.cfg.queue_db) if self.until_idle else None
        while self._stop_signal is None:
            for child in self.children:
                code = self._check(child)
                if code is not None:
                    return code
            self._check_hung_writer()
            self._check_job_timeout()
            if queues is not None:
                writer = status.read(self.cfg.run_dir / "writer.json") or {}
                if writer.get("halted"):
                    self.log.error("supervisor.writer_halted", **writer.get("halt", {}))
                    return EXIT_HALTED
                idle_streak = idle_streak + 1 if self._fleet_idle(queues, writer) else 0
                if idle_streak >= 2:
                    self.log.info("supervisor.idle", seconds=round(time.monotonic() - started, 2))
                    return EXIT_OK
                if self.timeout is not None and time.monotonic() - started > self.timeout:
                    self.log.error("supervisor.idle_timeout", timeout=self.timeout)
                    return EXIT_TIMEOUT
            time.sleep(0.3 if queues is not None else 0.5)
        self.log.info("supervisor.signal", signal=signal.Signals(self._stop_signal).name)
        return EXIT_OK

    def _fleet_idle(self, queues: Any, writer: dict) -> bool:
        run = self.cfg.run_dir
        sched = status.read(run / "scheduler.json") or {}
        consumer = status.read(run / "consumer.json") or {}
        fresh = time.time() - writer.get("updated_at", 0) < 1.0
        pending = queues.pending()
        return bool(writer.get("idle") and fresh and sched.get("ready") and consumer.get("in_flight") == 0
                    and pending["store"] == 0 and pending["worker"] == 0)

    def _start(self, child: Child) -> None:
        child.proc = subprocess.Popen(child.argv, stdin=subprocess.DEVNULL)
        self.log.info("supervisor.child_started", child=child.role, child_pid=child.proc.pid)

    def _check(self, child: Child) -> int | None:
        """Restart ``child`` if it exited; returns an exit code when the fleet must stop."""
        now = time.monotonic()
        if child.proc is None:
            if now >= child.restart_at:
                self._start(child)
            return None
        code = child.proc.poll()
        if code is None:
            if now - child.restart_at > 30.0:
                child.backoff = 0.5  # it has stayed up: forget the old backoff
                if self.crash_loop and self.crash_loop["role"] == child.role:
                    self.log.info("supervisor.crash_loop_over", child=child.role)
                    self.crash_loop = None
                    self._publish()
            return None
        child.exits.append(now)
        child.restarts += 1
        self.log.warning("supervisor.child_exited", child=child.role, code=code, child_pid=child.proc.pid)
        child.proc = None
        if len(child.exits) == CRASH_LOOP[0] and now - child.exits[0] < CRASH_LOOP[1]:
            self.log.critical("supervisor.crash_loop", child=child.role, exits=len(child.exits),
                              window_s=CRASH_LOOP[1], last_code=code)
            self.crash_loop = {"role": child.role, "last_code": code, "at": time.time(),
                               "logs": str(self.cfg.logs_dir / f"{child.role}.log")}
            self._publish(crash_loop=self.crash_loop)
            if self.until_idle:
                return EXIT_CRASH_LOOP
            child.restart_at = now + CRASH_LOOP_BACKOFF_S
            return None
        child.restart_at = now + child.backoff
        child.backoff = min(child.backoff * 2, 10.0)
        self._publish(crash_loop=self.crash_loop)
        return None

    def _check_hung_writer(self) -> None:
        writer = next(c for c in self.children if c.role == "writer")
        if writer.proc is None or writer.proc.poll() is not None:
            return
        st = status.read(self.cfg.run_dir / "writer.json") or {}
        if st.get("pid") != writer.proc.pid or st.get("halted"):
            return  # not yet started up (it publishes once running), or halted on purpose
        limit = JOB_HUNG_AFTER_S if st.get("job") else self.cfg.writer_hung_after_s
        age = time.time() - st.get("updated_at", time.time())
        if age > limit:
            self.log.error("supervisor.writer_hung", child_pid=writer.proc.pid, silent_s=round(age, 1),
                           job=st.get("job"))
            writer.proc.kill()

    def _check_job_timeout(self) -> None:
        """Kill (and so restart) a consumer whose running job outlived its catalog timeout:
        one hung snapshot or check must not block every later job. Jobs are idempotent."""
        consumer = next(c for c in self.children if c.role == "consumer")
        if consumer.proc is None or consumer.proc.poll() is not None:
            return
        st = status.read(self.cfg.run_dir / "consumer.json") or {}
        if st.get("pid") != consumer.proc.pid or not st.get("in_flight") or not st.get("timeout"):
            return
        if time.time() - st.get("started_at", time.time()) > st["timeout"]:
            self.log.error("supervisor.job_timeout", job=st.get("last"), timeout_s=st["timeout"],
                           child_pid=consumer.proc.pid)
            consumer.proc.kill()

    def _publish(self, **extra: Any) -> None:
        try:
            status.publish(self.cfg.run_dir / "supervisor.json",
                           {"state": "running", "until_idle": self.until_idle,
                            "restarts": {c.role: c.restarts for c in self.children}, **extra})
        except OSError as exc:  # a full disk must not take the supervisor down
            self.log.error("supervisor.status_unwritable", error=str(exc))

    def _stop_children(self) -> None:
        live = [c for c in self.children if c.proc is not None and c.proc.poll() is None]
        for child in live:
            child.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for child in live:
            try:
                child.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.log.error("supervisor.kill", child=child.role, child_pid=child.proc.pid)
                child.proc.kill()
                child.proc.wait()

"""An in-process writer on a real data dir: the production ``Writer`` (``workers.writer``),
built on the store ``store.open`` returns (SQLite file or PostgreSQL schema) and the one drain
loop (``workers.drain``), stepped by the test with its own clock: it never sleeps, whatever
pause the writer asks for.

Nothing is stood in for: the spool, the store, the huey queue and the run directory are the
real ones in a temp data dir; the writer logs JSON lines to ``logs/writer.log`` as in a fleet.
A unit of work takes milliseconds, so halt, FTS detach, job deferral and disk-full behaviour
are checked here; real fleets stay for lifecycle, signals and ``kill -9``.

Four ways in, all on the production ``Writer`` and ``Drain``: ``InProcessWriter`` steps one
writer turn by turn; ``WriterThread`` runs one (``Writer.run``) in a thread for producers and
readers to meet (the ``writer`` fixture in conftest); ``Home`` (and ``drain``, also
``QuillCLI.drain`` in conftest) drains a data dir to its end as ``quill run --until-idle``'s
writer does, without the fleet (a fleet start costs about 3 CPU s: four interpreters);
``RecordingDrain`` is the bare drain loop over a store, noting
each refusal, for tests of the appliers themselves.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pack_env

from quill import home
from quill.ops import logs
from quill.spool import Spool
from quill.workers.drain import Drain
from quill.workers.writer import Writer


class RecordingDrain(Drain):
    """The one drain loop, also keeping each refusal ``(reason, detail, position)`` for the
    test to read (the record is quarantined as the writer would)."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.rejects: list[tuple[str, str, str]] = []

    def reject(self, entry: Any, reason: str, detail: str) -> None:
        self.rejects.append((reason, detail, str(entry.position)))
        super().reject(entry, reason, detail)


def make_home(root: Path, url: str | None = None, **sections: dict[str, Any]) -> home.Settings:
    """Create the data dir ``root`` with ``sections`` (``{"section": {"key": value}}``) as its
    config.toml and ``url`` (a PostgreSQL store URL; None: SQLite) as ``[store] url``;
    returns its settings with every folder made."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    sections = {name: dict(values) for name, values in sections.items()}
    pack_env.config_store_section(sections)  # QUILL_TEST_PACK_MIN_BYTES, when the run sets it
    if url:
        sections.setdefault("store", {})["url"] = url
    lines = []
    for name, values in sections.items():
        lines.append(f"[{name}]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in values.items()]
    (root / "config.toml").write_text("\n".join(lines) + "\n")
    cfg = home.load(root)
    cfg.ensure_dirs()
    return cfg


def job_runs(writer: Any) -> list[tuple]:
    """``(job, outcome)`` of every job run the store of ``writer`` (an ``InProcessWriter`` or
    anything with ``cfg.state_db``) records, oldest first, read by a reader connection."""
    from quill.store.sqlite.connection import open_reader

    conn = open_reader(writer.cfg.state_db)
    try:
        return conn.execute("SELECT job, outcome FROM job_runs ORDER BY started_at").fetchall()
    finally:
        conn.close()


def drain(root: Path) -> dict[str, Any]:
    """Drain the spool of the data dir at ``root`` in this process, exactly as the fleet's
    writer does (``Writer.until_idle``: chunks, FTS index slices, queued store jobs, torn
    tails sealed), then release the lease; the writer logs to ``logs/writer.log``.

    For tests that need the spool drained but not the fleet (no supervisor, scheduler or
    consumer: scheduled and queued huey jobs do not run). Returns the writer's totals with
    ``spool_id``, ``from`` and ``to``. Raises ``LeaseHeldError`` while a fleet runs, and
    ``CorruptError`` when the store is halted."""
    cfg = home.load(Path(root))
    cfg.ensure_dirs()
    return Writer(cfg, logs.configure(cfg.logs_dir, "writer")).until_idle()


class WriterThread:
    """The production writer of ``cfg``'s data dir (``Writer.run``), run in a thread of this
    process until ``close``: the writer a producer and a reader meet, without a fleet (for
    tests of clients and waits, not of the fleet's lifecycle). ``close`` raises what the
    writer raised."""

    #: Seconds ``idle`` and ``close`` wait (generous: a loaded machine).
    TIMEOUT_S = 20.0

    def __init__(self, cfg: home.Settings):
        self.cfg = cfg
        self.stop = threading.Event()
        self.writer = Writer(cfg, logs.configure(cfg.logs_dir, "writer"))
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.writer.run(self.stop)
        except BaseException as exc:  # reported by close(), in the test's thread
            self.errors.append(exc)

    def idle(self) -> None:
        """Return once the writer has published itself idle (it then waits for a ring)."""
        deadline = time.monotonic() + self.TIMEOUT_S
        while time.monotonic() < deadline:
            published = self.writer.run_dir.last("writer")
            if published and home.WriterStatus.from_json(published).idle:
                return
            time.sleep(0.01)
        raise AssertionError(f"the writer never went idle: {self.errors}")

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=self.TIMEOUT_S)
        assert not self.thread.is_alive(), "the writer did not stop"
        assert not self.errors, self.errors


class InProcessWriter:
    """A data dir at ``root`` (created) with ``settings`` written to its config.toml as
    ``{"section": {"key": value}}``; ``url``: a PostgreSQL store URL (None: SQLite).
    ``writer`` is the real ``Writer``, initialized (lease held) until ``close``."""

    def __init__(self, root: Path, url: str | None = None, **settings: dict[str, Any]):
        self.root = Path(root)
        writer = {"poll_interval": 0.001, **settings.pop("writer", {})}
        self.cfg = make_home(self.root, url, writer=writer, **settings)
        self.log = logs.configure(self.cfg.logs_dir, "writer")
        self.spool = Spool(self.cfg.spool_dir)
        self.clock = time.monotonic()
        self.writer = self.start()

    def start(self) -> Writer:
        """A new writer on this data dir, initialized (as a restarted process would be)."""
        writer = Writer(self.cfg, self.log)
        writer.initialize()
        return writer

    def append(self, op: str, data: dict[str, Any]) -> None:
        self.spool.append(op, data)

    def say(self, session: str, *texts: str) -> None:
        """Append one ``messages.append`` of user messages ``texts`` to ``session``."""
        self.append(
            "messages.append",
            {"session_id": session, "messages": [{"role": "user", "content": t} for t in texts]},
        )

    def turn(self, seconds: float = 0.0) -> float:
        """One ``loop_once`` at the test's clock (advanced by ``seconds`` first); returns the
        pause the writer asked for."""
        self.clock += seconds
        return self.writer.loop_once(self.clock)

    def until_idle(self, max_turns: int = 10_000) -> int:
        """Turn until the writer publishes idle (and is not halted); returns the turns taken.
        Raises ``AssertionError`` when it never gets there."""
        for n in range(1, max_turns + 1):
            self.turn()
            st = home.WriterStatus.from_json(self.status())
            if st.idle and not st.halted:
                return n
        raise AssertionError(f"the writer was not idle after {max_turns} turns: {self.status()}")

    def status(self) -> dict[str, Any]:
        """What the writer last published (``run/writer.json``)."""
        return self.writer.run_dir.last("writer") or {}

    def events(self, name: str) -> list[dict[str, Any]]:
        """The writer's log events called ``name``, oldest first."""
        path = self.cfg.logs_dir / "writer.log"
        found = []
        for line in path.read_text().splitlines() if path.exists() else ():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("event") == name:
                found.append(event)
        return found

    def restart(self) -> Writer:
        """Shut the writer down (as SIGTERM would) and start a new one."""
        self.writer.shutdown()
        self.writer = self.start()
        return self.writer

    def close(self) -> None:
        self.writer.shutdown()
        self.spool.close()


class Home:
    """A data dir at ``root`` (created; ``sections`` as in ``make_home``) driven in-process:
    producers append to its real spool and ``drain`` runs the production writer until idle
    (``drain`` above), so a test drains exactly as the fleet's writer does. ``db``,
    ``spool_dir`` and ``snapshots`` are the data dir's store file and folders."""

    def __init__(self, root: Path, url: str | None = None, **sections: dict[str, Any]):
        self.root = Path(root)
        self.cfg = make_home(self.root, url, **sections)
        self.spool_dir = self.cfg.spool_dir
        self.db = self.cfg.state_db
        self.snapshots = self.cfg.snapshots_dir
        self.spool = Spool(self.spool_dir)

    def append(self, op: str, data: dict[str, Any], **kw: Any) -> Any:
        """``Spool.append``: returns its ack (``position``, ``batch``)."""
        return self.spool.append(op, data, **kw)

    def say(self, session: str, *texts: str, **extra: Any) -> Any:
        """Append one ``messages.append`` of user messages ``texts`` (each with ``extra``
        fields) to ``session``; returns the ack."""
        return self.append(
            "messages.append",
            {
                "session_id": session,
                "messages": [{"role": "user", "content": t, **extra} for t in texts],
            },
        )

    def drain(self) -> dict[str, Any]:
        """Drain the spool to its end with the production writer; returns its totals."""
        return drain(self.root)

    def close(self) -> None:
        self.spool.close()

"""An in-process writer on a real data dir: the production ``Writer`` (``workers.writer``),
built on the store ``store.open`` returns (SQLite file or PostgreSQL schema) and the one drain
loop (``workers.drain``), stepped by the test with its own clock: it never sleeps, whatever
pause the writer asks for.

Nothing is stood in for: the spool, the store, the huey queue and the run directory are the
real ones in a temp data dir; the writer logs JSON lines to ``logs/writer.log`` as in a fleet.
A unit of work takes milliseconds, so halt, FTS detach, job deferral and disk-full behaviour
are checked here; real fleets stay for lifecycle, signals and ``kill -9``.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from quill import home
from quill.ops import logs
from quill.spool import Spool
from quill.workers.writer import Writer


class InProcessWriter:
    """A data dir at ``root`` (created) with ``settings`` written to its config.toml as
    ``{"section": {"key": value}}``; ``url``: a PostgreSQL store URL (None: SQLite).
    ``writer`` is the real ``Writer``, initialized (lease held) until ``close``."""

    def __init__(self, root: Path, url: str | None = None, **settings: dict[str, Any]):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        sections = {"writer": {"poll_interval": 0.001, **settings.pop("writer", {})}, **settings}
        if url:
            sections.setdefault("store", {})["url"] = url
        lines = []
        for name, values in sections.items():
            lines.append(f"[{name}]")
            lines += [f"{k} = {json.dumps(v)}" for k, v in values.items()]
        (self.root / "config.toml").write_text("\n".join(lines) + "\n")
        self.cfg = home.load(self.root)
        self.cfg.ensure_dirs()
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
        self.append("messages.append", {"session_id": session, "messages": [
            {"role": "user", "content": t} for t in texts]})

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

"""A store on a real backend — a SQLite file, or a fresh schema in the test run's PostgreSQL
database (``pg_store_url``) — driven through the real spool and the backend's ``apply_chunk``.

The behaviour suites take the ``backend`` fixture (tests/conftest.py: ``sqlite`` and
``postgres``), so one test body checks both implementations of the store contract."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from harness import RecordingDrain

from quill.spool import Quarantine, Spool, SpoolReader
from quill.store.factory import open_url


class Store:
    """``apply(op, data)`` appends to the spool and drains it; returns the reject reasons.
    ``url``: a ``postgresql://`` store URL (None = a SQLite file under ``root``)."""

    def __init__(self, root: Path, url: str | None = None):
        self.root = root
        self.spool = Spool(root / "spool")
        self.backend = open_url(url, root / "state.db", "test-spool")
        self.kind = self.backend.kind
        self.conn = self.backend.conn

    def apply(self, op: str, data: dict[str, Any]) -> list[str]:
        self.spool.append(op, data)
        return self.drain()

    def drain(self) -> list[str]:
        """Apply everything after the store's cursor as ONE chunk (the one drain loop, with
        a chunk size no spool here reaches); returns the reject reasons."""
        drain = RecordingDrain(
            self.backend,
            SpoolReader(self.root / "spool"),
            Quarantine(self.root / "spool"),
            1 << 40,
            max_bytes=1 << 40,
        )
        drain.start()
        step = drain.step()
        self.last_result = step.result if step.entries else None
        self.last_rejects = drain.rejects
        self.last_entries = step.entries
        return [r[0] for r in drain.rejects]

    def replay(self, start=None) -> Any:
        """Apply the whole spool again from ``start`` (default: its beginning) as a crash
        before the cursor moved would; returns the chunk's figures (``ChunkResult``)."""
        from quill.spool import START

        entries = list(SpoolReader(self.root / "spool").read(start or START, max_bytes=1 << 40))
        return self.backend.apply_chunk(entries, lambda e, reason, detail: None)

    def job(self, func: Any, **params: Any) -> dict[str, Any]:
        """Run a store job that emits ops (as the writer does: conn + spool), then drain the
        ops it appended; returns the job's figures."""
        figures = func(self.conn, self.spool, **params)
        assert self.drain() == [], self.last_rejects
        return figures

    def index(self) -> int:
        return self.backend.index(100_000)

    def reader(self):
        return self.backend.reader()

    def rows(self, session_id: str) -> list[tuple]:
        """Every column of a session's rows, by id (for 'nothing changed' assertions)."""
        return self.conn.execute(
            "SELECT * FROM messages WHERE session_id = ? ORDER BY id", (session_id,)
        ).fetchall()

    def ids(self, session_id: str, **where: str) -> list[int]:
        cond = "".join(f" AND {k} = ?" for k in where)
        return [
            r[0]
            for r in self.conn.execute(
                f"SELECT id FROM messages WHERE session_id = ?{cond} ORDER BY id",
                (session_id, *where.values()),
            )
        ]

    def close(self) -> None:
        self.backend.close()
        self.spool.close()


@pytest.fixture
def store(tmp_path, backend):
    """A ``Store`` on the backend under test, closed after the test."""
    s = Store(tmp_path, backend)
    yield s
    s.close()


def user(text: str, **kw: Any) -> dict[str, Any]:
    return {"role": "user", "content": text, **kw}


def assistant(text: str | None, **kw: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": text, **kw}


def call(call_id: str, name: str = "bash", args: str = '{"cmd": "ls"}') -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}


def tool(call_id: str, text: str, name: str = "bash") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "name": name, "content": text}

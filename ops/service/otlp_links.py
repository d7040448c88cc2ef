"""Delegate links of OTLP agent spans, kept in the data dir so a restart of ``quill serve``
loses none: which session each GenAI span belongs to, and which agent spans wait for their
parent span (a child span ends, so is exported, before its parent).

One SQLite file, ``otlp-links.db`` (``home.layout.OTLP_LINKS_DB``, mode 0600: span, session
and tool call ids), two tables bounded to ``capacity`` rows each (oldest forgotten, checked
every ``capacity // 10`` spans). It holds no transcript content: every link it makes is a
``session.create`` op through the spool like any other, so a store rebuilt from a snapshot
plus the spool is the same without it; losing the file only loses links whose parent span
comes later. Several processes may share it (WAL, busy timeout); a process's routes share
one connection under a lock.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import apsw

from quill.ops.service.otlp_map import (
    AGENT_OPERATIONS,
    SOURCE,
    Op,
    Span,
    SpanOps,
    _op,
    _text_attr,
)

SCHEMA = """
CREATE TABLE IF NOT EXISTS spans (trace TEXT NOT NULL, span TEXT NOT NULL, session TEXT,
    call TEXT, PRIMARY KEY (trace, span));
CREATE TABLE IF NOT EXISTS waiting (trace TEXT NOT NULL, parent TEXT NOT NULL,
    span TEXT NOT NULL, session TEXT NOT NULL, agent TEXT,
    PRIMARY KEY (trace, parent, span));
"""


class LinksUnavailableError(Exception):
    """``otlp-links.db`` cannot be written now: another process holds its write lock past
    the busy timeout, or an I/O error or a full disk (SQLITE_BUSY, SQLITE_LOCKED,
    SQLITE_IOERR, SQLITE_FULL by apsw exception type). Nothing of the export was recorded
    (its transaction rolled back); the export is answered 503 with ``Retry-After``, which an
    OTLP exporter retries (a 500 it would drop)."""


#: apsw exception types (SQLite primary result codes) of a file that passes by itself.
_UNAVAILABLE = (apsw.BusyError, apsw.LockedError, apsw.IOError, apsw.FullError)


class DelegateLinks:
    """Make an agent span whose parent span is in another session a ``delegate`` child of
    it, whichever export (before or after a restart) brings the parent. ``path`` None: in
    memory (tests). Thread-safe. Raises ``apsw.Error`` when the file cannot be opened."""

    def __init__(self, path: Path | None = None, capacity: int = 1_000_000):
        self.capacity, self.lock, self.added = capacity, threading.Lock(), 0
        self.conn = apsw.Connection(str(path) if path is not None else ":memory:")
        if path is not None:  # chmod the path: closing a descriptor would drop SQLite's locks
            os.chmod(path, 0o600)
        self.conn.setbusytimeout(5000)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute(SCHEMA)

    def close(self) -> None:
        self.conn.close()

    def _prune(self) -> None:
        for table in ("spans", "waiting"):
            self.conn.execute(
                f"DELETE FROM {table} WHERE rowid <= (SELECT max(rowid) FROM {table}) - ?",
                (self.capacity,),
            )

    def links(self, spans: list[Span]) -> list[SpanOps]:
        """The ``session.create`` ops that ``spans`` (every span of an export: GenAI spans
        accepted, and the others) complete for agent spans under a parent, as ``SpanOps`` of
        the agent span: a ``delegate`` link when the parent is a GenAI span of another
        session, else the agent's name. Offered again each time the parent is exported (a
        retry): the same batch id, applied once. Raises ``LinksUnavailableError`` (nothing
        recorded) when the file cannot be written now."""
        try:
            return self._links(spans)
        except _UNAVAILABLE as exc:
            raise LinksUnavailableError(f"otlp-links.db: {type(exc).__name__}: {exc}") from exc

    def _links(self, spans: list[Span]) -> list[SpanOps]:
        out = []
        with self.lock, self.conn:
            for s in spans:
                call = s.attrs.get("gen_ai.tool.call.id")
                self.conn.execute(
                    "INSERT OR REPLACE INTO spans VALUES (?, ?, ?, ?)",
                    (
                        s.trace,
                        s.span,
                        s.session_id if s.genai else None,
                        call if isinstance(call, str) else None,
                    ),
                )
                if s.operation in AGENT_OPERATIONS and s.parent:
                    agent = _text_attr(s, "gen_ai.agent.name")
                    self.conn.execute(
                        "INSERT OR IGNORE INTO waiting VALUES (?, ?, ?, ?, ?)",
                        (s.trace, s.parent, s.span, s.session_id, agent),
                    )
            self.added += len(spans)
            if self.added >= self.capacity // 10:
                self._prune()
                self.added = 0
            parents = {(s.trace, s.span) for s in spans} | {
                (s.trace, s.parent) for s in spans if s.operation in AGENT_OPERATIONS
            }
            for trace, span in sorted(parents):
                parent = self.conn.execute(
                    "SELECT session, call FROM spans WHERE trace = ? AND span = ?", (trace, span)
                ).fetchone()
                if parent is None:
                    continue
                children = self.conn.execute(
                    "SELECT span, session, agent FROM waiting WHERE trace = ? AND parent = ?"
                    " ORDER BY rowid",
                    (trace, span),
                ).fetchall()
                for child, session, agent in children:
                    named = Span(trace, child, span, "", 0, 0, {}, [], {})  # ids: the batch id
                    op = _link(named, session, agent, *parent)
                    if op is not None:
                        out.append(SpanOps(named, [op]))
        return out


def _link(
    child: Span, session: str, agent: str | None, parent_session: str | None, call_id: Any
) -> Op | None:
    """The agent span ``child``'s (of ``session``, named ``agent``) ``session.create`` once
    its parent is known: a ``delegate`` child of ``parent_session`` when that is another
    session (``meta``: the agent name and the parent tool span's call id), else its name alone
    (None without one)."""
    data: dict[str, Any] = {"session_id": session, "source": SOURCE}
    delegate = parent_session is not None and parent_session != session
    if delegate:
        data |= {"parent_id": parent_session, "parent_kind": "delegate"}
    meta = {"agent": agent, "parent_tool_call_id": call_id if delegate else None}
    if any(meta.values()):
        data["meta"] = {k: v for k, v in meta.items() if v}
    if len(data) <= 2:
        return None
    return _op(child, "session.create", data)

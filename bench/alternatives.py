"""The writers compared in §1 (acknowledged-durable ingest), behind one small interface.

Every writer is opened once per producer process (``open``), then ``write(session_id, msgs)``
returns only when those messages are durable by that system's own rules; ``close`` at the end.
``prepare(path)`` runs once, in the parent, before producers start (schema creation).

* ``quill``      Quill's spool: ``Spool(dir).append("messages.append", …)``, one fsync'd record
                 per call.
* ``naive``      stdlib sqlite3, WAL, synchronous=FULL, FTS5 by triggers, one BEGIN IMMEDIATE per
                 message (the reference design where every agent process writes the database
                 itself).
* ``naive_turn`` the same store, one transaction per 5-message turn (a call of 10 = 2 transactions;
                 a call of 1 cannot form a turn, so it is one transaction per message).
* ``agents``     OpenAI Agents SDK ``SQLiteSession(session_id, db_path).add_items(items)``
                 (file-backed).
* ``langgraph``  LangGraph ``SqliteSaver.put`` of one checkpoint per 5-message turn, holding the
                 thread's accumulated ``messages`` channel, as a MessagesState graph checkpoints it.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from pathlib import Path
from typing import Any

from .messages import text_of

TURN = 5

NAIVE_DDL = """
CREATE TABLE IF NOT EXISTS sessions (id TEXT PRIMARY KEY, started_at REAL, updated_at REAL);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY, session_id TEXT NOT NULL, role TEXT NOT NULL, content TEXT,
    tool_calls TEXT, tool_call_id TEXT, tool_name TEXT, ts REAL, extra TEXT);
CREATE INDEX IF NOT EXISTS messages_session ON messages(session_id, id);
CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts USING fts5(
    content, content='messages', content_rowid='id', tokenize='unicode61 remove_diacritics 2');
CREATE TRIGGER IF NOT EXISTS messages_ai AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
END;
"""
NAIVE_BUSY_MS = 60_000  # generous: we measure waiting, not "database is locked" failures


def naive_row(sid: str, m: dict[str, Any]) -> tuple:
    known = ("role", "content", "tool_calls", "tool_call_id", "name", "timestamp")
    extra = {k: v for k, v in m.items() if k not in known}
    tc = m.get("tool_calls")
    ts = m.get("timestamp")
    return (
        sid,
        m.get("role"),
        text_of(m),
        json.dumps(tc) if tc else None,
        m.get("tool_call_id"),
        m.get("name"),
        ts if isinstance(ts, (int, float)) else time.time(),
        json.dumps(extra, ensure_ascii=False) if extra else None,
    )


class Writer:
    name = "?"
    label = "?"

    @classmethod
    def available(cls) -> tuple[bool, str]:
        return True, ""

    @classmethod
    def prepare(cls, path: Path) -> None:
        pass

    def open(self, path: Path, proc: int) -> None:
        raise NotImplementedError

    def write(self, sid: str, msgs: list[dict[str, Any]]) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass


class QuillSpool(Writer):
    name, label = "quill", "Quill spool append"

    def open(self, path: Path, proc: int) -> None:
        from quill.spool import Spool

        self.spool = Spool(path / "spool")

    def write(self, sid, msgs):
        self.spool.append("messages.append", {"session_id": sid, "messages": msgs})

    def close(self):
        self.spool.close()


class QuillSpoolGroup(QuillSpool):
    """Quill's spool with the user-space group commit on (``Spool(group_commit=True)``),
    measured against the default (one fdatasync per append) in the same run. Not an
    alternative."""

    name, label = "quill-gc", "Quill spool append, group commit"

    def open(self, path: Path, proc: int) -> None:
        from quill.spool import Spool

        self.spool = Spool(path / "spool", group_commit=True)


class Naive(Writer):
    name, label = "naive", "naive sqlite3, txn/message, FTS triggers"
    per_txn = 1

    @classmethod
    def connect(cls, db: Path) -> sqlite3.Connection:
        conn = sqlite3.connect(str(db), isolation_level=None, timeout=NAIVE_BUSY_MS / 1000)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        return conn

    @classmethod
    def prepare(cls, path: Path) -> None:
        conn = cls.connect(path / "naive.db")
        conn.executescript(NAIVE_DDL)
        conn.close()

    def open(self, path, proc):
        self.conn = self.connect(path / "naive.db")

    def write(self, sid, msgs):
        c = self.conn
        for i in range(0, len(msgs), self.per_txn):
            part = msgs[i : i + self.per_txn]
            now = time.time()
            c.execute("BEGIN IMMEDIATE")
            try:
                c.execute(
                    "INSERT OR IGNORE INTO sessions (id, started_at, updated_at) VALUES (?, ?, ?)",
                    (sid, now, now),
                )
                c.executemany(
                    "INSERT INTO messages (session_id, role, content, tool_calls, tool_call_id, "
                    "tool_name, ts, extra) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    [naive_row(sid, m) for m in part],
                )
                c.execute("UPDATE sessions SET updated_at = ? WHERE id = ?", (now, sid))
                c.execute("COMMIT")
            except BaseException:
                if c.in_transaction:
                    c.execute("ROLLBACK")
                raise

    def close(self):
        self.conn.close()


class NaiveTurn(Naive):
    name, label = "naive_turn", "naive sqlite3, txn/5-msg turn, FTS triggers"
    per_txn = TURN


class AgentsSession(Writer):
    name, label = "agents", "OpenAI Agents SDK SQLiteSession.add_items"

    @classmethod
    def available(cls):
        try:
            from agents.memory import SQLiteSession  # noqa: F401
        except Exception as exc:  # pragma: no cover - depends on the environment
            return False, f"openai-agents not importable: {exc}"
        return True, ""

    @classmethod
    def prepare(cls, path):
        from agents.memory import SQLiteSession

        s = SQLiteSession("setup", str(path / "agents.db"))
        s.close()

    def open(self, path, proc):
        from agents.memory import SQLiteSession

        self.db = str(path / "agents.db")
        self.loop = asyncio.new_event_loop()
        self.sessions: dict[str, Any] = {}
        self.cls = SQLiteSession

    def write(self, sid, msgs):
        s = self.sessions.get(sid)
        if s is None:
            for old in self.sessions.values():
                old.close()
            self.sessions.clear()
            s = self.sessions[sid] = self.cls(sid, self.db)
        self.loop.run_until_complete(s.add_items(msgs))

    def close(self):
        for s in self.sessions.values():
            s.close()
        self.loop.close()


class LangGraphSaver(Writer):
    name, label = "langgraph", "LangGraph SqliteSaver, checkpoint/5-msg turn"

    @classmethod
    def available(cls):
        try:
            from langgraph.checkpoint.sqlite import SqliteSaver  # noqa: F401
        except Exception as exc:  # pragma: no cover
            return False, f"langgraph-checkpoint-sqlite not importable: {exc}"
        return True, ""

    @classmethod
    def prepare(cls, path):
        from langgraph.checkpoint.sqlite import SqliteSaver

        conn = sqlite3.connect(str(path / "langgraph.db"), check_same_thread=False)
        SqliteSaver(conn).setup()
        conn.close()

    def open(self, path, proc):
        from langgraph.checkpoint.base import empty_checkpoint
        from langgraph.checkpoint.sqlite import SqliteSaver

        self.conn = sqlite3.connect(
            str(path / "langgraph.db"), check_same_thread=False, timeout=NAIVE_BUSY_MS / 1000
        )
        self.saver = SqliteSaver(self.conn)
        self.saver.setup()
        self.empty = empty_checkpoint
        self.threads: dict[str, tuple[dict, list, int]] = {}

    def write(self, sid, msgs):
        from langgraph.checkpoint.base.id import uuid6

        cfg, history, step = self.threads.get(sid) or (
            {"configurable": {"thread_id": sid, "checkpoint_ns": ""}},
            [],
            0,
        )
        if sid not in self.threads:
            self.threads = {}  # one live thread per producer, like an agent loop
        for i in range(0, len(msgs), TURN):
            history = history + msgs[i : i + TURN]
            step += 1
            cp = self.empty()
            cp["id"] = str(uuid6(clock_seq=step))
            cp["channel_values"] = {"messages": history}
            cp["channel_versions"] = {"messages": step}
            cp["versions_seen"] = {"agent": {"messages": step}}
            cfg = self.saver.put(
                cfg, cp, {"source": "loop", "step": step, "parents": {}}, {"messages": step}
            )
        self.threads[sid] = (cfg, history, step)

    def close(self):
        self.conn.close()


ALL: list[type[Writer]] = [
    QuillSpool,
    QuillSpoolGroup,
    Naive,
    NaiveTurn,
    AgentsSession,
    LangGraphSaver,
]
BY_NAME = {w.name: w for w in ALL}

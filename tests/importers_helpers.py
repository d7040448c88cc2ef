"""Helpers for the importer tests: a real data dir that imports files through
ops/transfer/import_spool.py and drains them with the production writer (``harness.Home``),
builders for records in the real Claude Code, Codex and Gemini formats, and readers of
parsed files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from harness import Home

from quill.ops.transfer.import_spool import import_file
from quill.spool import Quarantine
from quill.store import Reader, open_writer


class Store(Home):
    """A data dir at ``root``: import files, drain them with the production writer, read
    projections. A drain that quarantines anything fails the test."""

    def __init__(self, root: Path):
        super().__init__(root)
        self._conn: Any = None

    @property
    def conn(self) -> Any:
        """A connection to the store file (opened on first use, closed by ``close``)."""
        if self._conn is None:
            self._conn = open_writer(self.db)
        return self._conn

    def drain(self) -> dict[str, Any]:
        figures = super().drain()
        assert figures["rejected"] == 0, list(Quarantine(self.spool_dir).entries())
        return figures

    def imp(self, path: Path):
        """Import the file at ``path`` (drained before and after); returns the import report."""
        self.drain()
        reader = Reader(self.db)
        try:
            report = import_file(self.spool, path, reader)
        finally:
            reader.close()
        self.drain()
        return report

    def view(self, sid: str, projection: str) -> list[dict]:
        with Reader(self.db) as r:
            return r.get_messages(sid, projection)

    def session(self, sid: str) -> dict:
        with Reader(self.db) as r:
            return r.get_session(sid)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
        super().close()


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path)
    yield s
    s.close()


def write_jsonl(path: Path, records) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def cc(uuid, rtype, content, parent, sid="s1", **kw):
    """A Claude Code user/assistant record (v2.x shape)."""
    msg = {"role": rtype, "content": content}
    if rtype == "assistant":
        msg.update({"id": kw.pop("msg_id", "msg_" + uuid), "model": "claude-x", "type": "message"})
    return {
        "parentUuid": parent,
        "isSidechain": False,
        "userType": "external",
        "cwd": "/w",
        "sessionId": sid,
        "version": "2.1.0",
        "type": rtype,
        "message": msg,
        "uuid": uuid,
        "timestamp": "2026-01-01T00:00:00.000Z",
        **kw,
    }


def codex_line(t, p, ts="2026-01-01T00:00:01.000Z"):
    return {"timestamp": ts, "type": t, "payload": p}


def codex_user(text):
    return codex_line(
        "response_item",
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]},
    )


def codex_assistant(text):
    return codex_line(
        "response_item",
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": text}],
        },
    )


def texts(messages):
    return [m.get("content") for m in messages]


def text_of(content) -> str:
    """The text of a message ``content`` (a string, parts or None)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content if isinstance(p, dict))


def all_messages(pf) -> list[dict]:
    """Every message of a parsed file (``ParsedFile``), session by session."""
    return [m for s in pf.sessions for m in s.messages]


#: A Gemini CLI session file (chats/session-*.json) of four messages, one tool call.
GEMINI_SESSION = {
    "sessionId": "g1",
    "projectHash": "h",
    "startTime": "2026-01-15T20:51:48.582Z",
    "lastUpdated": "2026-01-15T20:52:56.382Z",
    "messages": [
        {
            "id": "m1",
            "timestamp": "2026-01-15T20:51:48.582Z",
            "type": "user",
            "content": "make a file",
        },
        {
            "id": "m2",
            "timestamp": "2026-01-15T20:51:52.837Z",
            "type": "gemini",
            "content": "I will write it.",
            "thoughts": [
                {"subject": "Planning", "description": "write docs/blue.md", "timestamp": "x"}
            ],
            "tokens": {"input": 10, "output": 5},
            "model": "gemini-2.5-flash",
            "toolCalls": [
                {
                    "id": "wf-1",
                    "name": "write_file",
                    "args": {"file_path": "docs/blue.md"},
                    "result": [
                        {
                            "functionResponse": {
                                "id": "wf-1",
                                "name": "write_file",
                                "response": {"output": "wrote docs/blue.md"},
                            }
                        }
                    ],
                    "status": "success",
                    "timestamp": "2026-01-15T20:51:53.000Z",
                }
            ],
        },
        {
            "id": "m3",
            "timestamp": "2026-01-15T20:52:17.033Z",
            "type": "info",
            "content": "update available",
        },
        {
            "id": "m4",
            "timestamp": "2026-01-15T20:52:18.000Z",
            "type": "user",
            "content": [{"text": "thanks"}],
        },
    ],
}

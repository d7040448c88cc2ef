"""Helpers for the importer structure tests: a real spool + SQLite store pair that imports
files through ops/transfer/import_spool.py and drains them with the writer's apply_chunk, and builders
for records in the real Claude Code and Codex formats."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from quill.ops.transfer.import_spool import import_file
from quill.spool import START, Spool, SpoolReader
from quill.store import Reader, apply_chunk, open_writer

class Store:
    """A real spool + store pair: import files, drain them, read projections."""

    def __init__(self, root: Path):
        self.root = root
        self.spool = Spool(root / "spool")
        self.conn = open_writer(root / "state.db")
        self.cursor = START
        self.rejects: list[tuple[str, str]] = []

    def drain(self) -> None:
        entries = list(SpoolReader(self.root / "spool").read(self.cursor, max_bytes=1 << 40))
        if entries:
            apply_chunk(self.conn, entries, lambda e, reason, detail: self.rejects.append((reason, detail)))
            self.cursor = entries[-1].next
        assert self.rejects == []

    def imp(self, path: Path):
        self.drain()
        reader = Reader(self.root / "state.db")
        try:
            report = import_file(self.spool, path, reader)
        finally:
            reader.close()
        self.drain()
        return report

    def view(self, sid: str, projection: str) -> list[dict]:
        with Reader(self.root / "state.db") as r:
            return r.get_messages(sid, projection)

    def session(self, sid: str) -> dict:
        with Reader(self.root / "state.db") as r:
            return r.get_session(sid)

    def close(self) -> None:
        self.conn.close()
        self.spool.close()


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
    return {"parentUuid": parent, "isSidechain": False, "userType": "external", "cwd": "/w", "sessionId": sid,
            "version": "2.1.0", "type": rtype, "message": msg, "uuid": uuid,
            "timestamp": "2026-01-01T00:00:00.000Z", **kw}


def codex_line(t, p, ts="2026-01-01T00:00:01.000Z"):
    return {"timestamp": ts, "type": t, "payload": p}


def codex_user(text):
    return codex_line("response_item", {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]})


def codex_assistant(text):
    return codex_line("response_item", {"type": "message", "role": "assistant",
                                         "content": [{"type": "output_text", "text": text}]})


def texts(messages):
    return [m.get("content") for m in messages]

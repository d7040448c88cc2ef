"""A transcript holding a message larger than the spool's record limit (``[spool]
max_record_bytes``: a huge tool result, a pasted file) is imported without it, the message
reported by id, and everything else of the file stored: by ``quill import`` and by the
watcher, which builds its spool with the data dir's limit like every other producer.

Before: ``quill import`` stopped at the batch holding it (the rest of the file never spooled,
exit 2), and the watcher's spool took the default limit, so it acknowledged a record the
writer then quarantined whole, with every other message of its batch.

Likewise a message the store refuses (an id over the id limit): it is spooled alone and
quarantined alone, with its reason; before, its whole batch (up to 200 messages) was. Real
spool, real writer (in a thread), real SQLite store."""

from __future__ import annotations

import json
import sqlite3
import uuid
from pathlib import Path

from harness import WriterThread
from watch_helpers import watch_config

from quill import home as data_dir
from quill.ops import logs
from quill.ops.transfer.import_spool import import_file
from quill.ops.transfer.watch_ingest import ingest_session
from quill.spool import Position, Quarantine, Spool, SpoolReader
from quill.store import packed
from quill.workers.watch import Watcher

LIMIT = 64 * 1024
SID = "5e551015-0000-4000-8000-00000000000a"


def _claude_lines(n: int, big: int, big_bytes: int, each: int) -> list[str]:
    """A Claude Code session of ``n`` alternating turns of ``each`` characters; turn ``big``
    holds ``big_bytes`` characters."""
    out, parent = [], None
    for i in range(n):
        uid = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{SID}-{i}"))
        role = "user" if i % 2 == 0 else "assistant"
        text = f"turn {i} " + ("x" * (big_bytes if i == big else each))
        content = text if role == "user" else [{"type": "text", "text": text}]
        message = {"role": role, "content": content}
        if role == "assistant":
            message |= {"model": "claude-test", "id": f"msg_{i}"}
        record = {
            "parentUuid": parent,
            "isSidechain": False,
            "type": role,
            "sessionId": SID,
            "uuid": uid,
            "timestamp": f"2026-03-25T02:00:{i % 60:02d}.000Z",
            "cwd": "/tmp",
            "message": message,
        }
        out.append(json.dumps(record) + "\n")
        parent = uid
    return out


def _setup(tmp_path: Path) -> tuple[data_dir.Settings, Path, list[str]]:
    root = tmp_path / "agent"
    root.mkdir()
    home = tmp_path / "home"
    watch_config(home, [root])
    with open(home / "config.toml", "a") as f:
        f.write(f"[spool]\nmax_record_bytes = {LIMIT}\n")
    cfg = data_dir.load(home)
    cfg.ensure_dirs()
    assert cfg.max_record_bytes == LIMIT
    # 41 turns of 5 KB (a 200-message batch would be ~200 KB: split) and one of 200 KB.
    lines = _claude_lines(42, big=7, big_bytes=200_000, each=5_000)
    path = root / f"{SID}.jsonl"
    path.write_text("".join(lines))
    return cfg, path, lines


def _stored(cfg: data_dir.Settings) -> list[str]:
    conn = sqlite3.connect(f"file:{cfg.home / 'state.db'}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT content FROM messages WHERE state = 'live'").fetchall()
    finally:
        conn.close()
    return sorted(packed.unpack(r[0]).split(" ")[1] for r in rows)  # packed: store.packed


def _drained(cfg: data_dir.Settings) -> list[str]:
    thread = WriterThread(cfg)
    try:
        thread.idle()
    finally:
        thread.close()
    assert Quarantine(cfg.spool_dir).count() == 0  # nothing the writer had to refuse
    return _stored(cfg)


def _spooled_sizes(cfg: data_dir.Settings) -> list[int]:
    return [e.size for e in SpoolReader(cfg.spool_dir).read(Position(1, 0), max_bytes=1 << 30)]


def test_import_spools_all_but_the_oversized_message_and_names_it(tmp_path):
    cfg, path, _lines = _setup(tmp_path)
    with Spool(cfg.spool_dir, max_record_bytes=LIMIT) as spool:
        report = import_file(spool, path, None)
    assert (report.messages, report.new) == (42, 41)
    [problem] = report.problems
    big_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{SID}-7"))
    assert problem.kind == "skipped" and big_id in problem.reason
    assert "max_record_bytes" in problem.reason
    assert max(_spooled_sizes(cfg)) < LIMIT
    assert _drained(cfg) == sorted(str(i) for i in range(42) if i != 7)


def test_the_watcher_keeps_the_data_dirs_record_limit(tmp_path):
    cfg, path, _lines = _setup(tmp_path)
    log = logs.configure(tmp_path / "logs", "watch")
    watcher = Watcher(cfg, log, ingest_session(cfg, log))
    counts = watcher.round()
    assert counts["imported"] == 1 and counts["new_messages"] == 41
    assert max(_spooled_sizes(cfg)) < LIMIT
    assert _drained(cfg) == sorted(str(i) for i in range(42) if i != 7)
    said = [json.loads(line) for line in (tmp_path / "logs" / "watch.log").read_text().splitlines()]
    assert [e["count"] for e in said if e.get("event") == "watch.skipped"] == [1]


def test_a_message_the_store_refuses_is_quarantined_alone(tmp_path):
    cfg, path, _lines = _setup(tmp_path)
    lines = _claude_lines(12, big=-1, big_bytes=0, each=10)
    bad = json.loads(lines[5])
    bad["uuid"] = "u" * 2000  # over the id limit (512 characters)
    lines[5] = json.dumps(bad) + "\n"
    path.write_text("".join(lines))
    with Spool(cfg.spool_dir) as spool:
        report = import_file(spool, path, None)
    [problem] = report.problems
    assert "u" * 2000 in problem.reason and "quarantine" in problem.reason
    thread = WriterThread(cfg)
    try:
        thread.idle()
    finally:
        thread.close()
    assert _stored(cfg) == sorted(str(i) for i in range(12) if i != 5)
    [entry] = list(Quarantine(cfg.spool_dir).entries())
    assert entry["reason"] == "invalid-field" and entry["op"] == "messages.append"
    assert [m["id"] for m in json.loads(entry["raw"])["data"]["messages"]] == ["u" * 2000]

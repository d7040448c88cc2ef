"""An operator's resolution of a quarantine entry (retry or drop, recorded in
``quarantine/audit.jsonl``) survives every path that refuses the record again — ``quill
recover`` from an older snapshot, a live ``quill spool replay``, a ``replay --into`` scratch
file, a writer re-reading the record — and a retry run twice applies once. Real data dirs,
real ``quill`` subprocesses, real SQLite files."""

from __future__ import annotations

import json

from quill.ops.cli.quarantine import retry_op
from quill.spool import Position, Quarantine, Spool

REUSED = "11111111-1111-4111-8111-111111111111"


def _contents(quill, sid: str = "s") -> list[str]:
    return [
        m["content"] for m in quill.json("sessions", "show", sid, "--view", "audit")["messages"]
    ]


def _quarantine_a_reused_batch(quill, home) -> dict:
    """A snapshot, then two appends under one batch id: the second (other content) is
    quarantined as ``batch-id-reused``. Returns its entry."""
    with Spool(home / "spool") as sp:
        sp.append(
            "messages.append",
            {"session_id": "s", "messages": [{"role": "user", "content": "first"}]},
        )
    quill.drain()
    quill.run("snapshot")  # predates the refusal: a recover replays it again
    with Spool(home / "spool") as sp:
        sp.append(
            "messages.append",
            {"session_id": "s", "messages": [{"role": "user", "content": "turn one"}]},
            batch_id=REUSED,
        )
        sp.append(
            "messages.append",
            {"session_id": "s", "messages": [{"role": "user", "content": "turn two"}]},
            batch_id=REUSED,
        )
    quill.drain()
    [entry] = quill.json("spool", "quarantine", "list")["entries"]
    assert entry["reason"] == "batch-id-reused"
    return entry


def test_recover_does_not_reopen_a_retried_entry(quill, home):
    entry = _quarantine_a_reused_batch(quill, home)
    quill.run("spool", "quarantine", "retry", entry["id"])
    quill.drain()
    assert _contents(quill) == ["first", "turn one", "turn two"]
    out = quill.json("recover")
    assert out["swapped_by"] == "recover" and out["rejected"] == 0 and out["already_resolved"] == 1
    quill.drain()
    assert quill.json("spool", "quarantine", "list")["entries"] == []
    assert quill.status()["spool"]["quarantined"] == 0
    assert _contents(quill) == [
        "first",
        "turn one",
        "turn two",
    ]  # the rebuild applied the retry once


def test_replays_do_not_reopen_a_dropped_entry(quill, home, tmp_path):
    entry = _quarantine_a_reused_batch(quill, home)
    quill.run("spool", "quarantine", "drop", entry["id"])
    # a live replay of the whole spool (fleet stopped): refused again, not re-opened, exit 0
    live = quill.run("spool", "replay", "--from", "1:0", "--json", check=False)
    assert live.returncode == 0, live.stderr
    assert json.loads(live.stdout)["already_resolved"] == 1
    assert quill.json("spool", "quarantine", "list")["entries"] == []
    # a scratch replay consults the live audit too
    scratch = tmp_path / "scratch.db"
    proc = quill.run(
        "spool", "replay", "--from", "1:0", "--into", str(scratch), "--json", check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["rejected"] == 0
    assert quill.json("spool", "quarantine", "--store", str(scratch), "list")["entries"] == []
    assert _contents(quill) == ["first", "turn one"]
    # the audit keeps the one drop, nothing else
    assert [a["action"] for a in Quarantine(home / "spool").audit()] == ["drop"]


def test_a_retry_run_again_after_a_kill_between_append_and_resolve_applies_once(quill, home):
    entry = _quarantine_a_reused_batch(quill, home)
    # The state a retry killed after its append and before its audit line leaves: the op is
    # re-appended exactly as `retry` appends it, and the entry is still in the quarantine.
    op, data, batch = retry_op(Quarantine(home / "spool").get(entry["id"]), force=False)
    with Spool(home / "spool") as sp:
        first = sp.append(op, data, batch_id=batch)
    retried = quill.json("spool", "quarantine", "retry", entry["id"])
    assert retried["batch"] == first.batch_id != REUSED
    quill.drain()
    assert _contents(quill) == ["first", "turn one", "turn two"]
    assert quill.json("spool", "quarantine", "list")["entries"] == []


def test_a_refused_retry_can_itself_be_retried(quill, home):
    with Spool(home / "spool") as sp:  # refused: the session does not exist yet
        sp.append(
            "messages.compact",
            {"session_id": "later", "messages": [{"role": "user", "content": "sum"}]},
        )
    quill.drain()
    [entry] = quill.json("spool", "quarantine", "list")["entries"]
    quill.run("spool", "quarantine", "retry", entry["id"])  # still no session: refused again
    quill.drain()
    [again] = quill.json("spool", "quarantine", "list")["entries"]
    assert again["id"] != entry["id"] and again["reason"] == "unknown-session"
    with Spool(home / "spool") as sp:
        sp.append(
            "messages.append",
            {"session_id": "later", "messages": [{"role": "user", "content": "q"}]},
        )
    assert quill.json("spool", "quarantine", "retry", again["id"])["batch"] != again["batch"]
    quill.drain()
    assert quill.json("spool", "quarantine", "list")["entries"] == []
    assert [h["session_id"] for h in quill.json("search", "sum")["hits"]] == ["later"]


def test_put_honours_retry_drop_and_purge_lines_of_the_audit(tmp_path):
    q = Quarantine(tmp_path)
    rec = {"op": "messages.append", "batch": "b1"}
    raw = b'{"op":"messages.append","batch":"b1"}\n'
    assert q.put(Position(1, 0), "invalid-field", "x", raw, rec) is not None
    q.resolve("1:0", "drop", "user:t")
    assert q.put(Position(1, 0), "invalid-field", "x", raw, rec) is None  # a writer re-reading it
    assert q.count() == 0
    # another line at that position (other bytes) is a different record: quarantined
    assert q.put(
        Position(1, 0), "invalid-field", "x", raw.replace(b"b1", b"b2"), {**rec, "batch": "b2"}
    )
    # a purge keeps only op and batch: matched by position and batch
    gone = b'{"v":1,"op":"messages.append","batch":"b3","data":{"session_id":"gone"}}\n'
    assert q.put(Position(2, 0), "invalid-field", "x", gone, {"batch": "b3"}) is not None
    assert q.purge(lambda r, pos: r.get("data", {}).get("session_id") == "gone", actor="t") == [
        "2:0"
    ]
    assert q.put(Position(2, 0), "invalid-field", "x", gone, {"batch": "b3"}) is None
    # a scratch store's quarantine consults the live audit
    scratch = Quarantine.for_store(tmp_path / "scratch.db").consult(q)
    assert scratch.put(Position(1, 0), "invalid-field", "x", raw, rec) is None
    assert scratch.count() == 0


def test_a_damaged_entry_file_is_listed_shown_and_dropped(quill, home):
    """An entry file damaged on disk (cut short) is listed and shown as ``entry-unreadable``
    with why, at the position its name holds; a retry says it holds no op and changes
    nothing; a drop takes it out. Old code: every listing (the CLI, status, the dashboard,
    ``push --wait``) failed with a JSONDecodeError traceback."""
    entry = _quarantine_a_reused_batch(quill, home)
    [path] = (home / "spool" / "quarantine").glob("*.json")
    path.write_bytes(path.read_bytes()[:25])
    [listed] = quill.json("spool", "quarantine", "list")["entries"]
    assert (listed["id"], listed["reason"]) == (entry["id"], "entry-unreadable")
    assert "JSONDecodeError" in listed["detail"]
    assert quill.status()["spool"]["quarantined"] == 1
    shown = quill.run("spool", "quarantine", "show", entry["id"]).stdout
    assert "entry-unreadable" in shown
    retried = quill.run("spool", "quarantine", "retry", entry["id"], check=False)
    assert retried.returncode != 0 and "damaged" in retried.stderr + retried.stdout
    assert path.exists()
    quill.run("spool", "quarantine", "drop", entry["id"])
    assert quill.json("spool", "quarantine", "list")["entries"] == []
    [line] = Quarantine(home / "spool").audit()
    assert line["action"] == "drop" and line["entry"]["reason"] == "entry-unreadable"

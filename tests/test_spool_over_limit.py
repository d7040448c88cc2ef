"""A spool line over ``[spool] max_record_bytes``, written by a producer that did not enforce
the limit (a foreign or older one), is never read whole by any reader of spool lines: the
writer quarantines it as ``over-limit`` with its bytes kept beside the entry, applies the
lines after it, and proves its cursor after it across restarts and limit changes; verify
lists it apart from loss; the status and import readers stream past it."""

from __future__ import annotations

import json
import tracemalloc

from harness import InProcessWriter

from quill.home import load
from quill.ops.purge.pending import _lines
from quill.ops.recover.replay import verify
from quill.ops.transfer.pending_deletes import pending_deletes_from
from quill.spool import Quarantine, Spool, SpoolReader, cursor_proof
from quill.spool.segments import START, segment_name
from quill.store.sqlite.connection import open_reader

LIMIT = 64 * 1024


def _foreign(spool_dir, session: str, size: int) -> None:
    """Append a valid record of about ``size`` bytes as a producer with no limit would."""
    with Spool(spool_dir, max_record_bytes=512 << 20) as sp:
        sp.append(
            "messages.append",
            {"session_id": session, "messages": [{"role": "user", "content": "z" * size}]},
        )


def _texts(cfg, session: str) -> list[str]:
    conn = open_reader(cfg.state_db)
    try:
        rows = conn.execute(
            "SELECT quill_text(content) FROM messages WHERE session_id = ? ORDER BY id", (session,)
        )
        return [r[0] for r in rows]
    finally:
        conn.close()


def test_reader_streams_past_an_over_limit_line_in_bounded_memory(tmp_path):
    spool_dir = tmp_path / "spool"
    with Spool(spool_dir) as sp:
        sp.append("session.create", {"session_id": "a"})
    _foreign(spool_dir, "a", 48 << 20)
    with Spool(spool_dir) as sp:
        sp.append("session.end", {"session_id": "a"})
    size = (spool_dir / segment_name(1)).stat().st_size
    reader = SpoolReader(spool_dir, max_line=1 << 20)
    tracemalloc.start()
    try:
        entries = list(reader.read(START, max_bytes=1 << 40))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [e.record and e.record["op"] for e in entries] == ["session.create", None, "session.end"]
    over = entries[1]
    assert over.damage.reason == "over-limit" and over.over is not None
    assert over.size > 48 << 20 and over.next.offset == over.position.offset + over.size
    assert entries[2].next.offset == size
    # The whole line would be 48 MiB; one read block and the head are all that is held.
    assert peak < 8 << 20, f"peak {peak} bytes while reading past a 48 MiB line"
    # Its proof is the digest of all its bytes, as if it had been read whole.
    whole = SpoolReader(spool_dir, max_line=512 << 20)
    assert cursor_proof.proof(over) == cursor_proof.proof(
        type(over)(over.position, over.next, _bytes(spool_dir, over), None, over.damage)
    )
    assert next(iter(whole.read(over.position, max_bytes=1))).record is not None


def _bytes(spool_dir, entry) -> bytes:
    with open(spool_dir / segment_name(entry.position.segment), "rb") as f:
        f.seek(entry.position.offset)
        return f.read(entry.size)


def test_writer_quarantines_an_over_limit_line_and_applies_the_rest(tmp_path):
    w = InProcessWriter(tmp_path / "home", spool={"max_record_bytes": LIMIT})
    try:
        w.say("s", "before")
        _foreign(w.cfg.spool_dir, "s", 4 * LIMIT)
        w.until_idle()  # the over-limit line is the last one the store applied: its proof
        w.restart()  # is checked at the restart
        w.say("s", "after")
        w.until_idle()
        assert _texts(w.cfg, "s") == ["before", "after"]
        q = Quarantine(w.cfg.spool_dir)
        [entry] = list(q.entries())
        assert entry["reason"] == "over-limit" and entry["raw_bytes"] > 4 * LIMIT
        assert entry["op"] == "messages.append" and isinstance(entry["batch"], str)
        assert len(entry["raw"]) < entry["raw_bytes"]
        kept = (q.dir / entry["raw_file"]).read_bytes()
        assert len(kept) == entry["raw_bytes"] and kept.endswith(b'"}\n')
        pos = entry["position"].split(":")
        with open(w.cfg.spool_dir / segment_name(int(pos[0])), "rb") as f:
            f.seek(int(pos[1]))
            assert f.read(len(kept)) == kept  # nothing lost: the exact line
        assert w.events("writer.quarantined")[0]["reason"] == "over-limit"
        assert not w.events("writer.cursor_mismatch")
    finally:
        w.close()


def test_cursor_after_an_over_limit_line_is_proved_under_any_limit(tmp_path):
    """The store's proof of the line before its cursor takes the raw form under one limit
    and the record form under another: a limit raised or lowered is not another spool."""
    spool_dir = tmp_path / "spool"
    _foreign(spool_dir, "a", 4 * LIMIT)
    small = next(iter(SpoolReader(spool_dir, max_line=LIMIT).read(START, max_bytes=1)))
    large = next(iter(SpoolReader(spool_dir, max_line=1 << 20).read(START, max_bytes=1)))
    assert small.over is not None and large.record is not None
    cursor, offset = small.next, small.position.offset
    for proof in (cursor_proof.proof(small), cursor_proof.proof(large)):
        for limit in (LIMIT, 1 << 20):
            assert cursor_proof.check(spool_dir, cursor, offset, proof, max_line=limit) is None
    wrong = cursor_proof.proof(large).replace("0", "1").replace("a", "0")
    assert "another spool" in cursor_proof.check(spool_dir, cursor, offset, wrong, max_line=LIMIT)


def test_verify_lists_an_over_limit_line_apart_from_loss(tmp_path):
    spool_dir = tmp_path / "spool"
    with Spool(spool_dir) as sp:
        sp.append("session.create", {"session_id": "a"})
    _foreign(spool_dir, "a", 4 * LIMIT)
    with Spool(spool_dir) as sp:
        sp.append("session.end", {"session_id": "a"})
    found = verify(spool_dir, max_line=LIMIT)
    assert found["verdict"] == "intact" and not found["lost"], found
    assert [o["reason"] for o in found["over_limit"]] == ["over-limit"]
    assert found["records"] == 3 and found["missing_records"] == 0


def test_status_and_import_readers_stream_past_an_over_limit_line(tmp_path):
    """The pending-purge check (status) and the pending-delete scan (import) read a line at a
    time: the line over the default limit comes back as its head."""
    cfg_home = tmp_path / "home"
    cfg_home.mkdir()
    cfg = load(cfg_home)
    cfg.ensure_dirs()
    big = cfg.max_record_bytes + 1024
    _foreign(cfg.spool_dir, "a", big)
    with Spool(cfg.spool_dir) as sp:
        sp.append("sessions.delete", {"session_ids": ["a"], "reason": "test"})
    lines = list(_lines(cfg.spool_dir))
    assert len(lines) == 2 and len(lines[0][1]) < big and json.loads(lines[1][1])["op"]
    assert pending_deletes_from(cfg.spool_dir, None).certain == {"a"}

"""Purge and torn writes: a producer killed mid-append leaves a prefix of its record
(``spool.torn``); when it belongs to a purged session it holds that session's text."""

from __future__ import annotations

from purge_helpers import PurgeHome, files_holding


def test_a_torn_write_of_a_purged_session_is_purged_too(tmp_path):
    """A producer killed mid-append leaves a prefix of its record: a torn write (spool.torn),
    never acknowledged but holding the session's text. The purge could not read it (not JSON)
    and left it, reported as "too damaged"; its prefix names the session, so it is purged like
    the session's records; a prefix cut before any session id holds no content and is skipped."""
    from quill.spool import Quarantine
    from quill.spool.segments import segment_name

    h = PurgeHome(tmp_path / "home")
    h.append("session.create", {"session_id": "x", "source": "cli"})
    h.say("a", "a1")
    with open(h.spool_dir / segment_name(1), "ab") as f:  # a producer killed mid-write, twice
        f.write(
            b'{"v":1,"op":"messages.append","batch":"t1","producer":"h:1:x","seq":1,"ts":1.0,'
            b'"data":{"session_id":"x","messages":[{"role":"user","content":"WORD-x-torn sec'
        )
    PurgeHome(h.root).say("a", "a2")  # the next producer terminates the torn tail
    with open(h.spool_dir / segment_name(1), "ab") as f:
        f.write(b'{"v":1,"op":"messages.append","batch":"t2","produ')
    PurgeHome(h.root).say("a", "a3")
    h.append("sessions.delete", {"session_ids": ["x"], "purge": True, "reason": "user_request"})
    h.drain()
    assert files_holding(h.root, b"WORD-x-torn", live=False)  # in the segment and the quarantine
    figures = h.purge("x")
    assert figures["damaged"] == [], figures
    assert files_holding(h.root, b"WORD-x-torn") == []
    assert [e["reason"] for e in Quarantine(h.spool_dir).entries()] == [
        "torn-write"
    ]  # t2 kept: no content

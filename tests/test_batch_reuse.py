"""A batch id is applied once: a retry (same op and data) is a duplicate, but the same id
carrying other content is not a retry — it is quarantined as ``batch-id-reused`` and its
producer is told so, never "applied" while the content is dropped (found by a new user
building ids like ``turn-1`` per run). Both backends; the client and the CLI."""

from __future__ import annotations

from semantics_helpers import Store, user

from quill import Client


def test_a_retry_is_a_duplicate_and_a_reused_id_with_other_content_is_quarantined(
    tmp_path, backend
):
    s = Store(tmp_path, backend)
    try:
        s.spool.append(
            "messages.append", {"session_id": "dup", "messages": [user("once")]}, batch_id="fixed-1"
        )
        # the retry sends the same data with its keys in another order: still the same content
        s.spool.append(
            "messages.append",
            {"messages": [{"content": "once", "role": "user"}], "session_id": "dup"},
            batch_id="fixed-1",
        )
        s.spool.append(
            "messages.append",
            {"session_id": "other", "messages": [user("lostmessage")]},
            batch_id="fixed-1",
        )
        assert s.drain() == ["batch-id-reused"]
        assert (
            s.last_result.applied == 1
            and s.last_result.duplicates == 1
            and s.last_result.rejected == 1
        )
        with s.reader() as r:
            assert [m["content"] for m in r.get_messages("dup")] == ["once"]
            assert r.search("lostmessage") == []
        # a replay of the whole spool decides the same way
        again = s.replay()
        assert again.applied == 0 and again.duplicates == 2 and again.rejected == 1
    finally:
        s.close()


def test_the_client_is_told_quarantined_for_a_reused_id(quill, home):
    q = Client(home)
    first = q.append("dup", [{"role": "user", "content": "once"}], batch_id="fixed-1")
    retry = q.append("dup", [{"role": "user", "content": "once"}], batch_id="fixed-1")
    reused = q.append("other", [{"role": "user", "content": "lostmessage"}], batch_id="fixed-1")
    ran = quill.run("run", "--until-idle", "--timeout", "120", check=False)
    assert ran.returncode == 1 and "batch-id-reused: 1" in ran.stderr  # a batch quarantined
    outcomes = q.wait_all([first, retry, reused], timeout=30)
    assert [o.status for o in outcomes] == ["applied", "applied", "quarantined"]
    assert outcomes[2].reason == "batch-id-reused"
    entries = quill.json("spool", "quarantine", "list")["entries"]
    assert [e["reason"] for e in entries] == ["batch-id-reused"]
    assert [m["content"] for m in q.messages("dup")] == ["once"]

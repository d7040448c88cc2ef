"""A revision of a pruned or purged message (``messages.append`` with ``revise: true`` after a
``sessions.delete`` of its session, the prune job's or ``quill sessions delete --purge``'s),
on both backends: an op decided on a view of the store from before the delete — it carries
``deletions_seen`` lower than the session's deletions, as every import's op does — is
applied as nothing (``store.apply.deletes.stale``): no session, no row, no usage, no search
hit, whether applied alone or in a bulk run of appends; an op decided after it (an import of
the file again, ``deletions_seen`` = the deletions) brings the session back, as documented;
an op without the field is applied as ever (a late append re-creates the session)."""

from __future__ import annotations

import time

import pytest
from semantics_helpers import assistant, call, store, user  # noqa: F401 (store: fixture)

from quill.jobs.prune import auto_prune

SID = "s-gone"
DAY = 86400.0


def _held(store) -> None:
    assert store.apply("session.create", {"session_id": SID, "source": "cli"}) == []
    first = [
        user("the launch code is wombat", id="u1", timestamp=1_700_000_000),
        assistant(None, id="a1", tool_calls=[call("c1")], timestamp=1_700_000_001),
    ]
    data = {"session_id": SID, "messages": first, "revise": True, "deletions_seen": 0}
    assert store.apply("messages.append", data) == []


def _prune(store) -> None:
    """The real auto_prune: close (pass 1), then delete once the end is past retention."""
    idle = time.time() + 2 * DAY  # arrivals count as activity: a day and more after them
    store.job(auto_prune, stale_after_s=DAY, retention_s=DAY, sources=["cli"], now=idle)
    later = time.time() + 3 * DAY
    assert (
        store.job(auto_prune, retention_s=DAY, sources=["cli"], now=later)["sessions_deleted"] == 1
    )


def _purge_delete(store) -> None:
    """The store half of ``quill sessions delete ID --purge`` (the spool half is
    tests/test_purge_revise.py's)."""
    data = {"session_ids": [SID], "reason": "user_request", "actor": "user:t", "purge": True}
    assert store.apply("sessions.delete", data) == []


def _revision(seen: int | None, text: str = "the launch code is still wombat") -> dict:
    msgs = [
        user(text, id="u1", timestamp=1_700_000_000),
        assistant("done", id="a1", tool_calls=[call("c1")], usage={"prompt_tokens": 5,
                  "completion_tokens": 1}, response_id="r-1", timestamp=1_700_000_002),
    ]  # fmt: skip
    data = {"session_id": SID, "messages": msgs, "revise": True}
    if seen is not None:
        data["deletions_seen"] = seen
    return data


def _nothing_of_it(store) -> None:
    for table, col in (("sessions", "id"), ("messages", "session_id"), ("usage", "session_id")):
        n = store.conn.execute(f"SELECT count(*) FROM {table} WHERE {col} = ?", (SID,))
        assert n.fetchone()[0] == 0, table
    store.index()
    with store.reader() as r:
        assert r.search("wombat", projection="audit") == []
        assert r.deletions(SID) == 1


@pytest.mark.parametrize("delete", [_prune, _purge_delete], ids=["pruned", "purged"])
@pytest.mark.parametrize("bulk", [False, True], ids=["alone", "in-a-run"])
def test_a_revision_decided_before_the_delete_brings_nothing_back(store, delete, bulk):
    _held(store)
    delete(store)
    if bulk:  # between plain appends of another session: the writer's bulk path
        for data in (
            {"session_id": "other", "messages": [user("one", id="o1")]},
            _revision(0),
            {"session_id": "other", "messages": [user("two", id="o2")]},
        ):
            store.spool.append("messages.append", data)
        assert store.drain() == []
        assert store.ids("other") and len(store.ids("other")) == 2
    else:
        assert store.apply("messages.append", _revision(0)) == []
        create = {"session_id": SID, "title": "launch", "revise": True, "deletions_seen": 0}
        assert store.apply("session.create", create) == []
        usage = {"session_id": SID, "response_id": "r-2", "deletions_seen": 0,
                 "usage": {"prompt_tokens": 1, "completion_tokens": 1}}  # fmt: skip
        assert store.apply("usage.record", usage) == []
    _nothing_of_it(store)


def test_an_import_after_the_delete_brings_the_session_back(store):
    """The documented re-import of a deleted session (docs/operations.md): its ops carry the
    deletions they saw, so they apply."""
    _held(store)
    _purge_delete(store)
    assert store.apply("messages.append", _revision(1)) == []
    assert store.apply("messages.append", _revision(0, "a stale copy")) == []  # still fenced
    rows = store.conn.execute(
        "SELECT ext_id, quill_text(content) FROM messages WHERE session_id = ? ORDER BY seq",
        (SID,),
    ).fetchall()
    assert [tuple(r) for r in rows] == [("u1", "the launch code is still wombat"), ("a1", "done")]


def test_without_the_field_a_late_revision_recreates_the_session_as_before(store):
    """Producers that do not send ``deletions_seen`` (and spools written before it): the op
    is applied as ever, so a store rebuilt from an old spool equals the store it built."""
    _held(store)
    _purge_delete(store)
    assert store.apply("messages.append", _revision(None)) == []
    assert len(store.ids(SID)) == 2


@pytest.mark.parametrize("bad", [-1, True, "0", 1.5])
def test_a_malformed_deletions_seen_is_refused(store, bad):
    data = {**_revision(None), "deletions_seen": bad}
    assert store.apply("messages.append", data) == ["invalid-field"]


def _restore(seen: int) -> dict:
    rows = [{"message": user(t, id=f"r{i}"), "state": "live"} for i, t in enumerate(("x", "y"))]
    return {"session_id": SID, "offset": 0, "rows": rows, "deletions_seen": seen}


def test_a_restore_decided_before_the_delete_restores_nothing_and_one_after_it_applies(store):
    """``messages.restore`` (an export imported again, ops/transfer/export_reimport.py) follows
    the same rule as every op naming one session: stale → applied as nothing, no placeholder;
    decided after the delete → the rows come back."""
    _held(store)
    _purge_delete(store)
    assert store.apply("messages.restore", _restore(0)) == []
    assert store.conn.execute("SELECT count(*) FROM sessions").fetchone()[0] == 0
    assert store.apply("messages.restore", _restore(1)) == []
    rows = store.conn.execute(
        "SELECT ext_id, quill_text(content) FROM messages WHERE session_id = ? ORDER BY seq",
        (SID,),
    ).fetchall()
    assert [tuple(r) for r in rows] == [("r0", "x"), ("r1", "y")]

"""Retention job rules on real stores: delete-empty, auto-prune's two windows,
the orphan sweep, and what happens to children. Time is passed in (``now``), never mocked."""

from __future__ import annotations

import multiprocessing
import socket
import time

import psutil
import pytest
from semantics_helpers import Store

from quill.jobs.prune import DAY, auto_prune, delete_empty, orphan_sweep


@pytest.fixture
def store(tmp_path, backend):
    s = Store(tmp_path, backend)
    yield s
    s.close()


def _session(store, sid, source="cron", n=2, **extra):
    assert store.apply("session.create", {"session_id": sid, "source": source, **extra}) == []
    if n:
        msgs = [
            {"role": "user" if i % 2 == 0 else "assistant", "content": f"{sid} {i}"}
            for i in range(n)
        ]
        assert store.apply("messages.append", {"session_id": sid, "messages": msgs}) == []


def _end(store, *sids):
    """End sessions now: ``delete_empty`` only ever takes ended ones."""
    for sid in sids:
        assert store.apply("session.end", {"session_id": sid, "reason": "user_exit"}) == []


def _sessions(store):
    return {
        r[0]: r[1:]
        for r in store.conn.execute("SELECT id, ended_at, end_reason, parent_id FROM sessions")
    }


def test_a_session_whose_rows_are_all_rewound_survives_delete_empty(store):
    _session(store, "rewound", n=2)
    assert store.apply("messages.rewind", {"session_id": "rewound", "user_turn": 1}) == []
    assert store.ids("rewound", state="live") == []
    _session(store, "really-empty", n=0)
    _end(store, "rewound", "really-empty")
    later = time.time() + 2 * DAY
    figures = store.job(delete_empty, now=later)
    assert figures["sessions_deleted"] == 1
    assert set(_sessions(store)) == {"rewound"}


def test_delete_empty_leaves_young_sessions_alone(store):
    _session(store, "just-created", n=0)
    assert store.job(delete_empty)["sessions_deleted"] == 0


def test_a_stale_open_cron_session_is_closed_first_then_deleted_later(store):
    _session(store, "cron-1", source="cron")
    _session(store, "cli-live", source="cli")
    _session(store, "import", source="claude-code")  # not an automatic source: never auto-closed
    day2 = time.time() + 2 * DAY
    first = store.job(auto_prune, stale_after_s=DAY, retention_s=30 * DAY, now=day2)
    assert first["sessions_closed"] == 2 and first["sessions_deleted"] == 0
    state = _sessions(store)
    assert state["cron-1"][1] == "stale_sweep" and state["import"][0] is None
    day40 = day2 + 38 * DAY
    second = store.job(auto_prune, stale_after_s=DAY, retention_s=30 * DAY, now=day40)
    assert second["sessions_deleted"] == 2 and second["messages_deleted"] == 4
    assert set(_sessions(store)) == {"import"}
    with store.reader() as r:  # the deleted rows are gone from search too
        assert r.search("cron") == [] and r.search("import")


def _age(store, sid, seconds):
    """Make a session and its rows look ``seconds`` old (as if written then)."""
    then = time.time() - seconds
    store.conn.execute(
        "UPDATE sessions SET started_at = ?, created_at = ? WHERE id = ?", (then, then, sid)
    )
    store.conn.execute(
        "UPDATE messages SET ts = ?, arrived_at = ? WHERE session_id = ?", (then, then, sid)
    )


def test_stale_needs_both_an_old_start_and_an_old_newest_message(store):
    _session(store, "busy", source="cron")
    _session(store, "idle", source="cron")
    _age(store, "busy", 3 * DAY)
    _age(store, "idle", 3 * DAY)
    store.apply(
        "messages.append",
        {"session_id": "busy", "messages": [{"role": "user", "content": "still here"}]},
    )
    figures = store.job(auto_prune, stale_after_s=DAY)
    assert figures["sessions_closed"] == 1
    state = _sessions(store)
    assert state["busy"][0] is None and state["idle"][1] == "stale_sweep"


def test_pinned_and_archived_sessions_survive_prune(store):
    for sid in ("pinned", "archived", "plain"):
        _session(store, sid, source="cron")
        store.apply("session.end", {"session_id": sid, "reason": "user_exit"})
    store.apply("session.flags", {"session_id": "pinned", "pinned": True})
    store.apply("session.flags", {"session_id": "archived", "archived": True})
    far = time.time() + 400 * DAY
    figures = store.job(auto_prune, retention_s=30 * DAY, now=far)
    assert figures["sessions_deleted"] == 1
    assert set(_sessions(store)) == {"pinned", "archived"}
    assert store.job(delete_empty, now=far)["sessions_deleted"] == 0


def test_children_are_detached_but_delegates_go_with_their_parent(store):
    _session(store, "parent", source="cron")
    _session(store, "branch", source="claude-code", parent_id="parent", parent_kind="branch")
    _session(store, "delegate", source="subagent", parent_id="parent", parent_kind="delegate")
    store.apply("session.end", {"session_id": "parent", "reason": "user_exit"})
    store.apply("session.end", {"session_id": "delegate", "reason": "delegate_done"})
    figures = store.job(auto_prune, retention_s=30 * DAY, now=time.time() + 60 * DAY)
    # the parent is named; its delegate (ended and inactive too) goes with it, and is counted
    assert figures["sessions_deleted"] == 2 and figures["messages_deleted"] == 4
    state = _sessions(store)
    assert "parent" not in state and "delegate" not in state
    assert state["branch"][2] is None  # detached, not deleted


def _ended_long_ago(store, sid, days, source="cron", **extra):
    """A session of ``source`` whose start, rows and end are all ``days`` old."""
    _session(store, sid, source=source, **extra)
    _age(store, sid, days * DAY)
    assert (
        store.apply(
            "session.end",
            {"session_id": sid, "reason": "user_exit", "ended_at": time.time() - days * DAY},
        )
        == []
    )


def test_retention_keeps_an_active_delegate_child_of_an_expired_parent(store):
    """The delete of an old ended parent spares its still-running delegate, and the figures
    count every row deleted."""
    _ended_long_ago(store, "old-parent", 40)
    _session(
        store,
        "busy-delegate",
        source="subagent",
        n=3,
        parent_id="old-parent",
        parent_kind="delegate",
    )
    _session(
        store,
        "done-delegate",
        source="subagent",
        n=3,
        parent_id="old-parent",
        parent_kind="delegate",
    )
    _age(store, "done-delegate", 40 * DAY)
    store.apply(
        "session.end",
        {
            "session_id": "done-delegate",
            "reason": "delegate_done",
            "ended_at": time.time() - 40 * DAY,
        },
    )
    figures = store.job(auto_prune, retention_s=30 * DAY, stale_after_s=90 * DAY)
    state = _sessions(store)
    assert "old-parent" not in state and "done-delegate" not in state
    assert state["busy-delegate"] == (None, None, None)  # kept, open, detached from the gone parent
    assert len(store.ids("busy-delegate")) == 3
    assert figures["sessions_deleted"] == 2 and figures["messages_deleted"] == 2 + 3


def test_delete_empty_keeps_a_delegate_child_that_has_messages(store):
    _session(store, "empty-parent", n=0)
    _session(
        store,
        "working-child",
        source="subagent",
        n=2,
        parent_id="empty-parent",
        parent_kind="delegate",
    )
    _session(
        store,
        "empty-child",
        source="subagent",
        n=0,
        parent_id="empty-parent",
        parent_kind="delegate",
    )
    _end(store, "empty-parent", "empty-child")
    figures = store.job(delete_empty, now=time.time() + 2 * DAY)
    state = _sessions(store)
    assert set(state) == {"working-child"} and state["working-child"][2] is None
    assert len(store.ids("working-child")) == 2
    assert figures["sessions_deleted"] == 2


def test_auto_prune_never_deletes_or_closes_a_session_of_another_source(store):
    """Retention deletes ended sessions of the configured ``sources`` only."""
    _ended_long_ago(store, "imported", 40, source="claude-code")
    _ended_long_ago(store, "cron-old", 40, source="cron")
    _session(store, "imported-open", source="claude-code")
    _age(store, "imported-open", 40 * DAY)
    figures = store.job(auto_prune, retention_s=30 * DAY, stale_after_s=DAY, sources=["cron"])
    assert (
        figures["sessions_deleted"] == 1
        and figures["messages_deleted"] == 2
        and figures["sessions_closed"] == 0
    )
    state = _sessions(store)
    assert set(state) == {"imported", "imported-open"} and state["imported-open"][0] is None


def test_delete_empty_and_orphan_sweep_take_only_the_configured_sources(store):
    _session(store, "empty-import", source="claude-code", n=0)
    _session(store, "empty-cron", source="cron", n=0)
    _end(store, "empty-import", "empty-cron")
    assert (
        store.job(delete_empty, now=time.time() + 2 * DAY, sources=["cron"])["sessions_deleted"]
        == 1
    )
    child = multiprocessing.Process(target=_exit_now)
    child.start()
    dead = {
        "host": socket.gethostname(),
        "pid": child.pid,
        "create_time": psutil.Process(child.pid).create_time(),
    }
    child.join()
    _session(store, "orphan-import", source="claude-code", owner=dead)
    _session(store, "orphan-cli", source="cli", owner=dead)
    assert store.job(orphan_sweep, sources=["cli"])["sessions_closed"] == 1
    state = _sessions(store)
    assert set(state) == {"empty-import", "orphan-import", "orphan-cli"}
    assert state["orphan-import"][1] is None and state["orphan-cli"][1] == "orphan_sweep"


def test_the_writer_rechecks_the_source_a_prune_decided_on(store):
    """A placeholder made by ``usage.record`` carries that op's source; the ``session.create``
    that completes it (already in the spool when the job decides) gives the real source. The
    ops the job appends must then be skipped: their ``only_if`` names the sources."""
    usage = {"input_tokens": 1, "output_tokens": 1}
    for sid in ("ended-placeholder", "open-placeholder"):
        assert (
            store.apply("usage.record", {"session_id": sid, "source": "cron", "usage": usage}) == []
        )
    assert (
        store.apply("session.end", {"session_id": "ended-placeholder", "reason": "user_exit"}) == []
    )
    for sid in (
        "ended-placeholder",
        "open-placeholder",
    ):  # pending: not applied when the job decides
        store.spool.append("session.create", {"session_id": sid, "source": "claude-code"})
    far = time.time() + 60 * DAY
    figures = auto_prune(
        store.conn, store.spool, stale_after_s=DAY, retention_s=30 * DAY, sources=["cron"], now=far
    )
    assert (
        figures["sessions_deleted"] == 1 and figures["sessions_closed"] == 1
    )  # decided on the placeholders
    assert store.drain() == []
    state = _sessions(store)
    assert set(state) == {"ended-placeholder", "open-placeholder"}
    assert state["open-placeholder"][0] is None


def _exit_now() -> None:
    pass


def test_orphan_sweep_closes_dead_owners_and_never_a_live_one(store):
    me = psutil.Process()
    host = socket.gethostname()
    child = multiprocessing.Process(target=_exit_now)
    child.start()
    dead = {"host": host, "pid": child.pid, "create_time": psutil.Process(child.pid).create_time()}
    child.join()
    _session(
        store,
        "live",
        source="cli",
        owner={"host": host, "pid": me.pid, "create_time": me.create_time()},
    )
    _session(store, "dead", source="cli", owner=dead)
    _session(
        store,
        "recycled",
        source="cli",
        owner={"host": host, "pid": me.pid, "create_time": me.create_time() - 100},
    )
    _session(
        store, "other-host", source="cli", owner={"host": "elsewhere", "pid": 1, "create_time": 0.0}
    )
    figures = store.job(orphan_sweep)
    assert figures == {"checked": 3, "sessions_closed": 2, "other_boot": 0}
    state = _sessions(store)
    assert state["live"][1] is None and state["other-host"][1] is None
    assert state["dead"][1] == state["recycled"][1] == "orphan_sweep"
    # an automatic end reason: the owner appending again reopens the session
    store.apply(
        "messages.append", {"session_id": "dead", "messages": [{"role": "user", "content": "back"}]}
    )
    assert _sessions(store)["dead"][0] is None

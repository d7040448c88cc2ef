"""Retention job rules on real stores (issue 6): delete-empty, auto-prune's two windows,
the orphan sweep, and what happens to children. Time is passed in (``now``), never mocked."""
from __future__ import annotations

import multiprocessing
import socket
import time

import psutil
import pytest

from quill.jobs.prune import DAY, auto_prune, delete_empty, orphan_sweep

from semantics_helpers import Store


@pytest.fixture
def store(tmp_path, backend):
    s = Store(tmp_path, backend)
    yield s
    s.close()


def _session(store, sid, source="cron", n=2, **extra):
    assert store.apply("session.create", {"session_id": sid, "source": source, **extra}) == []
    if n:
        msgs = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"{sid} {i}"} for i in range(n)]
        assert store.apply("messages.append", {"session_id": sid, "messages": msgs}) == []


def _sessions(store):
    return {r[0]: r[1:] for r in store.conn.execute("SELECT id, ended_at, end_reason, parent_id FROM sessions")}


def test_a_session_whose_rows_are_all_rewound_survives_delete_empty(store):
    _session(store, "rewound", n=2)
    assert store.apply("messages.rewind", {"session_id": "rewound", "user_turn": 1}) == []
    assert store.ids("rewound", state="live") == []
    _session(store, "really-empty", n=0)
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
    store.conn.execute("UPDATE sessions SET started_at = ?, created_at = ? WHERE id = ?", (then, then, sid))
    store.conn.execute("UPDATE messages SET ts = ?, arrived_at = ? WHERE session_id = ?", (then, then, sid))


def test_stale_needs_both_an_old_start_and_an_old_newest_message(store):
    _session(store, "busy", source="cron")
    _session(store, "idle", source="cron")
    _age(store, "busy", 3 * DAY)
    _age(store, "idle", 3 * DAY)
    store.apply("messages.append", {"session_id": "busy", "messages": [{"role": "user", "content": "still here"}]})
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
    figures = store.job(auto_prune, retention_s=30 * DAY, now=time.time() + 60 * DAY)
    assert figures["sessions_deleted"] == 1  # the parent is named; its delegate goes with it on apply
    state = _sessions(store)
    assert "parent" not in state and "delegate" not in state
    assert state["branch"][2] is None  # detached, not deleted


def _exit_now() -> None:
    pass


def test_orphan_sweep_closes_dead_owners_and_never_a_live_one(store):
    me = psutil.Process()
    host = socket.gethostname()
    child = multiprocessing.Process(target=_exit_now)
    child.start()
    dead = {"host": host, "pid": child.pid, "create_time": psutil.Process(child.pid).create_time()}
    child.join()
    _session(store, "live", source="cli", owner={"host": host, "pid": me.pid, "create_time": me.create_time()})
    _session(store, "dead", source="cli", owner=dead)
    _session(store, "recycled", source="cli", owner={"host": host, "pid": me.pid, "create_time": me.create_time() - 100})
    _session(store, "other-host", source="cli", owner={"host": "elsewhere", "pid": 1, "create_time": 0.0})
    figures = store.job(orphan_sweep)
    assert figures == {"checked": 3, "sessions_closed": 2}
    state = _sessions(store)
    assert state["live"][1] is None and state["other-host"][1] is None
    assert state["dead"][1] == state["recycled"][1] == "orphan_sweep"
    # an automatic end reason: the owner appending again reopens the session
    store.apply("messages.append", {"session_id": "dead", "messages": [{"role": "user", "content": "back"}]})
    assert _sessions(store)["dead"][0] is None

"""Jobs change canonical rows only through spool ops (``sessions.delete``,
``session.end`` with ``only_if``), so replay reproduces what they did. Real spool, real store,
real CLI subprocesses for the end-to-end example."""

from __future__ import annotations

import json
import time

import pytest
from semantics_helpers import Store

from quill.jobs.prune import DAY, auto_prune, delete_empty, orphan_sweep
from quill.spool import START, SpoolReader


@pytest.fixture
def store(tmp_path, backend):
    s = Store(tmp_path, backend)
    yield s
    s.close()


def _records(store, op):
    return [
        e.record
        for e in SpoolReader(store.root / "spool").read(START, max_bytes=1 << 30)
        if e.record and e.record["op"] == op
    ]


def test_prune_then_recover_does_not_bring_the_pruned_chain_back(quill, home):
    """SQLite's snapshot + replay recovery; on PostgreSQL the replay property
    (test_property_rebuild, prune jobs included) covers the same rule."""
    home.mkdir(parents=True)
    (home / "config.toml").write_text("[prune]\nretention_s = 1\n")
    ops = [
        {"op": "session.create", "data": {"session_id": "root", "source": "cli", "title": "root"}},
        {
            "op": "messages.append",
            "data": {
                "session_id": "root",
                "messages": [{"role": "user", "content": "the prunedword in the root"}],
            },
        },
        {"op": "session.end", "data": {"session_id": "root", "reason": "compression"}},
        {
            "op": "session.create",
            "data": {
                "session_id": "tip",
                "source": "cli",
                "parent_id": "root",
                "parent_kind": "compression",
            },
        },
        {
            "op": "messages.append",
            "data": {
                "session_id": "tip",
                "messages": [{"role": "user", "content": "the prunedword in the tip"}],
            },
        },
        {"op": "session.end", "data": {"session_id": "tip", "reason": "user_exit"}},
    ]
    quill.run("push", input="\n".join(json.dumps(o) for o in ops))
    quill.drain()
    assert len(quill.json("search", "prunedword")["hits"]) == 2
    quill.run("snapshot")
    time.sleep(1.5)  # past the 1 s retention
    quill.run("jobs", "run", "auto_prune")
    quill.run("run", "--until-idle", "--timeout", "120")
    assert quill.json("search", "prunedword")["hits"] == []
    for path in home.glob("state.db*"):
        path.unlink()
    quill.run("recover")
    assert quill.json("search", "prunedword")["hits"] == []
    assert quill.json("sessions", "list")["sessions"] == []
    [delete] = [
        json.loads(line)
        for seg in sorted((home / "spool").glob("*.jsonl"))
        for line in seg.read_text().splitlines()
        if '"sessions.delete"' in line
    ]
    assert delete["data"]["reason"] == "retention" and delete["data"]["actor"] == "job:auto_prune"
    assert delete["data"]["session_ids"] == ["root", "tip"]


def test_quill_jobs_run_prunes_only_the_configured_sources(quill, home):
    """Prune sources end to end: with ``[prune] sources = ["cron"]`` an ended claude-code
    session past retention is kept by ``quill jobs run auto_prune``. Every prune job gets
    the configured sources (jobs.catalog params): auto_prune, delete_empty, orphan_sweep."""
    home.mkdir(parents=True)
    (home / "config.toml").write_text(
        '[prune]\nretention_s = 1\nstale_after_s = 1\nsources = ["cron"]\n'
    )
    ops = []
    for sid, source in (("import", "claude-code"), ("nightly", "cron"), ("tool-run", "tool")):
        ops += [
            {"op": "session.create", "data": {"session_id": sid, "source": source}},
            {
                "op": "messages.append",
                "data": {"session_id": sid, "messages": [{"role": "user", "content": sid}]},
            },
            {"op": "session.end", "data": {"session_id": sid, "reason": "user_exit"}},
        ]
    ops += [
        {"op": "session.create", "data": {"session_id": "open-import", "source": "claude-code"}},
        {
            "op": "messages.append",
            "data": {
                "session_id": "open-import",
                "messages": [{"role": "user", "content": "still going"}],
            },
        },
    ]
    quill.run("push", input="\n".join(json.dumps(o) for o in ops))
    quill.drain()
    time.sleep(1.5)  # past the 1 s windows
    for job in ("auto_prune", "delete_empty", "orphan_sweep"):
        quill.run("jobs", "run", job)
    quill.run("run", "--until-idle", "--timeout", "120")
    listed = {s["id"]: s for s in quill.json("sessions", "list")["sessions"]}
    assert set(listed) == {"import", "tool-run", "open-import"}
    assert listed["open-import"]["ended_at"] is None


def test_a_delete_decided_before_newer_records_spares_a_session_that_came_back(store):
    store.apply("session.create", {"session_id": "old", "source": "cron"})
    store.apply(
        "messages.append", {"session_id": "old", "messages": [{"role": "user", "content": "hi"}]}
    )
    store.apply("session.end", {"session_id": "old", "reason": "agent_close"})
    later = time.time() + 40 * DAY
    # A producer has appended (not yet applied) when the job decides at the writer's cursor:
    store.spool.append(
        "messages.append",
        {"session_id": "old", "messages": [{"role": "user", "content": "back"}], "source": "cron"},
    )
    figures = auto_prune(store.conn, store.spool, retention_s=30 * DAY, now=later)
    assert figures["sessions_deleted"] == 1
    # The delete's conditions are evaluated at its place in the spool: the append before it
    # reopened the automatic end, so the session is no longer ended and is kept.
    assert store.drain() == []
    assert (
        store.conn.execute("SELECT count(*) FROM messages WHERE session_id = 'old'").fetchone()[0]
        == 2
    )


def test_stale_close_is_skipped_when_the_session_was_active_after_the_decision(store):
    store.apply(
        "session.create", {"session_id": "s", "source": "cron", "started_at": time.time() - 3 * DAY}
    )
    store.spool.append(
        "messages.append", {"session_id": "s", "messages": [{"role": "user", "content": "alive"}]}
    )
    figures = auto_prune(store.conn, store.spool, stale_after_s=DAY, retention_s=90 * DAY)
    assert figures["sessions_closed"] == 1  # decided before the append above was applied
    assert store.drain() == []
    assert store.conn.execute("SELECT ended_at FROM sessions WHERE id = 's'").fetchone()[0] is None
    [end] = _records(store, "session.end")
    assert end["data"]["reason"] == "stale_sweep" and end["data"]["actor"] == "job:auto_prune"


def test_running_a_job_twice_before_the_drain_is_harmless(store):
    for sid in ("a", "b"):
        store.apply("session.create", {"session_id": sid, "source": "cron"})
        store.apply("session.end", {"session_id": sid, "reason": "agent_close"})
    later = time.time() + 2 * DAY
    assert delete_empty(store.conn, store.spool, now=later)["sessions_deleted"] == 2
    assert (
        delete_empty(store.conn, store.spool, now=later)["sessions_deleted"] == 2
    )  # not yet applied
    assert store.drain() == []
    assert store.conn.execute("SELECT count(*) FROM sessions").fetchone()[0] == 0
    assert len(_records(store, "sessions.delete")) == 2
    # 2 creates, 2 ends, 2 deletes: the repeat applied once
    assert store.conn.execute("SELECT count(*) FROM applied_batches").fetchone()[0] == 6


def test_delete_empty_keeps_an_open_session_however_old_and_deletes_an_ended_one(store):
    """The reference deletes only *ended* empty sessions; Quill deleted one still open (a chat
    created before its first message) once the fixed one-day grace passed. The grace now
    counts from the end, and the op's ``ended_before`` re-checks it when applied."""
    for sid in ("open", "ended", "just-ended"):
        store.apply("session.create", {"session_id": sid, "source": "cron"})
    store.apply("session.end", {"session_id": "ended", "reason": "agent_close"})
    later = time.time() + 5 * DAY
    store.apply(
        "session.end", {"session_id": "just-ended", "reason": "agent_close", "ended_at": later}
    )
    assert delete_empty(store.conn, store.spool, now=later + 1)["sessions_deleted"] == 1
    assert store.drain() == []
    left = {r[0] for r in store.conn.execute("SELECT id FROM sessions")}
    assert left == {"open", "just-ended"}
    [op] = _records(store, "sessions.delete")
    assert op["data"]["session_ids"] == ["ended"]
    # decided while ended, reopened by an append before the delete applies: kept
    store.apply("session.end", {"session_id": "open", "reason": "agent_close"})
    assert delete_empty(store.conn, store.spool, now=later + 2 * DAY)["sessions_deleted"] == 2
    store.spool.append(
        "messages.append", {"session_id": "open", "messages": [{"role": "user", "content": "x"}]}
    )
    assert store.drain() == []
    assert {r[0] for r in store.conn.execute("SELECT id FROM sessions")} == {"open"}


def test_message_ids_are_never_reused_after_a_delete_and_new_rows_are_searchable(store):
    """Clients keep message ids (read marks, rewind targets, sync cursors). SQLite gives a new
    row max(id) + 1, so deleting the newest session handed its ids out again (found by a new
    user: a new session got the ids 3668, 3669 of the one just deleted) — and an id at or below
    the index watermark was then never indexed."""
    store.apply("session.create", {"session_id": "keep", "source": "claude-code"})
    store.apply(
        "messages.append",
        {"session_id": "keep", "messages": [{"role": "user", "content": "first"}]},
    )
    store.apply(
        "messages.append",
        {
            "session_id": "gone",
            "messages": [{"role": "user", "content": f"doomed {i}"} for i in range(5)],
        },
    )
    store.index()
    top = store.conn.execute("SELECT max(id) FROM messages").fetchone()[0]
    assert (
        store.apply(
            "sessions.delete",
            {"session_ids": ["gone", "never-existed"], "reason": "user", "actor": "user:test"},
        )
        == []
    )
    store.apply(
        "messages.append",
        {"session_id": "keep", "messages": [{"role": "user", "content": "zebraword"}]},
    )
    new_id = store.conn.execute("SELECT max(id) FROM messages").fetchone()[0]
    assert new_id > top
    # The restore op (export -> import) and a second delete of the newest rows: still rising.
    store.apply(
        "messages.restore",
        {
            "session_id": "back",
            "offset": 0,
            "rows": [{"message": {"role": "user", "content": "restored"}, "state": "live"}],
        },
    )
    restored = store.conn.execute("SELECT max(id) FROM messages").fetchone()[0]
    assert restored > new_id
    store.apply(
        "sessions.delete", {"session_ids": ["back"], "reason": "user", "actor": "user:test"}
    )
    store.apply(
        "messages.append", {"session_id": "keep", "messages": [{"role": "user", "content": "last"}]}
    )
    assert store.conn.execute("SELECT max(id) FROM messages").fetchone()[0] > restored
    store.index()
    with store.reader() as r:
        assert [h["message_id"] for h in r.search("zebraword")] == [new_id]
        assert [h["message_id"] for h in r.search("last")] == [
            restored + 1
        ] or store.kind == "postgres"
        assert r.search("doomed") == []


def test_sessions_delete_refuses_bad_payloads_whole(store):
    assert store.apply("sessions.delete", {"session_ids": []}) == ["invalid-field"]
    assert store.apply("sessions.delete", {"session_ids": ["x"], "only_if": {"nope": 1}}) == [
        "invalid-field"
    ]
    assert store.apply("sessions.delete", {"session_ids": ["x"], "reason": "a" * 65}) == [
        "invalid-field"
    ]


def test_orphan_sweep_close_only_applies_to_the_same_owner(store):
    import multiprocessing
    import socket

    import psutil

    child = multiprocessing.Process(target=time.sleep, args=(0,))
    child.start()
    dead = {
        "host": socket.gethostname(),
        "pid": child.pid,
        "create_time": psutil.Process(child.pid).create_time(),
    }
    child.join()
    store.apply("session.create", {"session_id": "s", "source": "cli", "owner": dead})
    me = psutil.Process()
    # the session is resumed by a new, live owner; the sweep decides before that is applied
    store.spool.append(
        "session.create",
        {
            "session_id": "s",
            "owner": {"host": socket.gethostname(), "pid": me.pid, "create_time": me.create_time()},
        },
    )
    assert orphan_sweep(store.conn, store.spool)["sessions_closed"] == 1
    assert store.drain() == []
    assert store.conn.execute("SELECT ended_at FROM sessions WHERE id = 's'").fetchone()[0] is None


def test_a_deleted_session_takes_its_usage_records_along(store):
    store.apply(
        "messages.append",
        {
            "session_id": "gone",
            "messages": [
                {
                    "role": "assistant",
                    "content": "a",
                    "usage": {"prompt_tokens": 3, "completion_tokens": 1},
                }
            ],
        },
    )
    store.apply(
        "usage.record", {"session_id": "gone", "task": "title", "usage": {"prompt_tokens": 5}}
    )
    store.apply(
        "usage.record", {"session_id": "kept", "task": "title", "usage": {"prompt_tokens": 7}}
    )
    assert store.conn.execute("SELECT count(*) FROM usage").fetchone()[0] == 3
    assert (
        store.apply(
            "sessions.delete", {"session_ids": ["gone"], "reason": "user", "actor": "user:t"}
        )
        == []
    )
    assert store.conn.execute("SELECT session_id FROM usage").fetchall() == [("kept",)]

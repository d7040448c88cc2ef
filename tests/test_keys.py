"""Conversation keys, resume, orphans and deleting on request."""

from __future__ import annotations

import base64
import json

import pytest
from semantics_helpers import Store, assistant, user

from quill.store.apply import blobs


@pytest.fixture
def store(tmp_path, backend):
    s = Store(tmp_path, backend)
    yield s
    s.close()


def _create(store, sid, **kw):
    assert store.apply("session.create", {"session_id": sid, **kw}) == []


def _say(store, sid, text, ts):
    assert (
        store.apply("messages.append", {"session_id": sid, "messages": [user(text, timestamp=ts)]})
        == []
    )


def test_resume_is_the_tip_of_the_newest_chain_never_a_branch_delegate_or_hidden(store):
    _create(store, "root", key="chat:1", source="telegram", started_at=1_700_000_000)
    _say(store, "root", "first", 1_700_000_010)
    _create(store, "cont", parent_id="root", parent_kind="compression", started_at=1_700_000_100)
    _say(store, "cont", "continued", 1_700_000_110)
    # newer, but never what "resume chat:1" means
    _create(
        store,
        "fork",
        key="chat:1",
        parent_id="cont",
        parent_kind="branch",
        started_at=1_700_000_200,
    )
    _say(store, "fork", "a fork", 1_700_000_210)
    _create(
        store,
        "sub",
        key="chat:1",
        parent_id="cont",
        parent_kind="delegate",
        started_at=1_700_000_300,
    )
    _say(store, "sub", "a subagent", 1_700_000_310)
    _create(store, "secret", key="chat:1", started_at=1_700_000_400)
    _say(store, "secret", "hidden one", 1_700_000_410)
    store.apply("session.flags", {"session_id": "secret", "hidden": True})
    with store.reader() as r:
        found = r.resume_target(key="chat:1")
        assert (found["session_id"], found["chain"]) == ("cont", ["root", "cont"])
        assert r.resume_target(key="chat:2") is None
    # a newer conversation on the same key (a /reset) is the one to resume
    _create(
        store,
        "again",
        key="chat:1",
        parent_id="cont",
        parent_kind="reset",
        started_at=1_700_000_500,
    )
    _say(store, "again", "new conversation", 1_700_000_510)
    with store.reader() as r:
        assert r.resume_target(key="chat:1")["session_id"] == "again"


def test_resume_by_working_directory(store):
    _create(store, "a", cwd="/repo", started_at=1_700_000_000)
    _say(store, "a", "old", 1_700_000_001)
    _create(store, "b", cwd="/repo", started_at=1_700_000_100)
    _say(store, "b", "new", 1_700_000_101)
    _create(store, "c", cwd="/other", started_at=1_700_000_200)
    with store.reader() as r:
        assert r.resume_target(cwd="/repo")["session_id"] == "b"


def test_orphans_are_found_on_evidence_and_ambiguity_is_left_alone(store):
    _create(store, "k1", key="chat:1", source="telegram", started_at=1_700_000_000)
    _say(store, "k1", "hello", 1_700_000_050)
    # crashed between routing and create: a row with messages but no key, 10 s later
    _create(store, "o1", source="telegram", started_at=1_700_000_060)
    _say(store, "o1", "are you there", 1_700_000_061)
    # a recorded parent link is evidence on its own
    _create(
        store,
        "o2",
        source="telegram",
        parent_id="k1",
        parent_kind="compression",
        started_at=1_700_000_070,
    )
    _say(store, "o2", "continued", 1_700_000_071)
    # two keyed sessions went quiet just before o3 started: ambiguous
    _create(store, "k2", key="chat:2", source="discord", started_at=1_700_001_000)
    _say(store, "k2", "x", 1_700_001_010)
    _create(store, "k3", key="chat:3", source="discord", started_at=1_700_001_000)
    _say(store, "k3", "y", 1_700_001_020)
    _create(store, "o3", source="discord", started_at=1_700_001_030)
    _say(store, "o3", "who am I", 1_700_001_031)
    # a source that never uses keys has no orphans; an empty keyless row is not one either
    _create(store, "cc", source="claude-code", started_at=1_700_000_065)
    _say(store, "cc", "imported", 1_700_000_066)
    _create(store, "empty", source="telegram", started_at=1_700_000_066)
    with store.reader() as r:
        found = {o["session_id"]: o for o in r.orphans()}
    assert set(found) == {"o1", "o2", "o3"}
    assert (found["o1"]["predecessor"], found["o1"]["key"], found["o1"]["evidence"]) == (
        "k1",
        "chat:1",
        "quiet_sibling",
    )
    assert (found["o2"]["predecessor"], found["o2"]["evidence"]) == ("k1", "parent_link")
    assert found["o3"]["predecessor"] is None and "ambiguous" in found["o3"]["reason"]
    with store.reader() as r:
        assert r.orphans(window_s=5)[0]["reason"].startswith("no keyed telegram session")


def test_cli_resume_orphans_adopt_through_the_spool(quill):
    ops = [
        {
            "op": "session.create",
            "data": {
                "session_id": "k1",
                "key": "chat:1",
                "source": "telegram",
                "cwd": "/srv/bot",
                "started_at": 1_700_000_000,
            },
        },
        {
            "op": "messages.append",
            "data": {"session_id": "k1", "messages": [user("hi", timestamp=1_700_000_050)]},
        },
        {
            "op": "session.create",
            "data": {"session_id": "o1", "source": "telegram", "started_at": 1_700_000_060},
        },
        {
            "op": "messages.append",
            "data": {"session_id": "o1", "messages": [user("hey", timestamp=1_700_000_061)]},
        },
        {
            "op": "session.create",
            "data": {
                "session_id": "k2",
                "key": "chat:2",
                "source": "discord",
                "started_at": 1_700_001_000,
            },
        },
        {
            "op": "messages.append",
            "data": {"session_id": "k2", "messages": [user("x", timestamp=1_700_001_010)]},
        },
        {
            "op": "session.create",
            "data": {
                "session_id": "k3",
                "key": "chat:3",
                "source": "discord",
                "started_at": 1_700_001_000,
            },
        },
        {
            "op": "messages.append",
            "data": {"session_id": "k3", "messages": [user("y", timestamp=1_700_001_020)]},
        },
        {
            "op": "session.create",
            "data": {"session_id": "o3", "source": "discord", "started_at": 1_700_001_030},
        },
        {
            "op": "messages.append",
            "data": {"session_id": "o3", "messages": [user("z", timestamp=1_700_001_031)]},
        },
    ]
    quill.run("push", input="\n".join(json.dumps(o) for o in ops))
    quill.drain()
    # before adoption the lookup for the chat silently returns the older keyed sibling
    assert quill.run("sessions", "resume", "--key", "chat:1").stdout.strip() == "k1"
    assert quill.json("sessions", "resume", "--cwd", "/srv/bot")["session_id"] == "k1"
    assert (
        quill.json("sessions", "resume", "--cwd", "/srv/bot/")["session_id"] == "k1"
    )  # a trailing slash
    no_cwd = quill.run("sessions", "resume", "--cwd", "/srv/none", check=False)
    assert no_cwd.returncode == 3 and "no session for cwd" in no_cwd.stderr
    assert "key" not in no_cwd.stderr.split("quill: hint:")[1]  # the hint is about cwds, not keys
    missing = quill.run("sessions", "resume", "--key", "nope", check=False)
    assert missing.returncode == 3 and "no session for key" in missing.stderr
    assert quill.run("sessions", "resume", check=False).returncode == 2
    report = quill.json("sessions", "orphans")["orphans"]
    assert {o["session_id"]: o["predecessor"] for o in report} == {"o1": "k1", "o3": None}
    adopted = quill.json("sessions", "orphans", "--adopt")["orphans"]
    assert {o["session_id"]: o["adopted"] for o in adopted} == {"o1": True, "o3": False}
    quill.drain()
    assert quill.json("sessions", "resume", "--key", "chat:1")["chain"] == ["k1", "o1"]
    assert [o["session_id"] for o in quill.json("sessions", "orphans")["orphans"]] == ["o3"]
    assert quill.json("sessions", "show", "o3")["session"]["key"] is None


def _png(seed: int) -> str:
    return base64.b64encode(bytes([seed]) * 3000).decode()


def _image_msg(seed: int) -> dict:
    return {
        "role": "user",
        "content": [
            {"type": "text", "text": f"look {seed}"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{_png(seed)}"}},
        ],
    }


def test_delete_removes_messages_usage_and_unshared_attachments(store):
    _create(store, "gone", key="chat:9", source="cli", model="gpt-5")
    store.apply(
        "messages.append",
        {
            "session_id": "gone",
            "messages": [
                _image_msg(1),
                _image_msg(2),
                assistant("ok", usage={"input_tokens": 10, "output_tokens": 2}, response_id="r1"),
            ],
        },
    )
    store.apply(
        "usage.record",
        {
            "session_id": "gone",
            "task": "title",
            "usage": {"prompt_tokens": 5, "completion_tokens": 1},
        },
    )
    _create(store, "kept", source="cli")
    store.apply(
        "messages.append", {"session_id": "kept", "messages": [_image_msg(2), user("mine")]}
    )
    _create(store, "child", parent_id="gone", parent_kind="delegate")
    _say(store, "child", "subagent work", 1_700_000_000)
    shared, own = blobs.sha256_of(_png(2)), blobs.sha256_of(_png(1))

    def count(sql, *a):
        return store.conn.execute(sql, a).fetchone()[0]

    assert count("SELECT count(*) FROM blobs") == 2 and count("SELECT count(*) FROM usage") == 2
    kept_before = store.rows("kept")

    assert (
        store.apply(
            "sessions.delete",
            {"session_ids": ["gone"], "reason": "user_request", "actor": "user:t"},
        )
        == []
    )
    assert count("SELECT count(*) FROM sessions WHERE id IN ('gone', 'child')") == 0
    assert count("SELECT count(*) FROM messages WHERE session_id IN ('gone', 'child')") == 0
    assert count("SELECT count(*) FROM usage") == 0
    assert [r[0] for r in store.conn.execute("SELECT sha256 FROM blobs").fetchall()] == [shared]
    assert own != shared
    assert store.rows("kept") == kept_before
    with store.reader() as r:
        assert r.get_messages("kept", "model")[0]["content"][1]["image_url"]["url"].endswith(
            _png(2)
        )
        assert r.search("look", session_id="gone") == []


def test_cli_delete_by_id_and_by_key_goes_through_the_spool(quill):
    ops = [
        {"op": "session.create", "data": {"session_id": "a", "key": "chat:1"}},
        {"op": "messages.append", "data": {"session_id": "a", "messages": [user("one")]}},
        {
            "op": "session.create",
            "data": {"session_id": "a2", "parent_id": "a", "parent_kind": "compression"},
        },
        {"op": "messages.append", "data": {"session_id": "a2", "messages": [user("two")]}},
        {"op": "session.create", "data": {"session_id": "b"}},
        {"op": "messages.append", "data": {"session_id": "b", "messages": [user("three")]}},
        {"op": "session.create", "data": {"session_id": "c"}},
    ]
    quill.run("push", input="\n".join(json.dumps(o) for o in ops))
    quill.drain()
    assert (
        quill.run("sessions", "delete", "b", check=False, input="n\n").returncode != 0
    )  # asked, refused
    out = quill.json("sessions", "delete", "--key", "chat:1", "--yes")
    assert out["session_ids"] == ["a", "a2"]
    quill.run("sessions", "delete", "b", "--yes")
    assert (
        quill.run("sessions", "delete", "--key", "chat:404", "--yes", check=False).returncode == 3
    )
    assert quill.run("sessions", "delete", "b", "--key", "x", check=False).returncode == 2
    quill.drain()
    assert [s["id"] for s in quill.json("sessions", "list", "--all")["sessions"]] == ["c"]
    assert quill.json("search", "three")["hits"] == []
    # deleting it again (an interrupted `delete --purge` re-run): not found, and the hint
    # names the command that finishes the purge
    again = quill.run("sessions", "delete", "b", "--purge", "--yes", check=False)
    assert again.returncode == 3 and "deleted already" in again.stderr
    assert "quill spool purge b" in again.stderr

"""Transcript writes to a session ended for compression are refused, never hidden.

Such a session's conversation goes on in its continuation, and listings, resume and default
search show the chain's tip, so rows added to the ended session were accepted and then seen
by nobody. The reference system refuses them (its ``CompressionSessionClosedError``); Quill
refuses them as ``session-compressed``, naming the live continuation, on both backends and on
every path a producer appends by (the rule is the appliers', which every path feeds)."""

from __future__ import annotations

import asyncio

import pytest
from semantics_helpers import Store, assistant, user

import quill as pkg


@pytest.fixture
def store(tmp_path, backend):
    s = Store(tmp_path, backend)
    yield s
    s.close()


def _chain(store) -> None:
    """root (ended for compression, holding m1/m2) -> mid (ended for compression) -> tip."""
    msgs = [user("first question", id="m1"), assistant("first answer", id="m2")]
    assert store.apply("messages.append", {"session_id": "root", "messages": msgs}) == []
    for sid, parent in (("mid", "root"), ("tip", "mid")):
        assert store.apply("session.end", {"session_id": parent, "reason": "compression"}) == []
        assert (
            store.apply(
                "session.create",
                {"session_id": sid, "parent_id": parent, "parent_kind": "compression"},
            )
            == []
        )


def test_writes_to_a_session_ended_for_compression_are_refused_naming_the_tip(store):
    _chain(store)
    before = store.rows("root")
    late = {"session_id": "root", "messages": [user("late reply", id="m3")]}
    writes = [
        ("messages.append", late),
        ("messages.replace", {"session_id": "root", "messages": [user("edited")]}),
        ("messages.rewind", {"session_id": "root", "ext_id": "m1"}),
        ("messages.compact", {"session_id": "root", "messages": [assistant("summary")]}),
    ]
    for op, data in writes:
        assert store.apply(op, data) == ["session-compressed"], op
        detail = store.last_rejects[0][1]
        assert "'tip'" in detail and "ended for compression" in detail, detail
    for sid in ("mid", "root"):  # a middle link of the chain is just as hidden
        refused = store.apply("messages.append", {**late, "session_id": sid})
        assert refused == ["session-compressed"], sid
    assert store.rows("root") == before
    assert store.ids("mid") == []
    # A re-sent batch the session already holds adds nothing, so it is not refused: a
    # re-import of the transcript stays a no-op instead of filling quarantine.
    again = [user("first question", id="m1"), assistant("first answer", id="m2")]
    assert store.apply("messages.append", {"session_id": "root", "messages": again}) == []
    # The continuation takes the rows, and ends other than compression still take appends.
    assert store.apply("messages.append", {**late, "session_id": "tip"}) == []
    assert store.apply("session.end", {"session_id": "other", "reason": "user_exit"}) == []
    assert store.apply("messages.append", {**late, "session_id": "other"}) == []
    with store.reader() as r:
        assert [m["content"] for m in r.get_messages("tip", "display")] == ["late reply"]
        assert len(r.get_messages("other", "display")) == 1


def test_in_one_chunk_only_the_compressed_sessions_append_is_quarantined(store):
    """Several appends drained as one chunk go through the bulk path: the refused one is
    quarantined alone and the others are applied, in order."""
    _chain(store)
    for sid, text in (("a", "one"), ("root", "hidden?"), ("tip", "two"), ("a", "three")):
        store.spool.append("messages.append", {"session_id": sid, "messages": [user(text)]})
    assert store.drain() == ["session-compressed"]
    with store.reader() as r:
        assert [m["content"] for m in r.get_messages("a", "display")] == ["one", "three"]
        assert [m["content"] for m in r.get_messages("tip", "display")] == ["two"]
    assert len(store.rows("root")) == 2


def test_no_continuation_yet_is_refused_too(store):
    """Between the end and the continuation's create (two ops), an append would land in the
    session the continuation is about to hide: refused, saying no continuation is stored."""
    assert store.apply("session.end", {"session_id": "lone", "reason": "compression"}) == []
    assert store.apply("messages.append", {"session_id": "lone", "messages": [user("x")]}) == [
        "session-compressed"
    ]
    assert "no continuation" in store.last_rejects[0][1]


def test_producers_are_told_the_reason(home, fleet, quill):
    """Client.wait, QuillSession (the Agents SDK integration) and ``quill push --wait`` each
    report the refusal with its reason; the session's rows are untouched."""
    from quill.integrations.openai_agents import QuillSession

    client = pkg.Client(home=home)
    acks = [
        client.append("root", [user("before the split")]),
        client.end("root", reason="compression"),
        client.create("tip", parent_id="root", parent_kind="compression"),
    ]
    assert all(o.applied for o in client.wait_all(acks))
    outcome = client.wait(client.append("root", [user("late")]))
    assert (outcome.status, outcome.reason) == ("quarantined", "session-compressed")
    assert "'tip'" in outcome.detail

    session = QuillSession("root", home=home)

    async def agent() -> None:
        with pytest.raises(pkg.QuarantinedError) as err:
            await session.add_items([{"role": "user", "content": "late"}])
        assert err.value.reason == "session-compressed"
        with pytest.raises(pkg.QuarantinedError):
            await session.pop_item()

    asyncio.run(agent())
    pushed = quill.run(
        "push",
        "--session",
        "root",
        "--wait",
        "60",
        input='{"role": "user", "content": "x"}\n',
        check=False,
    )
    assert pushed.returncode == 1 and "session-compressed" in pushed.stdout + pushed.stderr
    assert [m["content"] for m in client.messages("root", view="audit")] == ["before the split"]


def test_an_http_append_is_acked_then_quarantined_with_the_reason(quill):
    """The HTTP API acknowledges after fsync (whether the session was ended is the store's,
    which may be behind the spool), and the writer quarantines the append with its reason
    and the continuation to use; ``quill spool quarantine list`` shows it."""
    import httpx
    from service_helpers import served

    ops = [
        {"op": "messages.append", "data": {"session_id": "root", "messages": [user("one")]}},
        {"op": "session.end", "data": {"session_id": "root", "reason": "compression"}},
        {
            "op": "session.create",
            "data": {"session_id": "tip", "parent_id": "root", "parent_kind": "compression"},
        },
    ]
    with served(quill) as base:
        assert httpx.post(f"{base}/api/v1/ops", json={"ops": ops}).status_code == 202
        late = httpx.post(
            f"{base}/api/v1/sessions/root/messages", json={"messages": [user("late")]}
        )
        assert late.status_code == 202, late.text
        quill.drain()
        shown = httpx.get(f"{base}/api/v1/sessions/root/messages", params={"view": "audit"})
        assert [m["content"] for m in shown.json()["messages"]] == ["one"]
    (entry,) = quill.json("spool", "quarantine", "list", "--json")["entries"]
    assert entry["reason"] == "session-compressed" and "'tip'" in entry["detail"]

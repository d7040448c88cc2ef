"""A tool result carries the name of the tool call it answers, whichever way it came in.

Producers often send a result as ``{role: tool, tool_call_id, content}`` with no name (OpenAI
chat, the Agents SDK's ``function_call_output``, OTLP ``tool_call_response`` parts): the name
is only on the call, often in an earlier batch. The writer names such a result from the call
(``store.apply.tool_names``: the same op, an earlier op of a bulk run, else the session's
stored calls), so a search for the tool's name finds the result on every way in. Real corpus
content is pushed the way streaming producers push it: one message or item per batch."""

from __future__ import annotations

import asyncio
import json

import pytest
from conftest import CORPUS
from semantics_helpers import Store, assistant, call, tool, user

import quill as pkg
from quill.ops.importers import iter_transcript_files, parse_file

#: A real Codex rollout: 22 calls (exec_command, apply_patch), 21 outputs.
ROLLOUT = CORPUS / "codex" / "agentv__rollout-019ed836-b1da-78f1-8a0c-e598363d10f4.jsonl"


def _bare(call_id: str, text: str) -> dict:
    """A tool result as OpenAI-chat producers send it: no name."""
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def _tool_rows(store) -> list[tuple]:
    return [
        tuple(r)
        for r in store.conn.execute(
            "SELECT session_id, tool_call_id, tool_name FROM messages WHERE role = 'tool' "
            "ORDER BY session_id, id"
        )
    ]


OPS = [  # (session, messages): one op each
    ("a", [user("go"), assistant(None, tool_calls=[call("c1", "read_file")]), _bare("c1", "x")]),
    ("a", [assistant(None, tool_calls=[call("c2", "grep_files")])]),
    ("a", [_bare("c2", "found two")]),  # the call is in an earlier op
    ("b", [assistant(None, tool_calls=[call("c3", "web_fetch"), call("c4", "list_dir")])]),
    ("b", [_bare("c3", "page"), tool("c4", "four", name="ls")]),  # a given name is kept
    ("c", [_bare("c1", "another session's call"), _bare("zz", "no call at all")]),
]
NAMED = [
    ("a", "c1", "read_file"),
    ("a", "c2", "grep_files"),
    ("b", "c3", "web_fetch"),
    ("b", "c4", "ls"),
    ("c", "c1", None),
    ("c", "zz", None),
]


@pytest.mark.parametrize("drain", ["op at a time", "one bulk run"])
def test_a_result_is_named_from_its_call_in_the_op_the_run_or_the_store(tmp_path, backend, drain):
    store = Store(tmp_path, backend)
    try:
        for sid, msgs in OPS:
            store.spool.append("messages.append", {"session_id": sid, "messages": msgs})
            if drain == "op at a time":
                assert store.drain() == []
        assert store.drain() == []
        assert _tool_rows(store) == NAMED
        for indexed in (False, True):
            if indexed:
                store.index()
            with store.reader() as r:
                for sid, _, name in NAMED:
                    if name is None:
                        continue
                    hits = r.search(name, kinds=["tool"])
                    assert (sid, "tool") in {(h["session_id"], h["role"]) for h in hits}, name
                view = r.get_messages("a", "model")
            assert [m.get("name") for m in view if m["role"] == "tool"] == [
                "read_file",
                "grep_files",
            ]
    finally:
        store.close()


def test_a_compaction_carrying_an_unnamed_result_verbatim_keeps_its_name(tmp_path, backend):
    """The carried tail is matched to its originals as sent (a result without a name matches
    the named original) and the live copy keeps the original's name."""
    store = Store(tmp_path, backend)
    try:
        for msgs in (
            [user("look", id="u0"), assistant(None, id="a0", tool_calls=[call("c1", "grep")])],
            [_bare("c1", "three matches") | {"id": "t0"}],
            [assistant("done", id="a1")],
        ):
            assert store.apply("messages.append", {"session_id": "s", "messages": msgs}) == []
        tail = [
            assistant(None, id="a0", tool_calls=[call("c1", "grep")]),
            _bare("c1", "three matches") | {"id": "t0"},
            assistant("done", id="a1"),
        ]
        data = {"session_id": "s", "tail_count": 3, "messages": [user("[summary]")] + tail}
        assert store.apply("messages.compact", data) == []
        live = store.conn.execute(
            "SELECT tool_name FROM messages WHERE session_id = 's' AND state = 'live' "
            "AND role = 'tool'"
        ).fetchall()
        assert [tuple(r) for r in live] == [("grep",)]
    finally:
        store.close()


def test_a_replace_names_its_results(tmp_path, backend):
    store = Store(tmp_path, backend)
    try:
        first = [user("q", id="u0"), assistant(None, id="a0", tool_calls=[call("c1", "fetch")])]
        assert store.apply("messages.append", {"session_id": "s", "messages": first}) == []
        data = {"session_id": "s", "from_ext_id": "a0", "messages": [first[1], _bare("c1", "ok")]}
        assert store.apply("messages.replace", data) == []
        assert _tool_rows(store) == [("s", "c1", "fetch")]
    finally:
        store.close()


# -- real corpus content on each way in ------------------------------------------------------


def _rollout_items() -> list[dict]:
    """The rollout's Responses API items (``response_item`` payloads), as the Agents SDK holds
    them: messages, reasoning, function and custom tool calls and their outputs."""
    items = []
    for line in ROLLOUT.read_text().splitlines():
        rec = json.loads(line)
        if rec.get("type") == "response_item":
            items.append(rec["payload"])
    return items


def _calls_of(items: list[dict]) -> dict[str, str]:
    return {
        i["call_id"]: i["name"]
        for i in items
        if i.get("type") in ("function_call", "custom_tool_call") and i.get("call_id")
    }


@pytest.mark.corpus
def test_agents_sdk_items_of_a_real_rollout_are_found_by_tool_name(home, writer):
    """``QuillSession.add_items`` one item per batch (as a streamed run adds them): every
    ``function_call_output`` and ``custom_tool_call_output`` is named as its call."""
    from quill.integrations.openai_agents import QuillSession

    items = _rollout_items()
    calls = _calls_of(items)
    outputs = [
        i for i in items if i.get("type") in ("function_call_output", "custom_tool_call_output")
    ]
    assert len(outputs) == 21 and {calls[o["call_id"]] for o in outputs} == {
        "exec_command",
        "apply_patch",
        "update_plan",
    }
    client = pkg.AsyncClient(home)

    async def main() -> None:
        session = QuillSession("rollout", client=client)
        for item in items:
            await session.add_items([item])
        assert await session.get_items() == items  # the items come back verbatim
        view = await client.messages("rollout", view="audit")
        results = [m for m in view if m["role"] == "tool"]
        assert [(m["tool_call_id"], m.get("name")) for m in results] == [
            (o["call_id"], calls[o["call_id"]]) for o in outputs
        ]
        for name in ("exec_command", "apply_patch", "update_plan"):
            hits = await client.search(name, kinds=["tool"], limit=1000)
            found = [h for h in hits if h["role"] == "tool"]
            assert len(found) == sum(m.get("name") == name for m in results), name

    asyncio.run(main())


def _format_files() -> dict[str, object]:
    """One corpus file per format whose sessions hold tool results (the first found)."""
    out = {}
    for path in iter_transcript_files([CORPUS]):
        parsed = parse_file(path)
        if parsed.format and parsed.format not in out:
            if any(m.get("role") == "tool" for s in parsed.sessions for m in s.messages):
                out[parsed.format] = parsed
    return out


@pytest.fixture(scope="module")
def format_files():
    return _format_files()


@pytest.mark.parametrize(
    "fmt",
    ["claude-code", "codex", "gemini-cli", "copilot-cli", "openhands", "swe-agent"],
)
@pytest.mark.corpus
def test_each_formats_results_sent_one_message_per_batch_are_found_by_tool_name(
    home, writer, format_files, fmt
):
    """A real file of each format, its results stripped of their name (as a producer of the
    OpenAI chat shape sends them) and appended by the client one message per batch: each
    result is stored with its call's name and a search for that name finds it."""
    parsed = format_files[fmt]
    session = parsed.sessions[0]
    msgs = [m for m in session.messages][:400]
    named = {m["id"]: m["name"] for m in msgs if m.get("role") == "tool" and m.get("name")}
    calls = {c["id"] for m in msgs for c in m.get("tool_calls") or []}
    client = pkg.Client(home)
    acks = []
    for m in msgs:
        m = {k: v for k, v in m.items() if not (k == "name" and m.get("role") == "tool")}
        acks.append(client.append("s", [m]))
    assert all(o.applied for o in client.wait_all(acks, timeout=120))
    stored = {
        m["id"]: m.get("name") for m in client.messages("s", view="audit") if m["role"] == "tool"
    }
    answered = {mid for mid, m in ((m["id"], m) for m in msgs) if m.get("tool_call_id") in calls}
    expected = {
        m["id"]: named.get(m["id"]) for m in msgs if m.get("role") == "tool" and m["id"] in answered
    }
    assert expected and {k: stored.get(k) for k in expected} == expected
    name = max(set(expected.values()), key=list(expected.values()).count)
    hits = client.search(name, kinds=["tool"], limit=1000)
    assert any(h["role"] == "tool" for h in hits), name


@pytest.mark.corpus
def test_results_posted_over_http_are_found_by_tool_name(quill, home, writer):
    """``POST /api/v1/sessions/{id}/messages``: the real rollout's first call and its output
    posted as two requests, the output without a name; the search endpoint finds it by name."""
    import time

    import httpx
    from service_helpers import served

    items = _rollout_items()
    first = next(i for i in items if i.get("type") == "function_call")
    output = next(
        i
        for i in items
        if i.get("type") == "function_call_output" and i["call_id"] == first["call_id"]
    )
    posted = [
        {"role": "user", "content": "run it"},
        assistant(None, tool_calls=[call(first["call_id"], first["name"], first["arguments"])]),
        _bare(first["call_id"], output["output"]),
    ]
    with served(quill) as base:
        for msgs in (posted[:2], posted[2:]):
            r = httpx.post(f"{base}/api/v1/sessions/h/messages", json={"messages": msgs})
            assert r.status_code == 202, r.text
        deadline = time.monotonic() + 60
        while True:
            got = httpx.get(f"{base}/api/v1/sessions/h/messages")
            if got.status_code == 200 and len(got.json()["messages"]) == 3:
                break
            assert time.monotonic() < deadline, got.text
            time.sleep(0.2)
        assert got.json()["messages"][2].get("name") == "exec_command"
        hits = httpx.get(
            f"{base}/api/v1/search", params={"q": "exec_command", "kinds": "tool"}
        ).json()["hits"]
        assert sorted(h["role"] for h in hits) == ["assistant", "tool"]


#: Call ids that JSON escapes in the stored ``tool_calls`` (quote, backslash, control
#: character), beside ones it keeps as they are.
ESCAPED_IDS = ['call"1', "call\\2", "call\x013", "call_4", "c%5", "cé6"]


def test_a_call_id_json_escapes_names_its_result_live_as_in_a_rebuild(tmp_path, backend, request):
    """A result whose call came in an earlier op is named from the stored call whatever its id
    holds: the live store (op at a time) and one rebuilt from the spool (one bulk run, where
    the call is among the run's own rows) name the same results."""
    import shutil

    live = Store(tmp_path / "live", backend)
    for i, cid in enumerate(ESCAPED_IDS):
        calls = [{"id": cid, "type": "function", "function": {"name": f"t{i}", "arguments": ""}}]
        msgs = [{"role": "assistant", "content": "", "tool_calls": calls}]
        live.apply("messages.append", {"session_id": "s", "messages": msgs})
        live.apply("messages.append", {"session_id": "s", "messages": [_bare(cid, f"out {i}")]})
    shutil.copytree(tmp_path / "live" / "spool", tmp_path / "rebuilt" / "spool")
    # the rebuilt store on a schema of its own
    url = None if backend is None else request.getfixturevalue("pg_schemas")()
    rebuilt = Store(tmp_path / "rebuilt", url)
    try:
        assert rebuilt.drain() == []
        want = [("s", cid, f"t{i}") for i, cid in enumerate(ESCAPED_IDS)]
        assert _tool_rows(live) == want
        assert _tool_rows(rebuilt) == want
    finally:
        live.backend.close()
        rebuilt.backend.close()

"""`quill.integrations.openai_agents.QuillSession` with the real `openai-agents` package: the
SDK's own Runner with a scripted model (no network) over the production writer (in a thread:
the ``writer`` fixture); the stored transcript equals what the SDK's SQLiteSession holds for
the same script; pop/clear never delete."""

from __future__ import annotations

import asyncio
import threading

import pytest

agents = pytest.importorskip("agents")
from agents import Agent, RunConfig, Runner, SQLiteSession, function_tool  # noqa: E402
from agents.memory.session import Session  # noqa: E402
from agents.memory.session_settings import SessionSettings  # noqa: E402
from agents.testing import ScriptedModel, assistant_message, function_call  # noqa: E402

import quill as pkg  # noqa: E402
from quill.integrations.openai_agents import QuillSession  # noqa: E402

RC = RunConfig(tracing_disabled=True)


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"{city}: sunny, 21 °C"


def _script() -> list:
    return [
        # run 1: a tool call, then the answer
        [function_call("get_weather", {"city": "Tokyo"}, call_id="call_1", item_id="fc_1")],
        [assistant_message("It is sunny in Tokyo.", item_id="msg_1")],
        # run 2: two parallel tool calls in one response, then the answer (the SDK's reused id)
        [
            function_call("get_weather", {"city": "Paris"}, call_id="call_2"),
            function_call("get_weather", {"city": "Oslo"}, call_id="call_3"),
        ],
        [assistant_message("Paris and Oslo are sunny too.")],
        # run 3: no tool
        [assistant_message("You asked about Tokyo, Paris and Oslo.")],
    ]


PROMPTS = ["Weather in Tokyo?", "And in Paris and Oslo?", "Which cities did I ask about?"]


async def _converse(make_session) -> tuple[ScriptedModel, list]:
    model = ScriptedModel(_script())
    agent = Agent(name="weather", model=model, tools=[get_weather])
    results = []
    for prompt in PROMPTS:  # a fresh session object per run: history must come from the store
        results.append(await Runner.run(agent, prompt, session=make_session(), run_config=RC))
    model.assert_complete()
    return model, results


def test_runner_turns_with_tool_calls_store_what_the_sdk_holds(home, writer):
    client = pkg.AsyncClient(home)

    async def main() -> None:
        model, results = await _converse(lambda: QuillSession("conv", client=client))
        assert results[-1].final_output == "You asked about Tokyo, Paris and Oslo."
        reference = SQLiteSession("conv")  # the SDK's own session, same script
        await _converse(lambda: reference)
        stored = await QuillSession("conv", client=client).get_items()
        expected = await reference.get_items()
        assert stored == expected and len(stored) == 12
        # the last model call was fed the whole history from Quill
        assert [i.get("type") for i in model.last_call.input][:4] == [
            None,
            "function_call",
            "function_call_output",
            "message",
        ]
        # Quill's own views see a normal transcript: roles, tool calls, searchable tool output
        view = await client.messages("conv", view="model")
        assert [m["role"] for m in view][:5] == ["user", "assistant", "tool", "assistant", "user"]
        assert view[1]["tool_calls"][0]["id"] == "call_1" and view[2]["tool_call_id"] == "call_1"
        hits = await client.search("Oslo")
        assert {h["session_id"] for h in hits} == {"conv"} and len(hits) >= 2
        assert (await client.session("conv"))["source"] == "openai-agents"

    asyncio.run(main())


def test_streamed_and_sync_runs_use_the_same_session(home, writer):
    session = QuillSession("streamed", home=home)
    model = ScriptedModel([[assistant_message("first")], [assistant_message("second")]])
    agent = Agent(name="a", model=model)

    async def streamed() -> None:
        run = Runner.run_streamed(agent, "one", session=session, run_config=RC)
        async for _ in run.stream_events():
            pass

    asyncio.run(streamed())
    Runner.run_sync(agent, "two", session=session, run_config=RC)
    items = asyncio.run(session.get_items())
    assert [
        i.get("content") if i.get("type") is None else i["content"][0]["text"] for i in items
    ] == ["one", "first", "two", "second"]


ITEMS = [
    {"role": "user", "content": "Ünïcode ✓ and 'quotes' \"double\" \\ backslash"},
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "typed part"}]},
    {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": "need tool"}],
        "encrypted_content": "ENC" * 50,
    },
    {
        "type": "function_call",
        "id": "fc_9",
        "call_id": "call_9",
        "name": "f",
        "arguments": '{"a": [1, 2]}',
        "status": "completed",
    },
    {
        "type": "function_call_output",
        "call_id": "call_9",
        "output": [{"type": "input_text", "text": "list-valued output"}],
    },
    {
        "type": "web_search_call",
        "id": "ws_1",
        "status": "completed",
        "action": {"type": "search", "query": "q"},
    },
    {
        "type": "message",
        "id": "msg_9",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "done", "annotations": [], "logprobs": []}],
        "provider_data": {"model": "x", "thought_signature": "sig"},
    },
    {"role": "developer", "content": "be brief"},
]


def test_every_item_shape_round_trips_and_limits(home, writer):
    session = QuillSession("shapes", home=home)
    assert isinstance(session, Session)

    async def main() -> None:
        assert await session.get_items() == [] and await session.pop_item() is None
        await session.add_items([])
        await session.add_items(ITEMS[:4])
        await session.add_items(ITEMS[4:])
        assert await session.get_items() == ITEMS
        assert await session.get_items(limit=2) == ITEMS[-2:]
        assert await session.get_items(limit=0) == [] and await session.get_items(limit=-1) == []
        assert await session.get_items(limit=100) == ITEMS
        limited = QuillSession("shapes", home=home, session_settings=SessionSettings(limit=3))
        assert (
            await limited.get_items() == ITEMS[-3:]
            and await limited.get_items(limit=1) == ITEMS[-1:]
        )
        got = await session.get_items()
        got[0]["content"] = "mutated"
        assert (await session.get_items())[0] == ITEMS[0]

    asyncio.run(main())


def test_pop_and_clear_rewind_and_never_delete(home, writer):
    client = pkg.AsyncClient(home)
    session = QuillSession("undo", client=client)

    async def main() -> None:
        await session.add_items(ITEMS)
        assert await session.pop_item() == ITEMS[-1]
        assert await session.pop_item() == ITEMS[-2]
        assert await session.get_items() == ITEMS[:-2]
        # two concurrent pops never return the same item
        a, b = await asyncio.gather(
            QuillSession("undo", client=client).pop_item(),
            QuillSession("undo", client=client).pop_item(),
        )
        assert sorted([ITEMS.index(a), ITEMS.index(b)]) == [len(ITEMS) - 4, len(ITEMS) - 3]
        await session.clear_session()
        assert await session.get_items() == []
        audit = await client.messages("undo", view="audit")
        assert len(audit) == len(ITEMS) and {m["state"] for m in audit} == {"rewound"}
        # the same session id continues as a fresh conversation
        model = ScriptedModel([[assistant_message("fresh start")]])
        await Runner.run(
            Agent(name="a", model=model), "hello again", session=session, run_config=RC
        )
        assert [i.get("type") for i in model.last_call.input] == [None]
        assert len(await session.get_items()) == 2
        assert len(await client.messages("undo", view="audit")) == len(ITEMS) + 2

    asyncio.run(main())


def test_add_items_without_a_writer_times_out_clearly(home):
    session = QuillSession("nowriter", home=home, wait_timeout=0.3)
    with pytest.raises(pkg.WaitTimeoutError) as err:
        asyncio.run(session.add_items([{"role": "user", "content": "x"}]))
    assert "quill run" in err.value.hint


def test_a_refused_batch_raises_with_the_reason(home, writer):
    session = QuillSession("dup", home=home)
    output = {"type": "function_call_output", "call_id": "c", "output": "once"}

    async def main() -> None:
        await session.add_items([output])
        with pytest.raises(pkg.QuarantinedError) as err:
            await session.add_items([output])
        assert err.value.reason == "duplicate-tool-result"
        assert await session.get_items() == [output]

    asyncio.run(main())


def test_settings_as_a_dict_and_close_behave_as_the_sdks_own_sessions(home, writer):
    """``session_settings`` may be a dict (converted and checked, as SQLiteSession does), and
    ``close()`` exists and is idempotent; a closed session refuses further calls."""
    items = [{"role": "user", "content": f"m{i}"} for i in range(3)]

    async def main() -> None:
        ours = QuillSession("settings", home=home, session_settings={"limit": 2})
        theirs = SQLiteSession("settings", session_settings={"limit": 2})
        for s in (ours, theirs):
            assert s.session_settings == SessionSettings(limit=2)
            await s.add_items(items)
            assert await s.get_items() == items[-2:]
            s.close()
            s.close()
            with pytest.raises(RuntimeError):
                await s.get_items()
        with pytest.raises((TypeError, ValueError)):
            QuillSession("bad", home=home, session_settings={"no_such_field": 1})
        with pytest.raises((TypeError, ValueError)):
            SQLiteSession("bad", session_settings={"no_such_field": 1})
        # a Runner given a dict-configured session runs (it read .limit off a dict before)
        model = ScriptedModel([[assistant_message("hi")]])
        agent = Agent(name="a", model=model)
        session = QuillSession("runner", home=home, session_settings={"limit": 10})
        await Runner.run(agent, "hello", session=session, run_config=RC)
        assert [i.get("role") for i in await session.get_items()] == ["user", "assistant"]

    asyncio.run(main())


def test_without_the_sdk_the_import_error_says_what_to_install():
    # A real interpreter in which `agents` cannot be imported (as after `pip install -e .`):
    # it used to fail with a bare "No module named 'agents'".
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['agents'] = None\n"
        "try:\n    import quill.integrations.openai_agents\n"
        "except ImportError as e:\n    print(type(e).__name__, '|', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ImportError |") and "pip install 'openai-agents" in out.stdout


def test_the_protocol_cases_inside_the_sqlite_only_sdk_tests(home, writer):
    """What the SDK tests that run on SQLiteSession only (they reach into its connection pool,
    file lock and transactions) also say of the protocol, on both sessions: a failed
    ``add_items`` leaves nothing behind and the session usable; a session is used from
    several event loops, one after another and at once; two sessions of one store (one file)
    written at once keep their own items."""

    async def failed_then_usable(s) -> None:
        with pytest.raises((TypeError, ValueError)):  # SQLite: TypeError; Quill: InvalidInput
            await s.add_items([{"role": "user", "content": object()}])
        await s.add_items([{"role": "user", "content": "after failure"}])
        assert [i.get("content") for i in await s.get_items()] == ["after failure"]

    def loops(s) -> None:
        other = asyncio.new_event_loop()
        thread = threading.Thread(target=other.run_forever)
        thread.start()
        try:
            for turn in range(3):  # each asyncio.run is a new loop and a new executor
                asyncio.run(s.add_items([{"role": "user", "content": f"turn {turn}"}]))
            asyncio.run_coroutine_threadsafe(
                s.add_items([{"role": "user", "content": "other loop"}]), other
            ).result(timeout=60)
        finally:
            other.call_soon_threadsafe(other.stop)
            thread.join(timeout=10)
            other.close()
        got = asyncio.run(s.get_items())
        assert [i["content"] for i in got] == ["turn 0", "turn 1", "turn 2", "other loop"]

    async def two_at_once(one, two) -> None:
        await asyncio.gather(
            one.add_items([{"role": "user", "content": "one"}]),
            two.add_items([{"role": "user", "content": "two"}]),
        )
        assert [i["content"] for i in await one.get_items()] == ["one"]
        assert [i["content"] for i in await two.get_items()] == ["two"]

    db = home / "sdk.db"
    for make in (
        lambda sid: SQLiteSession(sid, db),
        lambda sid: QuillSession(sid, home=home),
    ):
        asyncio.run(failed_then_usable(make("failed")))
        loops(make("loops"))
        asyncio.run(two_at_once(make("one"), make("two")))

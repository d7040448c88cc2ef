"""``QuillSession``'s compaction hook (``_get_compaction_snapshot``, read by the SDK's
``OpenAIResponsesCompactionSession``) over the production writer (``writer`` fixture): the
suffix is replaced by one guarded ``messages.replace``, a session that moved since the read is
left as it is, and nothing is deleted (the replaced and pruned items stay in the audit view).
The SDK's own cases of the hook run in ``tests/peer/agents_sdk/test_compaction_*.py``."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("agents")
from agents.memory.session import _CompactionSnapshot  # noqa: E402

import quill as pkg  # noqa: E402
from quill.integrations.openai_agents import QuillSession  # noqa: E402

ITEMS = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"} for i in range(6)]
SUMMARY = {"type": "compaction", "id": "cmp", "encrypted_content": "summary"}


def _states(audit: list[dict]) -> list[str]:
    return [m["state"] for m in audit]


def test_snapshot_replaces_the_suffix_and_keeps_what_it_replaced(home, writer):
    client = pkg.AsyncClient(home)
    session = QuillSession("compact", client=client)

    async def main() -> None:
        await session.add_items(ITEMS)
        snap = await session._get_compaction_snapshot(4)
        assert isinstance(snap, _CompactionSnapshot)
        assert snap.items == ITEMS[2:] and snap.complete is False
        whole = await session._get_compaction_snapshot(6)
        assert whole.items == ITEMS and whole.complete is True
        assert await snap.replace_suffix(1, [SUMMARY]) is True
        assert await session.get_items() == ITEMS[:3] + [SUMMARY]
        audit = await client.messages("compact", view="audit")
        assert _states(audit) == ["live"] * 3 + ["rewound"] * 3 + ["live"]
        assert [m["content"] for m in audit[3:6]] == ["m3", "m4", "m5"]
        # an empty suffix replaces nothing
        assert await snap.replace_suffix(4, [SUMMARY]) is False

    asyncio.run(main())


def test_a_session_that_moved_since_the_read_is_not_replaced(home, writer):
    client = pkg.AsyncClient(home)
    session = QuillSession("moved", client=client)
    later = {"role": "user", "content": "appended after the read"}

    async def main() -> None:
        await session.add_items(ITEMS)
        appended = await session._get_compaction_snapshot(3)
        await QuillSession("moved", client=client).add_items([later])
        assert await appended.replace_suffix(0, [SUMMARY]) is False
        assert await session.get_items() == ITEMS + [later]
        popped = await session._get_compaction_snapshot(3)
        assert await session.pop_item() == later
        await session.pop_item()
        assert await popped.replace_suffix(0, [SUMMARY]) is False
        assert await session.get_items() == ITEMS[:-1]
        # the refused ops are kept in the quarantine, never applied
        audit = await client.messages("moved", view="audit")
        assert len(audit) == len(ITEMS) + 1 and "summary" not in str(audit)

    asyncio.run(main())


def test_pruned_prefix_is_rewound_and_the_rest_of_the_history_kept(home, writer):
    client = pkg.AsyncClient(home)
    session = QuillSession("prune", client=client)
    expired = [{"role": "user", "content": "expired"}] * 3
    retained = [{"role": "user", "content": "retained"}, {"role": "user", "content": "expired"}]

    async def main() -> None:
        await session.add_items(expired + retained + ITEMS)
        snap = await session._get_compaction_snapshot(
            len(ITEMS), prune_prefix=lambda item: item.get("content") == "expired"
        )
        assert snap.items == ITEMS and snap.complete is False
        assert await snap.replace_suffix(0, [SUMMARY]) is True
        # only the oldest run is pruned: an expired item after a retained one stays
        assert await session.get_items() == retained + [SUMMARY]
        audit = await client.messages("prune", view="audit")
        assert len(audit) == len(expired + retained + ITEMS) + len(retained) + 1
        assert _states(audit).count("rewound") == len(expired + retained + ITEMS)

    asyncio.run(main())


def test_no_snapshot_where_the_hook_would_bypass_a_transform(home, writer):
    client = pkg.AsyncClient(home)

    class Filtering(QuillSession):
        async def get_items(self, limit=None):
            return [i for i in await super().get_items(limit) if i.get("content") != "m1"]

    async def main() -> None:
        await QuillSession("chat", client=client).add_items(ITEMS)
        assert await Filtering("chat", client=client)._get_compaction_snapshot(4) is None
        # a message written by another producer in chat shape stands for two items
        await client.wait(
            await client.append(
                "chat",
                [
                    {
                        "role": "assistant",
                        "content": "looking",
                        "tool_calls": [
                            {
                                "id": "c1",
                                "type": "function",
                                "function": {"name": "f", "arguments": "{}"},
                            }
                        ],
                    }
                ],
            ),
            30,
        )
        assert await QuillSession("chat", client=client)._get_compaction_snapshot(4) is None
        closed = QuillSession("chat", client=client)
        closed.close()
        with pytest.raises(RuntimeError, match="closed"):
            await closed._get_compaction_snapshot(4)

    asyncio.run(main())


class GatedClient(pkg.AsyncClient):
    """An ``AsyncClient`` whose compaction ``replace`` is submitted (durable in the spool) and
    then held until ``release`` is set: the run is cancelled while the op is in flight."""

    def __init__(self, home, compacted):
        super().__init__(home)
        self.compacted = compacted
        self.started = asyncio.Event()
        self.release = asyncio.Event()

    async def replace(self, session_id, messages, **kwargs):
        # AsyncClient forwards its methods through __getattr__ (super() does not reach it)
        ack = await super().__getattr__("replace")(session_id, messages, **kwargs)
        if [m.get("openai_agents_item") for m in messages] == self.compacted:
            self.started.set()
            await self.release.wait()
        return ack


@pytest.mark.parametrize("retry_streamed", [False, True], ids=["run", "streamed"])
def test_handoff_resume_after_cancelled_compaction_commits(home, writer, retry_streamed):
    """The SDK's case of the same name (``tests/test_run_impl_resume_paths.py``), which holds
    ``SQLiteSession``'s commit through its private ``_insert_items``, built on Quill's terms:
    the run is cancelled while the compaction's replace is in flight; it settles, and the
    resumed run continues from the compacted history."""
    from agents import Agent, RunConfig, Runner, handoff
    from agents.handoffs import HandoffInputData
    from agents.items import MessageOutputItem
    from agents.memory import OpenAIResponsesCompactionSession
    from agents.testing import ScriptedModel, assistant_message, function_call

    compacted = [{"role": "assistant", "content": "compacted history"}]
    client = GatedClient(home, compacted)
    rc = RunConfig(tracing_disabled=True)
    calls = []

    async def compact(**kwargs):
        calls.append(kwargs)
        return type("Compacted", (), {"output": compacted, "usage": None})()

    async def main() -> None:
        session = OpenAIResponsesCompactionSession(
            "cancelled-compaction",
            QuillSession("cancelled-compaction", client=client),
            client=type("C", (), {"responses": type("R", (), {"compact": staticmethod(compact)})}),
            compaction_mode="input",
            should_trigger_compaction=lambda ctx: ctx["response_id"] == "resp-handoff",
        )
        model = ScriptedModel(
            [
                {
                    "output": [
                        assistant_message("delegating"),
                        function_call("transfer_to_delegate", {}, call_id="handoff-1"),
                    ],
                    "response_id": "resp-handoff",
                },
                {"output": [assistant_message("done")], "response_id": "resp-delegate"},
            ]
        )
        delegate = Agent(name="delegate", model=model)

        def retain_message(data: HandoffInputData) -> HandoffInputData:
            kept = tuple(i for i in data.new_items if isinstance(i, MessageOutputItem))
            return data.clone(new_items=kept)

        triage = Agent(
            name="triage",
            model=model,
            handoffs=[handoff(delegate, input_filter=retain_message)],
        )
        result = Runner.run_streamed(triage, "hello", session=session, run_config=rc)

        async def drain() -> None:
            async for _ in result.stream_events():
                pass

        consumer = asyncio.create_task(drain())
        try:
            await asyncio.wait_for(client.started.wait(), timeout=30)
            result.cancel()
            client.release.set()
            await asyncio.wait_for(consumer, timeout=30)
            assert await session.get_items() == compacted
            assert len(model.calls) == 1
            state = result.to_state()
            assert state._pending_session_write is None
            if retry_streamed:
                resumed = Runner.run_streamed(triage, state, session=session, run_config=rc)
                async for _ in resumed.stream_events():
                    pass
            else:
                resumed = await Runner.run(triage, state, session=session, run_config=rc)
            assert resumed.final_output == "done" and len(model.calls) == 2 and len(calls) == 1
            final = resumed.new_items[-1].to_input_item()
            assert await session.get_items() == compacted + [final]
            # the compacted-away history is kept (rewound), not deleted
            audit = await client.messages("cancelled-compaction", view="audit")
            assert "hello" in str([m for m in audit if m["state"] == "rewound"])
        finally:
            client.release.set()
            result.cancel()
            await asyncio.gather(consumer, return_exceptions=True)

    asyncio.run(main())

"""Usage and cost: shapes as sent, placeholders, counting once, pricing, CLI."""

from __future__ import annotations

import csv
import io
import json

import pytest
from semantics_helpers import Store, assistant, user

from quill.store.apply.usage import normalize_usage, price_version

ANTHROPIC = {
    "input_tokens": 10,
    "cache_creation_input_tokens": 200,
    "cache_read_input_tokens": 3000,
    "output_tokens": 50,
}
OPENAI_CHAT = {
    "prompt_tokens": 1000,
    "completion_tokens": 300,
    "prompt_tokens_details": {"cached_tokens": 400},
    "completion_tokens_details": {"reasoning_tokens": 120},
}
CODEX = {
    "input_tokens": 22606,
    "cached_input_tokens": 2432,
    "output_tokens": 351,
    "reasoning_output_tokens": 74,
    "total_tokens": 22957,
}


@pytest.fixture
def store(tmp_path, backend):
    s = Store(tmp_path, backend)
    yield s
    s.close()


def _usage(store, sid=None):
    sql = (
        "SELECT session_id, message_id, response_id, task, model, input_tokens, output_tokens, "
        "cache_read_tokens, cache_write_tokens, reasoning_tokens, cost_usd, price_version "
        "FROM usage"
    )
    rows = store.conn.execute(
        sql + (" WHERE session_id = ?" if sid else "") + " ORDER BY id", (sid,) if sid else ()
    ).fetchall()
    keys = (
        "session_id",
        "message_id",
        "response_id",
        "task",
        "model",
        "input",
        "output",
        "cache_read",
        "cache_write",
        "reasoning",
        "cost",
        "price_version",
    )
    return [dict(zip(keys, r)) for r in rows]


def test_shapes_as_sent_normalise_to_one_convention():
    assert normalize_usage(ANTHROPIC) == {
        "input_tokens": 3210,
        "output_tokens": 50,
        "cache_read_tokens": 3000,
        "cache_write_tokens": 200,
        "reasoning_tokens": 0,
    }
    assert normalize_usage(OPENAI_CHAT) == {
        "input_tokens": 1000,
        "output_tokens": 300,
        "cache_read_tokens": 400,
        "cache_write_tokens": 0,
        "reasoning_tokens": 120,
    }
    assert normalize_usage(CODEX) == {
        "input_tokens": 22606,
        "output_tokens": 351,
        "cache_read_tokens": 2432,
        "cache_write_tokens": 0,
        "reasoning_tokens": 74,
    }
    responses = {
        "input_tokens": 90,
        "input_tokens_details": {"cached_tokens": 30},
        "output_tokens": 9,
        "output_tokens_details": {"reasoning_tokens": 4},
    }
    assert normalize_usage(responses)["cache_read_tokens"] == 30
    assert normalize_usage(responses)["reasoning_tokens"] == 4
    # Gemini usageMetadata: thoughts are billed as output beside the candidates.
    gemini = {
        "promptTokenCount": 1200,
        "cachedContentTokenCount": 1000,
        "candidatesTokenCount": 50,
        "thoughtsTokenCount": 300,
        "toolUsePromptTokenCount": 7,
        "totalTokenCount": 1557,
    }
    expected = {
        "input_tokens": 1207,
        "output_tokens": 350,
        "cache_read_tokens": 1000,
        "cache_write_tokens": 0,
        "reasoning_tokens": 300,
    }
    assert normalize_usage(gemini) == expected
    sdk = {
        "prompt_token_count": 1200,
        "cached_content_token_count": 1000,
        "candidates_token_count": 50,
        "thoughts_token_count": 300,
        "tool_use_prompt_token_count": 7,
    }
    assert normalize_usage(sdk) == expected


@pytest.mark.parametrize(
    "bad",
    [
        {"input_tokens": -1},
        {"prompt_tokens": "10"},
        {"output_tokens": 1.5},
        {"prompt_tokens": 5, "prompt_tokens_details": {"cached_tokens": 9}},
        [1, 2],
        # shapes Quill cannot read are refused, never recorded as zero tokens
        {},
        {"tokens": {"input": 5, "output": 3}},
        {"inputTokens": 5, "outputTokens": 3},
        {"promptTokenCount": 5, "cachedContentTokenCount": 9},
    ],
)
def test_bad_usage_is_quarantined_with_its_reason_and_changes_nothing(store, bad):
    assert store.apply("usage.record", {"session_id": "s", "usage": bad}) == ["invalid-usage"]
    assert store.apply(
        "messages.append", {"session_id": "s", "messages": [assistant("hi", usage=bad)]}
    ) == ["invalid-usage"]
    assert store.conn.execute("SELECT count(*) FROM sessions").fetchone()[0] == 0
    assert _usage(store) == []


def test_usage_on_an_assistant_message_and_as_its_own_op(store):
    assert (
        store.apply(
            "session.create", {"session_id": "s", "source": "cli", "model": "claude-sonnet-4-5"}
        )
        == []
    )
    assert (
        store.apply(
            "messages.append",
            {
                "session_id": "s",
                "messages": [user("hi"), assistant("hello", usage=ANTHROPIC, response_id="msg_1")],
            },
        )
        == []
    )
    assert (
        store.apply(
            "usage.record",
            {"session_id": "s", "task": "title", "model": "gpt-4o-mini", "usage": OPENAI_CHAT},
        )
        == []
    )
    rows = _usage(store)
    msg_id = store.ids("s", role="assistant")[0]
    assert [(r["task"], r["model"], r["message_id"], r["input"], r["output"]) for r in rows] == [
        ("turn", "claude-sonnet-4-5", msg_id, 3210, 50),
        ("title", "gpt-4o-mini", None, 1000, 300),
    ]
    assert all(r["cost"] > 0 and r["price_version"] == price_version() for r in rows)
    # The message keeps its usage verbatim: a reader (and an export) sees what was sent.
    shown = store.reader().get_messages("s", "audit")[1]
    assert shown["usage"] == ANTHROPIC or shown.get("extra", {}).get("usage") == ANTHROPIC


def test_unknown_model_is_unpriced_never_zero(store):
    store.apply("usage.record", {"session_id": "s", "model": "acme-frontier-9000", "usage": CODEX})
    store.apply("usage.record", {"session_id": "s", "model": "gpt-5", "usage": CODEX})
    rows = _usage(store)
    assert rows[0]["cost"] is None and rows[0]["price_version"] is None
    assert rows[1]["cost"] > 0
    with store.reader() as r:
        total = r.usage_totals()[0]
        by_model = {row["model"]: row for row in r.usage_totals(("model",))}
    assert total["unpriced"] == 1 and total["cost_usd"] == pytest.approx(rows[1]["cost"])
    assert (
        by_model["acme-frontier-9000"]["cost_usd"] is None
        and by_model["acme-frontier-9000"]["unpriced"] == 1
    )


@pytest.mark.parametrize("order", ["usage-first", "create-first"])
def test_usage_before_its_session_never_mints_a_wrong_session(store, order):
    create = (
        "session.create",
        {
            "session_id": "s",
            "source": "telegram",
            "model": "gpt-5",
            "title": "Chat",
            "started_at": 1_700_000_000,
        },
    )
    usage = (
        "usage.record",
        {"session_id": "s", "source": "telegram", "task": "auxiliary", "usage": CODEX},
    )
    ops = [usage, create] if order == "usage-first" else [create, usage]
    if order == "usage-first":
        store.apply(*usage)
        row = store.reader().get_session("s")
        assert row["placeholder"] is True and row["source"] == "telegram"
        store.apply(*create)
    else:
        for op in ops:
            store.apply(*op)
    row = store.reader().get_session("s")
    assert (row["source"], row["model"], row["title"], row["placeholder"], row["started_at"]) == (
        "telegram",
        "gpt-5",
        "Chat",
        False,
        1_700_000_000,
    )
    assert row["usage"]["calls"] == 1 and row["usage"]["input_tokens"] == CODEX["input_tokens"]


def test_placeholder_from_a_sourceless_op_takes_the_creates_source(store):
    store.apply("usage.record", {"session_id": "s", "usage": CODEX, "source": "unknown"})
    store.apply("session.create", {"session_id": "s", "source": "discord"})
    assert store.reader().get_session("s")["source"] == "discord"
    # ...but a created session's source is never overwritten by a later op
    store.apply("usage.record", {"session_id": "s", "usage": ANTHROPIC, "source": "cron"})
    store.apply("session.create", {"session_id": "s", "source": "cron"})
    assert store.reader().get_session("s")["source"] == "discord"


def test_one_response_written_as_several_records_counts_once(store):
    """Claude Code writes one API response as one record per content block, repeating the
    usage (growing while it streams). The naive sum doubles it."""
    partial = {**ANTHROPIC, "output_tokens": 3}
    store.apply(
        "messages.append",
        {
            "session_id": "s",
            "messages": [
                assistant(
                    "thinking…",
                    usage=partial,
                    response_id="msg_A",
                    model="claude-sonnet-4-5",
                    id="r1",
                ),
                assistant(
                    None,
                    usage=ANTHROPIC,
                    response_id="msg_A",
                    model="claude-sonnet-4-5",
                    id="r2",
                    tool_calls=[
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "ls", "arguments": "{}"},
                        }
                    ],
                ),
            ],
        },
    )
    store.apply(
        "messages.append",
        {
            "session_id": "s",
            "messages": [
                assistant(
                    "done", usage=ANTHROPIC, response_id="msg_A", model="claude-sonnet-4-5", id="r3"
                )
            ],
        },
    )
    rows = _usage(store)
    assert len(rows) == 1 and (rows[0]["input"], rows[0]["output"]) == (3210, 50)
    assert rows[0]["cost"] > 0


def test_listing_and_show_carry_totals_and_cli_reports(quill):
    ops = [
        {"op": "session.create", "data": {"session_id": "a", "source": "cli", "model": "gpt-5"}},
        {
            "op": "messages.append",
            "data": {
                "session_id": "a",
                "messages": [
                    user("q"),
                    assistant("a", usage=CODEX, response_id="r1", timestamp=1_760_000_000),
                ],
            },
        },
        {
            "op": "usage.record",
            "data": {
                "session_id": "a",
                "task": "compression",
                "usage": OPENAI_CHAT,
                "ts": 1_760_090_000,
            },
        },
        {
            "op": "usage.record",
            "data": {
                "session_id": "b",
                "source": "cron",
                "model": "mystery-1",
                "usage": ANTHROPIC,
                "ts": 1_760_090_000,
            },
        },
    ]
    quill.run("push", input="\n".join(json.dumps(o) for o in ops))
    quill.drain()
    listed = {s["id"]: s for s in quill.json("sessions", "list")["sessions"]}
    assert listed["a"]["usage"]["calls"] == 2
    assert listed["a"]["usage"]["input_tokens"] == CODEX["input_tokens"] + 1000
    assert listed["b"]["usage"]["cost_usd"] is None and listed["b"]["usage"]["unpriced"] == 1
    shown = quill.json("sessions", "show", "a")
    assert shown["session"]["usage"] == listed["a"]["usage"]
    assert "usage: 2 call(s)" in quill.run("sessions", "show", "a").stdout

    by_task = quill.json("usage", "--by", "task")["usage"]
    assert {r["task"]: r["calls"] for r in by_task} == {"turn": 2, "compression": 1}
    by_day = quill.json("usage", "--by", "day", "--by", "source")["usage"]
    assert {(r["day"], r["source"]) for r in by_day} == {
        ("2025-10-09", "cli"),
        ("2025-10-10", "cli"),
        ("2025-10-10", "cron"),
    }
    since = quill.json("usage", "--since", "2025-10-10")["usage"]
    assert since[0]["calls"] == 2
    rows = list(csv.DictReader(io.StringIO(quill.run("usage", "--by", "session", "--csv").stdout)))
    assert [r["session"] for r in rows] == ["a", "b"] and rows[1]["cost_usd"] == ""
    human = quill.run("usage", "--by", "model").stdout
    assert "unpriced" in human and "mystery-1" in human
    assert quill.run("usage", "--by", "nope", check=False).returncode == 2

"""Export that round-trips: Quill op JSONL back through `quill import` into a
fresh home gives the same canonical store (states, lineage, flags, usage, blobs, system prompts
and tools); a cut-off export is imported up to its bad lines. An export imported again:
tests/test_export_reimport.py."""

from __future__ import annotations

import base64
import json

import pytest
from conftest import CORPUS, QuillCLI
from export_helpers import three_session_export

from quill.store.sqlite.connection import open_reader

_SESSION = (
    "id, source, model, title, cwd, key, parent_id, parent_kind, started_at, ended_at, end_reason, "
    "archived, pinned, hidden, meta, owner_host, owner_pid, owner_started, placeholder"
)
_MESSAGE = (  # the text, whatever its stored form ([store] pack_min_bytes)
    "ext_id, role, quill_text(content), parts, tool_calls, tool_call_id, tool_name, reasoning, "
    "finish_reason, ts, extra, state"
)
_USAGE = (
    "task, model, provider, source, response_id, input_tokens, output_tokens, cache_read_tokens, "
    "cache_write_tokens, reasoning_tokens, cost_usd, price_version, ts, day, raw"
)


def canonical(home) -> dict:
    """Everything a store holds about its sessions, without store ids, arrival times or batch
    ids: sessions, each session's rows in order (state, copy lineage as a position), usage
    (its message named by position), blobs."""
    conn = open_reader(home / "state.db")
    try:
        # a placeholder's start travels with its messages (messages.restore's started_at); one
        # with no messages (made by a usage.record alone) starts at its import
        start = (
            "CASE WHEN placeholder = 1 AND NOT EXISTS "
            "(SELECT 1 FROM messages m WHERE m.session_id = sessions.id) "
            "THEN NULL ELSE started_at END"
        )
        sessions = conn.execute(
            f"SELECT {_SESSION.replace('started_at', start)} FROM sessions ORDER BY id"
        ).fetchall()
        rows, pos = {}, {}
        for (sid,) in conn.execute("SELECT id FROM sessions ORDER BY id").fetchall():
            got = conn.execute(
                f"SELECT id, origin_id, {_MESSAGE} FROM messages WHERE session_id = ? ORDER BY id",
                (sid,),
            ).fetchall()
            for i, r in enumerate(got):
                pos[r[0]] = (sid, i)
            rows[sid] = [(pos.get(r[1]), *r[2:]) for r in got]
        usage = sorted(
            (
                (r[0], pos.get(r[1]), *r[2:])
                for r in conn.execute(
                    f"SELECT session_id, message_id, {_USAGE} FROM usage"
                ).fetchall()
            ),
            key=repr,
        )
        blobs = sorted(conn.execute("SELECT sha256, encoding, data FROM blobs").fetchall())
        return {"sessions": sessions, "rows": rows, "usage": usage, "blobs": blobs}
    finally:
        conn.close()


def _round_trip(quill: QuillCLI, tmp_path) -> tuple[dict, dict, str]:
    quill.drain()
    out = tmp_path / "export.jsonl"
    quill.run("export", "-o", str(out))
    fresh = QuillCLI(tmp_path / "fresh")
    report = fresh.json("import", str(out))
    assert report[0]["format"] == "quill-export"
    fresh.drain()
    assert fresh.status()["spool"]["quarantined"] == 0
    return canonical(quill.home), canonical(fresh.home), out.read_text(encoding="utf-8")


@pytest.mark.corpus
def test_whole_corpus_round_trips_through_quill_export(quill, tmp_path):
    quill.run(
        "import", str(CORPUS), check=False
    )  # files of unsupported formats are named and skipped
    before, after, text = _round_trip(quill, tmp_path)
    assert before["sessions"] and sum(len(r) for r in before["rows"].values()) > 1000
    assert {s for r in before["rows"].values() for s in [x[12] for x in r]} >= {"live", "rewound"}
    assert before["usage"] and before["blobs"]
    assert after == before
    # importing the same export again changes nothing (batch ids are content-derived)
    fresh = QuillCLI(tmp_path / "fresh")
    fresh.run("import", str(tmp_path / "export.jsonl"))
    fresh.drain()
    assert canonical(fresh.home) == before


def test_states_lineage_flags_and_usage_round_trip(quill, tmp_path):
    img = base64.b64encode(bytes(range(256)) * 8).decode()
    ops = [
        {
            "op": "session.create",
            "data": {
                "session_id": "s",
                "source": "cli",
                "model": "gpt-5",
                "key": "chat:1",
                "cwd": "/r",
                "title": "T",
                "meta": {"k": 1},
            },
        },
        {
            "op": "messages.append",
            "data": {
                "session_id": "s",
                "messages": [
                    {"role": "user", "content": "q1", "id": "u1"},
                    {
                        "role": "assistant",
                        "content": "a1",
                        "id": "a1",
                        "usage": {"prompt_tokens": 9, "completion_tokens": 3},
                        "response_id": "r1",
                    },
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "see"},
                            {
                                "type": "image_url",
                                "image_url": {"url": f"data:image/png;base64,{img}"},
                            },
                        ],
                        "id": "u2",
                    },
                    {"role": "assistant", "content": "a2", "id": "a2"},
                ],
            },
        },
        {
            "op": "messages.compact",
            "data": {
                "session_id": "s",
                "tail_count": 1,
                "messages": [
                    {"role": "user", "content": "[summary]"},
                    {"role": "assistant", "content": "a2"},
                ],
            },
        },
        {
            "op": "messages.append",
            "data": {"session_id": "s", "messages": [{"role": "user", "content": "q3"}]},
        },
        {"op": "messages.rewind", "data": {"session_id": "s", "user_turn": -1}},
        {
            "op": "usage.record",
            "data": {
                "session_id": "s",
                "task": "title",
                "usage": {"input_tokens": 5, "output_tokens": 1},
            },
        },
        {"op": "session.flags", "data": {"session_id": "s", "pinned": True}},
        {
            "op": "session.end",
            "data": {"session_id": "s", "reason": "user_exit", "ended_at": 1_760_000_000},
        },
        {
            "op": "usage.record",
            "data": {
                "session_id": "early",
                "source": "cron",
                "usage": {"input_tokens": 1, "output_tokens": 1},
            },
        },
        {
            "op": "session.create",
            "data": {"session_id": "child", "parent_id": "s", "parent_kind": "delegate"},
        },
        {
            "op": "messages.append",
            "data": {"session_id": "child", "messages": [{"role": "user", "content": "sub"}]},
        },
    ]
    quill.run("push", input="\n".join(json.dumps(o) for o in ops))
    before, after, _ = _round_trip(quill, tmp_path)
    assert [r[12] for r in before["rows"]["s"]] == [
        "compacted",
        "compacted",
        "compacted",
        "superseded",
        "live",
        "live",
        "rewound",
    ]
    assert before["rows"]["s"][5][0] == ("s", 3)  # the carried copy points at its original
    assert after["sessions"] == before["sessions"]
    assert after == before
    fresh = QuillCLI(tmp_path / "fresh")

    def strip(t):
        return [{k: v for k, v in m.items() if k != "message_id"} for m in t["messages"]]

    assert strip(fresh.json("sessions", "show", "s", "--view", "audit")) == strip(
        quill.json("sessions", "show", "s", "--view", "audit")
    )
    assert fresh.json("usage", "--by", "task") == quill.json("usage", "--by", "task")


def test_system_prompts_and_tools_round_trip_and_the_model_view_returns_them(quill, tmp_path):
    """The content-addressed prompt/tool store survives export → import
    into an empty home (same values, same sha256 refs, each change after the same message),
    and the model view (CLI --json, Client, HTTP: one ``Client.transcript``) returns them."""
    from quill.ops.client.client import Client

    tools = [{"type": "function", "function": {"name": "ls", "parameters": {"type": "object"}}}]
    reloaded = tools + [
        {"type": "function", "function": {"name": "cat", "parameters": {"type": "object"}}}
    ]

    def say(sid, text):
        return {
            "op": "messages.append",
            "data": {"session_id": sid, "messages": [{"role": "user", "content": text}]},
        }

    ops = [
        {
            "op": "session.create",
            "data": {
                "session_id": "s",
                "source": "cli",
                "system_prompt": "You are terse.",
                "tools": tools,
            },
        },
        say("s", "one"),
        say("s", "two"),
        {"op": "session.create", "data": {"session_id": "s", "tools": reloaded}},  # a tool reload
        say("s", "three"),
        {"op": "session.create", "data": {"session_id": "s", "system_prompt": "You are kind."}},
        {
            "op": "session.create",
            "data": {"session_id": "s", "system_prompt": "You are terse."},
        },  # and back
        {
            "op": "session.create",
            "data": {"session_id": "t", "source": "cli", "tools": tools},
        },  # shares tools
        say("t", "hi"),
        {"op": "session.create", "data": {"session_id": "late", "source": "cli"}},
        say("late", "before any prompt"),
        {
            "op": "session.create",
            "data": {"session_id": "late", "system_prompt": "Set after a message."},
        },
    ]
    quill.run("push", input="\n".join(json.dumps(o) for o in ops))
    before, after, _ = _round_trip(quill, tmp_path)
    assert after == before
    fresh = QuillCLI(tmp_path / "fresh")

    def contexts(home) -> dict:
        """Each session's context with each change's place as a row position, not a store id."""
        client = Client(home=home)
        out = {}
        for sid in ("s", "t", "late"):
            ctx = client.context(sid)
            ids = [m["message_id"] for m in client.messages(sid, "audit")]
            ctx["history"] = [
                (
                    h["kind"],
                    h["sha256"],
                    None if h["after_message_id"] is None else ids.index(h["after_message_id"]),
                )
                for h in ctx["history"]
            ]
            out[sid] = ctx
        return out

    original = contexts(quill.home)
    assert original["s"]["tools"] == reloaded and original["s"]["system_prompt"] == "You are terse."
    assert [h[0] for h in original["s"]["history"]] == [
        "system_prompt",
        "tools",
        "tools",
        "system_prompt",
        "system_prompt",
    ]
    assert original["late"]["history"][0][2] == 0  # after the first message
    assert contexts(fresh.home) == original
    # the model view returns them: CLI --json and the Client (HTTP serves Client.transcript)
    for home, cli in ((quill.home, quill), (fresh.home, fresh)):
        shown = cli.json("sessions", "show", "s", "--view", "model")
        assert shown["context"] == {"system_prompt": "You are terse.", "tools": reloaded}
        assert Client(home=home).transcript("s", "model")["context"] == shown["context"]
        assert "history" in Client(home=home).transcript("s", "audit")["context"]
    # the fine-tuning export carries them
    chat = json.loads(quill.run("export", "s", "--format", "openai").stdout)
    assert (
        chat["messages"][0] == {"role": "system", "content": "You are terse."}
        and chat["tools"] == reloaded
    )


def test_a_cut_off_export_is_imported_up_to_its_bad_lines_and_the_other_files_too(quill, tmp_path):
    """A truncated or edited export (e.g. `head -c` of an export) is reported line
    by line like any other format and the rest of it, and of the other files named, is still
    imported (it stopped the whole import with exit 2 and no file name)."""
    out = three_session_export(quill, tmp_path)
    lines = out.read_text(encoding="utf-8").splitlines(keepends=True)
    folder = tmp_path / "in"
    folder.mkdir()
    # header, the first ops whole, a line that is not an op, then the last op cut in half
    cut = "".join(lines[:-1]) + '{"not": "an op"}\n' + lines[-1][: len(lines[-1]) // 2]
    (folder / "a-cut.jsonl").write_text(cut, encoding="utf-8")
    sharegpt = {
        "id": "conv-1",
        "conversations": [
            {"from": "human", "value": "hello there"},
            {"from": "gpt", "value": "hi"},
        ],
    }
    (folder / "b-sharegpt.jsonl").write_text(json.dumps(sharegpt) + "\n", encoding="utf-8")
    fresh = QuillCLI(tmp_path / "fresh")
    proc = fresh.run("import", str(folder), "--json", check=False)
    assert proc.returncode == 0, proc.stderr
    report = {e["path"].rsplit("/", 1)[1]: e for e in json.loads(proc.stdout)}
    problems = report["a-cut.jsonl"]["problems"]
    assert [p["line"] for p in problems] == [len(lines), len(lines) + 1]
    assert report["b-sharegpt.jsonl"]["new"] == 2
    fresh.drain()
    listed = {s["id"] for s in fresh.json("sessions", "list")["sessions"]}
    assert {"s0", "s1"} <= listed and any(
        s.startswith("sharegpt:b-sharegpt.jsonl:") for s in listed
    )

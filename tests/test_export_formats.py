"""Export's readable and training views: Markdown (tool output with its own fences kept in
one code block), OpenAI chat and ShareGPT (read back by the ShareGPT importer)."""

from __future__ import annotations

import json

from conftest import QuillCLI


def test_readable_and_training_formats(quill, tmp_path):
    ops = [
        {
            "op": "session.create",
            "data": {"session_id": "s", "source": "cli", "title": "Fix it", "key": "k"},
        },
        {
            "op": "messages.append",
            "data": {
                "session_id": "s",
                "messages": [
                    {"role": "system", "content": "be brief"},
                    {"role": "user", "content": "list files"},
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": "c1",
                                "type": "function",
                                "function": {"name": "ls", "arguments": '{"path": "."}'},
                            }
                        ],
                    },
                    {"role": "tool", "tool_call_id": "c1", "name": "ls", "content": "a.py\nb.py"},
                    {"role": "assistant", "content": "two files", "reasoning": "count the lines"},
                ],
            },
        },
        {"op": "session.create", "data": {"session_id": "other", "source": "codex"}},
        {
            "op": "messages.append",
            "data": {"session_id": "other", "messages": [{"role": "user", "content": "x"}]},
        },
    ]
    quill.run("push", input="\n".join(json.dumps(o) for o in ops))
    quill.drain()
    md = quill.run("export", "s", "--format", "markdown").stdout
    assert md.startswith("# Fix it") and "<details><summary>tool call · ls</summary>" in md
    assert "<details><summary>tool result · ls</summary>" in md and "two files" in md
    chat = [
        json.loads(line)
        for line in quill.run("export", "--source", "cli", "--format", "openai").stdout.splitlines()
    ]
    assert len(chat) == 1 and [m["role"] for m in chat[0]["messages"]] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert chat[0]["messages"][2]["tool_calls"][0]["function"]["name"] == "ls"
    share = [
        json.loads(line)
        for line in quill.run("export", "--key", "k", "--format", "sharegpt").stdout.splitlines()
    ]
    assert [t["from"] for t in share[0]["conversations"]] == [
        "system",
        "human",
        "gpt",
        "tool",
        "gpt",
    ]
    call = (
        share[0]["conversations"][2]["value"].split("<tool_call>\n")[1].split("\n</tool_call>")[0]
    )
    # Hermes-style: the arguments object itself, not OpenAI's JSON text of it
    assert json.loads(call) == {"name": "ls", "arguments": {"path": "."}}
    assert share[0]["conversations"][4]["value"] == "<think>\ncount the lines\n</think>\ntwo files"
    # the ShareGPT importer reads the reasoning back (not dropped)
    (tmp_path / "share.jsonl").write_text(json.dumps(share[0]) + "\n")
    again = QuillCLI(tmp_path / "again")
    again.run("import", str(tmp_path / "share.jsonl"))
    again.drain()
    sid = again.json("sessions", "list", "--json")["sessions"][0]["id"]
    last = again.json("sessions", "show", sid, "--json")["messages"][-1]
    assert (last["content"], last["reasoning"]) == ("two files", "count the lines")
    every = quill.run("export").stdout.splitlines()
    assert json.loads(every[0])["sessions"] == 2
    assert quill.run("export", "nope", check=False).returncode == 3


def test_markdown_keeps_tool_output_holding_its_own_fences_in_one_code_block(quill):
    """A tool result (or call arguments) holding ``` lines closed the export's 3-backtick fence
    early and the rest rendered as Markdown (found on a real Codex transcript)."""
    from markdown_it import MarkdownIt

    output = "run this:\n```bash\nls <dir>\n```\n````\nand ~~~ too\n# not a heading"
    quill.run(
        "push",
        "--session",
        "f",
        input="\n".join(
            json.dumps(m)
            for m in [
                {"role": "user", "content": "go"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "sh<x>", "arguments": '{"cmd": "```"}'},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "c1", "name": "sh<x>", "content": output},
            ]
        ),
    )
    quill.drain()
    md = quill.run("export", "f", "--format", "markdown").stdout
    blocks = [t.content.rstrip("\n") for t in MarkdownIt().parse(md) if t.type == "fence"]
    assert blocks == ['{"cmd": "```"}', output]
    assert "sh&lt;x&gt;" in md and "<x>" not in md

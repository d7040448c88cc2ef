"""``quill sessions show`` pages a session's messages with the cursor of ``GET
/api/v1/sessions/{id}/messages`` (``--limit``, ``--after``, ``next`` in ``--json``; a note on
stderr names the next page), so a long session is neither read nor printed whole: by default
a page holds the first 1,000 messages. Before, the whole view was read and printed."""

from __future__ import annotations

import json

import httpx
import pytest
from conftest import QuillCLI
from harness import Home
from service_helpers import served

from quill.ops.cli.base import run
from quill.ops.cli.root import cli


@pytest.fixture
def home(tmp_path, backend):
    h = Home(tmp_path / "h", backend, watch={"enabled": False})
    h.append(
        "messages.append",
        {
            "session_id": "long",
            "messages": [{"role": "user", "content": f"line {n}"} for n in range(7)],
        },
    )
    h.append(
        "messages.append",
        {
            "session_id": "big",
            "messages": [{"role": "user", "content": f"big {n}"} for n in range(1005)],
        },
    )
    h.drain()
    yield h
    h.close()


def _quill(capsys, home, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = run(cli, ["--home", str(home.root), *args])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("view", ["display", "model", "audit"])
def test_show_pages_a_session_with_the_messages_cursor(capsys, home, view):
    texts, after, pages = [], [], 0
    while True:
        argv = ["sessions", "show", "long", "--view", view, "--limit", "3", *after]
        code, out, err = _quill(capsys, home, *argv, "--json")
        assert code == 0, err
        doc = json.loads(out)
        texts += [m["content"] for m in doc["messages"]]
        pages += 1
        code, human, note = _quill(capsys, home, *argv)
        assert code == 0 and doc["messages"][0]["content"] in human
        if doc["next"] is None:
            assert "--after" not in note
            break
        assert f"--after {doc['next']} " in note
        after = ["--after", doc["next"]]
    assert texts == [f"line {n}" for n in range(7)] and pages == 3


def test_show_defaults_to_a_page_and_shares_the_http_cursor(capsys, home):
    code, out, err = _quill(capsys, home, "sessions", "show", "big", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert len(doc["messages"]) == 1000 and doc["next"] is not None
    code, human, note = _quill(capsys, home, "sessions", "show", "big")
    assert "big 999" in human and "big 1000" not in human
    assert f"--after {doc['next']} " in note and "first 1000 of 1005 messages" in human
    with served(QuillCLI(home.root)) as base:
        http = httpx.get(f"{base}/api/v1/sessions/big/messages", timeout=60).json()
        rest = httpx.get(
            f"{base}/api/v1/sessions/big/messages", params={"after": doc["next"]}, timeout=60
        ).json()
    assert http["next"] == doc["next"]  # one cursor: the CLI's and the HTTP route's
    assert [m["content"] for m in rest["messages"]] == [f"big {n}" for n in range(1000, 1005)]
    code, out, _ = _quill(capsys, home, "sessions", "show", "big", "--after", doc["next"])
    assert code == 0 and "big 1004" in out and "big 999" not in out
    # a cursor of another session or view, or --latest with a page, is a usage error
    for argv in (
        ["sessions", "show", "long", "--after", doc["next"]],
        ["sessions", "show", "big", "--view", "audit", "--after", doc["next"]],
        ["sessions", "show", "big", "--latest", "2", "--limit", "3"],
    ):
        code, out, _ = _quill(capsys, home, *argv, "--json")
        assert code == 2 and json.loads(out)["error"]["kind"] == "usage", argv
    code, out, _ = _quill(capsys, home, "sessions", "show", "big", "--latest", "2", "--json")
    assert [m["content"] for m in json.loads(out)["messages"]] == ["big 1003", "big 1004"]

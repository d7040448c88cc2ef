"""What was imported reads back the same through every read path (property test).

Random messages — text with lone surrogates, NULs, control and bidi characters, CJK and
emoji, 70,000-character values; content parts holding a binary payload (stored once as a
blob); deeply nested and arbitrary JSON extras; tool calls whose arguments hold the same odd
text; reasoning — are appended through ``quill.Client`` and drained by the production writer
into a real SQLite store. Then every read path must give back what the store's normaliser
kept (``normalize.scrub``: NULs dropped, lone surrogates → U+FFFD; nothing else changed):

* ``Reader.get_messages`` (audit view) and ``quill.Client.transcript`` / ``messages``;
* ``GET /api/v1/sessions/{id}/messages?view=audit`` on a real ``quill serve``, whole and as
  its latest page (``latest=``);
* the dashboard on that server: the transcript page (``/sessions/{id}``, display and audit,
  clipped texts), the session list and its search (``/sessions?q=``);
* export in every format, written as ``quill export`` writes it (``ops.cli.export``): ``quill``
  (each row's message, blob references resolved) and the readable formats (``markdown``,
  ``openai``, ``sharegpt``), each valid UTF-8 (JSON lines that parse) holding every
  message's marker it carries; then ``quill export`` of every session in each format;
* search: each message's marker word through the word route, the trigram (substring) route
  and its kind (a tool result's marker is also in its tool name), from the client and from
  HTTP; ``sessions()`` listing counts;
* the CLI: ``quill sessions list``, ``quill sessions show`` in each view and ``--json``, and
  ``quill search`` by word, prefix, substring, short scan and rank, text and ``--json``.
Every search route and transcript view on both backends: ``test_read_paths_routes.py``.

The read paths were found by listing ``store/read``, ``store/search``, ``ops/client/reads.py``,
``ops/client/search.py``, ``ops/service/api_reads.py`` and ``ops/transfer/export*.py``.
``QUILL_FUZZ_N`` sets the examples (default 8).
"""

from __future__ import annotations

import base64
import html
import io
import itertools
import json
import os
import re

import httpx
import pytest
from conftest import QuillCLI
from fuzz_helpers import JSON_VALUES
from harness import drain
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from service_helpers import bearer, served, token

from quill import Client
from quill.ops.cli.export import _write_session
from quill.ops.transfer import export
from quill.store.apply import blobs
from quill.store.apply.normalize import scrub, scrub_json
from quill.store.read.reader import Reader

N = int(os.environ.get("QUILL_FUZZ_N", "8"))
_IDS = itertools.count()

_PIECES = st.sampled_from(
    ["\ud800", "\udfff", "\x00", "a\x00b", "é中🚀", "你好世界", "\u202e", "\t\n", "\x07", '"\\']
) | st.text(max_size=12)
_HUGE = st.just("y" * 70_000)


def _deep(depth: int) -> object:
    value: object = "bottom"
    for i in range(depth):
        value = {"k": [value, i]}
    return value


@st.composite
def messages(draw) -> list[dict]:
    """1–3 messages, each holding a unique marker word (returned in ``extra["marker"]``)."""
    out = []
    for _ in range(draw(st.integers(1, 3))):
        marker = f"zqmark{next(_IDS)}x"
        odd = "".join(draw(st.lists(_PIECES, max_size=6)))
        text = f"{odd} {marker} {draw(_PIECES)}"
        if draw(st.booleans()):
            text += draw(_HUGE)
        shape = draw(st.sampled_from(["text", "parts", "tool_call", "tool_result", "reasoning"]))
        extra = {
            "marker": marker,
            "junk": draw(JSON_VALUES),
            "deep": _deep(draw(st.integers(1, 60))),
        }
        if shape == "text":
            msg = {"role": draw(st.sampled_from(["user", "assistant"])), "content": text}
        elif shape == "parts":
            payload = base64.b64encode(draw(st.binary(min_size=800, max_size=1200))).decode()
            msg = {
                "role": "user",
                "content": [
                    {"type": "text", "text": text},
                    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{payload}"}},
                ],
            }
        elif shape == "tool_call":
            # json.dumps escapes a lone surrogate (a cut emoji): "\ud83d" in the argument text
            args = json.dumps({"q": text[:200] + "\ud83d", "nested": draw(JSON_VALUES)})
            msg = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": marker,
                        "type": "function",
                        "function": {"name": "grep", "arguments": args},
                    }
                ],
            }
        elif shape == "tool_result":
            msg = {
                "role": "tool",
                "tool_call_id": f"call-{marker}",
                "name": f"{odd[:20]}_{marker}",
                "content": text,
            }
        else:
            msg = {"role": "assistant", "content": odd or "-", "reasoning": text}
        msg["extra_fields"] = extra
        out.append(msg)
    return out


def _expected(msg: dict) -> dict:
    """The fields the store keeps, as the normaliser leaves them."""
    out = {"role": msg["role"], "content": scrub_json(msg.get("content"))}
    if msg.get("tool_calls"):
        calls = scrub_json(msg["tool_calls"])
        out["tool_calls"] = calls
    if msg.get("reasoning") is not None:
        out["reasoning"] = scrub(msg["reasoning"])
    if msg["role"] == "tool":
        out.update(tool_call_id=scrub(msg["tool_call_id"]), name=scrub(msg["name"]))
    return out


def _kept(msg: dict) -> dict:
    """The same fields of a message as a read path returns it."""
    out = {"role": msg["role"], "content": msg.get("content")}
    if msg.get("tool_calls"):
        out["tool_calls"] = msg["tool_calls"]
    if msg.get("reasoning") is not None:
        out["reasoning"] = msg["reasoning"]
    if msg["role"] == "tool":
        out.update(tool_call_id=msg.get("tool_call_id"), name=msg.get("name"))
    return out


def _exports(r: Reader, sid: str) -> dict[str, str]:
    """The session in every export format, as ``quill export`` writes it."""
    out = {}
    for fmt in export.FORMATS:
        buf = io.StringIO()
        _write_session(r, buf, fmt, 0, sid)
        out[fmt] = buf.getvalue()
    return out


def _strings(value: object):
    """Every string (keys too) in a decoded JSON value."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _check_exports(texts: dict[str, str], sent: list[dict]) -> None:
    """Each format is valid UTF-8 with no NUL, its JSON lines parse to values whose strings
    hold no NUL or lone surrogate (an escaped one, ``"\\ud800"``, would decode to one), and
    it carries every message's marker that the format keeps (``openai`` has no reasoning).
    A tool call's ``arguments`` is a JSON text: escapes inside it are its characters."""
    for fmt, text in texts.items():
        text.encode("utf-8")  # strict: a lone surrogate would raise here
        assert "\x00" not in text, fmt
        if fmt != "markdown":
            for line in text.split("\n")[:-1]:  # JSON lines: \n only (U+2028 is text)
                for value in _strings(json.loads(line)):
                    value.encode("utf-8")
                    assert "\x00" not in value, fmt
        for m in sent:
            if fmt == "openai" and m.get("reasoning"):
                continue
            assert m["marker"] in text, (fmt, m["marker"])


@pytest.fixture(scope="module")
def served_store(tmp_path_factory):
    quill = QuillCLI(tmp_path_factory.mktemp("readpaths") / "home")
    quill.run("push", "--session", "warm", input=json.dumps({"role": "user", "content": "x"}))
    drain(quill.home)
    tok = token(quill, "read")
    with served(quill) as base:
        yield quill, base, bearer(tok)


def test_every_read_path_returns_what_was_imported(served_store):
    quill, base, auth = served_store
    client = Client(quill.home)
    http = httpx.Client(base_url=base, headers=auth, timeout=60)

    @settings(
        max_examples=N,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(messages())
    def check(msgs):
        sid = f"fuzz-{next(_IDS)}"
        sent = []
        for m in msgs:  # extra_fields are the message's own extra keys
            extra = m.pop("extra_fields")
            sent.append({**m, **extra})
        client.append(sid, sent, source="fuzz")
        drain(quill.home)
        want = [_expected(m) for m in sent]
        markers = [m["marker"] for m in sent]

        with Reader(quill.home / "state.db") as r:
            audit = r.get_messages(sid, "audit")
            exports = _exports(r, sid)
            ops = list(export.quill_ops(r, sid))
            # A payload repeated in the session travels inline once; later rows keep the
            # store's reference (the import resolves it): resolve it here the same way.
            ops = json.loads(
                re.sub(
                    re.escape(blobs.REF_PREFIX) + "([0-9a-f]{64})",
                    lambda ref: blobs.get(r.conn, ref.group(1)),
                    json.dumps(ops),
                )
            )
        assert [_kept(m) for m in audit] == want
        assert [m["marker"] for m in audit] == [scrub(x) for x in markers]
        assert [m.get("deep") for m in audit] == [m["deep"] for m in sent]
        assert [m.get("junk") for m in audit] == [scrub_json(m["junk"]) for m in sent]
        _check_exports(exports, sent)

        assert [_kept(m) for m in client.messages(sid, "audit")] == want
        got = http.get(f"/api/v1/sessions/{sid}/messages", params={"view": "audit"})
        assert got.status_code == 200, got.text
        assert [_kept(m) for m in got.json()["messages"]] == want
        page = http.get(f"/api/v1/sessions/{sid}/messages", params={"view": "audit", "latest": 1})
        assert page.status_code == 200, page.text
        assert [_kept(m) for m in page.json()["messages"]] == want[-1:]
        for view in ("display", "audit"):  # the dashboard's transcript page (clipped texts)
            shown = httpx.get(f"{base}/sessions/{sid}", params={"view": view}, timeout=60)
            assert shown.status_code == 200, shown.text
            for marker in markers:
                assert marker in shown.text, (view, marker)
        listing = httpx.get(f"{base}/sessions", params={"q": markers[0]}, timeout=60)
        assert listing.status_code == 200 and html.escape(sid) in listing.text

        rows = [
            row["message"]
            for op in ops
            if op["op"] == "messages.restore"
            for row in op["data"]["rows"]
        ]
        assert [_kept(m) for m in rows] == want
        assert [m["extra"]["deep"] for m in rows] == [m["deep"] for m in sent]

        (listed,) = [s for s in client.sessions(source="fuzz", limit=1000) if s["id"] == sid]
        assert listed["message_count"] == len(sent)

        for m, marker in zip(sent, markers):
            kinds = (
                ["tool"]
                if m.get("tool_calls") or m["role"] == "tool"  # a result: by its tool name
                else ["reasoning"]
                if m.get("reasoning")
                else ["text"]
            )
            for substring in (False, True):
                hits = client.search(marker, session_id=sid, substring=substring, context=False)
                assert [h["session_id"] for h in hits] == [sid], (marker, substring, hits)
                hits = client.search(marker, session_id=sid, kinds=kinds, substring=substring)
                assert len(hits) == 1, (marker, kinds, substring)
            found = http.get("/api/v1/search", params={"q": marker, "session_id": sid})
            assert found.status_code == 200, found.text
            assert len(found.json()["hits"]) == 1

    check()
    # The CLI's own views over what the examples stored, text and --json: the listing, a
    # transcript in each view, and search by word, substring, short scan and rank.
    listed = quill.run("sessions", "list", "--source", "fuzz", "--limit", "1000").stdout
    shown = [s["id"] for s in client.sessions(source="fuzz", limit=1000)]
    assert all(sid in listed for sid in shown)
    for sid in shown[:3]:
        for view in ("display", "audit", "model"):
            assert quill.run("sessions", "show", sid, "--view", view).stdout
        json.loads(quill.run("sessions", "show", sid, "--json").stdout)
    marker = client.messages(shown[0], "audit")[0]["marker"]
    for args in ((marker,), ("zqmark*",), ("zqm", "--substring"), ("zq", "--substring")):
        assert "fuzz-" in quill.run("search", *args, "--limit", "50").stdout, args
        assert json.loads(quill.run("search", *args, "--json").stdout)["hits"], args
    assert quill.run("search", "zqmark*", "--order", "relevance").returncode == 0
    for fmt in export.FORMATS:  # the CLI over every session at once, in each format
        out = quill.home.parent / f"all.{fmt}"
        quill.run("export", "--format", fmt, "-o", str(out))
        assert out.read_text(encoding="utf-8", errors="strict").count("zqmark") > 0

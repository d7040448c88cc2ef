"""Every search route looks in the same texts: a query never finds less than a query it
contains would, on the same rows (both backends, indexed rows and the unindexed tail)."""

from __future__ import annotations

import json
import random

import pytest
from semantics_helpers import Store, assistant, call, tool, user

from quill.store.search import plan as query
from quill.store.search import run as search_run
from quill.store.search import textfold
from quill.store.search.columns import TRIGRAM_PREFIX_CHARS


@pytest.fixture
def store(tmp_path, backend):
    s = Store(tmp_path, backend)
    yield s
    s.close()


def _append(store: Store, session_id: str, messages: list[dict]) -> None:
    assert store.apply("messages.append", {"session_id": session_id, "messages": messages}) == []


def _ids(r, q: str, **kw) -> set[int]:
    return {h["message_id"] for h in r.search(q, limit=1000, context=False, **kw)}


@pytest.mark.parametrize("indexed", [False, True])
def test_a_longer_cjk_query_finds_the_tool_output_its_two_character_part_finds(store, indexed):
    """The issue's example: '你好' (scan) found a tool output and '你好世界' (trigram) did not."""
    _append(
        store,
        "s",
        [
            user("run it"),
            assistant(None, tool_calls=[call("c1")]),
            tool("c1", "output: 你好世界 done"),
        ],
    )
    if indexed:
        store.index()
    assert query.plan("你好").kind == "scan" and query.plan("你好世界").kind == "trigram"
    with store.reader() as r:
        short, long_ = r.search("你好"), r.search("你好世界")
        assert [h["role"] for h in short] == ["tool"]
        assert [(h["message_id"], h["matched_in"]) for h in long_] == [
            (short[0]["message_id"], "text")
        ]
        assert long_[0]["snippet"] == "output: 你好世界 done"
        assert long_[0]["highlights"] == [[8, 12]]


@pytest.mark.parametrize("indexed", [False, True])
def test_trigram_queries_see_reasoning_long_text_and_tool_calls(store, indexed):
    """The texts outside the trigram index's view — text past its prefix, reasoning, tool-call
    arguments, emoji in any of them — are found by the 3+ character query as by its parts."""
    pad = "." * (TRIGRAM_PREFIX_CHARS + 10)
    _append(
        store,
        "s",
        [
            user(pad + " 数据库很快"),
            assistant("ok", reasoning="想一想 🎉🎊🎈 then"),
            assistant(None, tool_calls=[call("c1", "run", json.dumps({"q": "查询数据表"}))]),
            tool("c1", "ok", name="run"),
            assistant(None, tool_calls=[call("c2", "run", '{"q": "zq😀x"}')]),
        ],
    )
    if indexed:
        store.index()
    with store.reader() as r:
        for short, long_, where in (
            ("数据", "数据库很快", "text"),
            ("🎉", "🎉🎊🎈", "reasoning"),
            ("想一", "想一想", "reasoning"),
            ("查询", "查询数据表", "tool"),
        ):
            a, b = r.search(short), r.search(long_)
            assert [h["matched_in"] for h in b] == [where], long_
            assert {h["message_id"] for h in b} <= {h["message_id"] for h in a}, long_
        hit = r.search("数据库很快")[0]
        assert hit["snippet"].endswith(" 数据库很快") and hit["highlights"]
        # A word query and the substring query holding it agree on tool-call arguments too.
        assert query.plan("zq").kind == "fts" and query.plan("zq😀x").kind == "trigram"
        assert len(r.search("zq")) == len(r.search("zq😀x")) == 1


#: Characters of the random texts and queries: CJK, emoji, ASCII of both cases (both
#: backends fold these alike), never a character of the padding, the tool name or keys.
_ALPHABET = "你好世界数据库🚀🎉xyZQ"
#: On SQLite also characters that fold into others (KELVIN SIGN → k, É → é): the scan's
#: shortcuts (raw ``instr``, ``lower()``) must agree with FTS5's folding on them too.
#: PostgreSQL's ILIKE folds by the database's locale, which may be C.
_SQLITE_EXTRA = "\u212akKÉé"


def _random_text(rng: random.Random, alphabet: str = _ALPHABET) -> str:
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12)))


def _random_rows(rng: random.Random, alphabet: str) -> tuple[list[dict], list[tuple[str, ...]]]:
    """Messages over every role, length and text kind, and each one's searchable texts."""
    messages, texts = [], []
    for i in range(40):
        kind = rng.choice(["user", "assistant", "reasoning", "tool", "call", "long"])
        body = _random_text(rng, alphabet)
        if kind == "user":
            m, t = user(body), (body,)
        elif kind == "assistant":
            m, t = assistant(body), (body,)
        elif kind == "reasoning":
            other = _random_text(rng, alphabet)
            m, t = assistant(other, reasoning=body), (other, body)
        elif kind == "tool":
            m, t = tool(f"c{i}", body, name="run"), (body,)
        elif kind == "call":
            args = json.dumps({"q": body}, ensure_ascii=rng.random() < 0.5)
            m, t = assistant(None, tool_calls=[call(f"c{i}", "run", args)]), ("run", body)
        else:
            text = "." * (TRIGRAM_PREFIX_CHARS - rng.randint(0, 6)) + body
            m, t = rng.choice([user, assistant])(text), (text,)
        messages.append(m)
        texts.append(t)
    return messages, texts


@pytest.mark.parametrize("indexed", [False, True])
@pytest.mark.parametrize("seed", [1, 2])
def test_a_query_never_finds_less_than_a_query_it_contains(store, indexed, seed):
    """Property: for random stored texts and random substring queries q with a contained
    sub-query q', hits(q) ⊆ hits(q'), and both are exactly the rows holding them."""
    rng = random.Random(seed)
    alphabet = _ALPHABET + (_SQLITE_EXTRA if store.kind == "sqlite" else "")
    messages, texts = _random_rows(rng, alphabet)
    _append(store, "p", messages)
    if indexed:
        store.index()
    ids = store.ids("p")
    assert len(ids) == len(texts)

    def oracle(q: str) -> set[int]:
        f = textfold.fold(q)
        return {i for i, t in zip(ids, texts) if any(f in textfold.fold(x) for x in t)}

    with store.reader() as r:
        for _ in range(60):
            q = (
                _random_text(rng, alphabet)
                if rng.random() < 0.3
                else rng.choice(texts)[-1].strip(".")
            )
            a = rng.randrange(len(q))
            sub = q[a : rng.randint(a + 1, len(q))]
            got, got_sub = _ids(r, q, substring=True), _ids(r, sub, substring=True)
            assert got <= got_sub, (q, sub, got - got_sub)
            assert got == oracle(q), (q, query.plan(q, substring=True).kind)
            assert got_sub == oracle(sub), (sub, query.plan(sub, substring=True).kind)


def test_route_notes_say_every_text_is_searched():
    tri = search_run.route("你好世界")["note"]
    scan = search_run.route("你好")["note"]
    assert "tool calls" in tri and "reasoning" in tri and "not searched" in tri
    assert "tool calls" in scan and "older messages are not searched" in scan

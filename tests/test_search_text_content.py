"""Search without blind spots in what is searched: tool-call arguments and reasoning as text,
FTS5-consistent case folding, emoji, lone surrogates, any query bytes, queries of only excluded
terms. Real SQLite files through the real spool."""

from __future__ import annotations

import json
import subprocess

import apsw
import pytest
from conftest import REPO, QuillCLI, quill_env
from search_text_helpers import ISSUE_ARGS, _call
from semantics_helpers import Store, assistant, tool, user

from quill.spool import Spool
from quill.store.search import run as search_mod
from quill.store.search import textfold


@pytest.fixture
def store(tmp_path, backend):
    s = Store(tmp_path, backend)
    yield s
    s.close()


# -- tool-call arguments are text ------------------------------------------------------------


@pytest.mark.parametrize("indexed", [False, True])
def test_tool_call_argument_words_after_escapes_are_found(store, indexed):
    store.apply(
        "messages.append",
        {
            "session_id": "s",
            "messages": [
                user("edit the file"),
                assistant(None, tool_calls=[_call("c1", "edit", ISSUE_ARGS)]),
                tool("c1", "ok", name="edit"),
            ],
        },
    )
    if indexed:
        store.index()
    with store.reader() as r:
        for word in ("first", "secondword", "thirdword", "quotedword", "plainword"):
            got = r.search(word, kinds=["tool"])
            assert [h["role"] for h in got] == ["assistant"], word
            assert got[0]["matched_in"] == "tool"
        # the tool's name finds the call and its result (newest first)
        got = r.search("edit", kinds=["tool"])
        assert [(h["role"], h["matched_in"]) for h in got] == [
            ("tool", "tool"),
            ("assistant", "tool"),
        ]
        assert r.search("nsecondword") == [] and r.search("tthirdword") == []
        assert r.search("secondword", kinds=["text"]) == []
        assert r.search("c1") == [] and r.search("function") == []  # call ids/types are not text
        assert len(r.search('"secondword here"')) == 1  # a phrase inside an argument


@pytest.mark.parametrize("indexed", [False, True])
def test_arguments_given_as_objects_nested_or_not_json_are_text_too(store, indexed):
    calls = [
        _call("c1", "bash", {"cmd": "ls\nzebraword", "opts": {"deep": ["alpha\tomegaword", 4711]}}),
        _call("c2", "note", "plain\ntext argument with yakword"),
    ]
    store.apply(
        "messages.append", {"session_id": "s", "messages": [assistant("calling", tool_calls=calls)]}
    )
    if indexed:
        store.index()
    with store.reader() as r:
        for word in ("zebraword", "omegaword", "4711", "yakword", "bash", "note"):
            assert len(r.search(word, kinds=["tool"])) == 1, word


@pytest.mark.parametrize("indexed", [False, True])
def test_reasoning_is_searchable_and_filterable(store, indexed):
    store.apply(
        "messages.append",
        {
            "session_id": "s",
            "messages": [
                user("question about zebras"),
                assistant("the answer", reasoning="I ponder quaggas and zebras deeply"),
            ],
        },
    )
    if indexed:
        store.index()
    with store.reader() as r:
        got = r.search("quaggas")
        assert [(h["role"], h["matched_in"]) for h in got] == [("assistant", "reasoning")]
        assert "quaggas" in got[0]["snippet"]
        assert r.search("quaggas", kinds=["text", "tool"]) == []
        assert [h["role"] for h in r.search("zebras", kinds=["reasoning"])] == ["assistant"]
        assert [h["role"] for h in r.search("zebras", kinds=["text"])] == ["user"]
        assert len(r.search("zebras")) == 2
        with pytest.raises(ValueError):
            r.search("zebras", kinds=["thoughts"])


# -- case folding and emoji ----------------------------------------------------------------


def test_fold_agrees_with_fts5_for_every_code_point():
    conn = apsw.Connection(":memory:")
    tok = conn.fts5_tokenizer("trigram", ["case_sensitive", "0"])
    step = 20_000
    for lo in range(0, 0x110000, step):
        chars = [chr(c) for c in range(lo, min(lo + step, 0x110000)) if not 0xD800 <= c < 0xE000]
        data = "".join(c * 3 for c in chars).encode("utf-8")
        folded = {s: t[0] for s, _e, t, *_ in tok(data, apsw.FTS5_TOKENIZE_DOCUMENT, None)}
        offset = 0
        for c in chars:
            want = folded.get(offset, c)
            assert textfold.fold(c) == want, (hex(ord(c)), want)
            offset += 3 * len(c.encode("utf-8"))


SCRIPTS = [
    "ЁЖик ёлка",
    "Äger ärger",
    "ΟΔΟΣ οδός",
    "Ǆemal",
    "ՀԱՅ",
    "Ａｂｃ",
    "𐐀𐐨x",
    "ſtraße STRASSE",
]


@pytest.mark.parametrize("indexed", [False, True])
def test_short_and_long_non_ascii_substrings_fold_alike_everywhere(store, indexed):
    store.apply("messages.append", {"session_id": "s", "messages": [user(t) for t in SCRIPTS]})
    if indexed:
        store.index()
    with store.reader() as r:
        for text in SCRIPTS:
            word = text.split()[0]
            for n in (2, 3):
                piece = word[:n]
                for variant in {piece, piece.lower(), piece.upper(), textfold.fold(piece)}:
                    if len(variant) != len(piece):
                        continue  # upper("ß") is "SS": a different string, not a fold of it
                    got = {h["message_id"] for h in r.search(variant, substring=True)}
                    want = {
                        h["message_id"]
                        for h in r.search(variant, substring=True, projection="audit")
                        if textfold.fold(variant) in textfold.fold(h["snippet"])
                    }
                    assert got and got == want, (text, variant)
        assert len(r.search("ЁЖ", substring=True)) == 1 and len(r.search("ёж", substring=True)) == 1
        assert len(r.search("äG", substring=True)) == 1


@pytest.mark.parametrize("indexed", [False, True])
def test_emoji_queries_find_messages_that_contain_them(store, indexed):
    store.apply(
        "messages.append",
        {
            "session_id": "s",
            "messages": [
                user("ship it 🚀 today"),
                assistant("party 🎉🎉🎉 time"),
                tool("c", "done ✅", name="bash"),
            ],
        },
    )
    if indexed:
        store.index()
    with store.reader() as r:
        assert [h["role"] for h in r.search("🚀")] == ["user"]
        assert [h["role"] for h in r.search("✅")] == ["tool"]
        assert [h["role"] for h in r.search("🎉🎉🎉")] == ["assistant"]
        assert [h["role"] for h in r.search("🎉")] == ["assistant"]
        assert r.search("🛸") == []
        hit = r.search("🚀")[0]
        assert [hit["snippet"][a:b] for a, b in hit["highlights"]] == ["🚀"]


# -- lone surrogates at the producer ---------------------------------------------------------


def test_lone_surrogates_become_the_replacement_character_at_the_producer(store):
    store.apply(
        "messages.append", {"session_id": "s", "messages": [user("caf\udce9 is it? \ud83d")]}
    )
    raw = b"".join(p.read_bytes() for p in sorted((store.root / "spool").glob("*.jsonl")))
    assert "caf\ufffd is it? \ufffd".encode() in raw
    assert b"caf?" not in raw
    content = store.conn.execute("SELECT quill_text(content) FROM messages").fetchone()[0]
    assert content == "caf\ufffd is it? \ufffd"


def test_surrogates_in_keys_and_nested_values_are_replaced_too(tmp_path):
    """No store: the producer's spool encoding (the same for both backends)."""
    sp = Spool(tmp_path / "spool")
    sp.append(
        "messages.append",
        {
            "session_id": "s",
            "messages": [{"role": "user", "content": "x", "extra": {"k\udc80": ["v\udfff"]}}],
        },
    )
    raw = b"".join(p.read_bytes() for p in (tmp_path / "spool").glob("*.jsonl"))
    assert b"?" not in raw and "k\ufffd".encode() in raw and "v\ufffd".encode() in raw


# -- any query bytes -----------------------------------------------------------------------


def test_any_query_string_is_valid_at_the_api(store):
    store.apply("messages.append", {"session_id": "s\ufffd", "messages": [user("caf\udce9 menu")]})
    store.index()
    with store.reader() as r:
        assert len(r.search("caf\udce9")) == 1
        assert r.search("caf\udce9", session_id="s\udce9", source="\udcff") == []
        assert len(r.search("caf\udce9", session_id="s\udce9")) == 1
        assert search_mod.route("\udce9\udce9", substring=True)["route"] == "scan"


def test_search_with_latin1_bytes_on_the_command_line(tmp_path):
    home = tmp_path / "home"
    s = Store(home)
    s.apply(
        "messages.append",
        {"session_id": "s", "messages": [user("caf\ufffd au lait"), user("plain")]},
    )
    s.index()
    s.close()
    cli = QuillCLI(home)
    for args in (
        [b"search", b"caf\xe9"],
        [b"search", b"caf\xe9", b"--json"],
        [b"search", b"\xff\xfe", b"--substring"],
        [b"search", b"x", b"--session", b"\xe9"],
        [b"sessions", b"show", b"\xe9"],
    ):
        proc = subprocess.run(
            [a.encode() if isinstance(a, str) else a for a in cli.argv()] + args,
            capture_output=True,
            env=quill_env(home),
            cwd=REPO,
            timeout=120,
        )
        assert b"Traceback" not in proc.stderr, proc.stderr.decode(errors="replace")
        assert b"not valid UTF-8" in proc.stderr, args
        assert proc.returncode in (0, 3), (args, proc.returncode)
        if args[-1] == b"--json":
            assert [h["snippet"] for h in json.loads(proc.stdout)["hits"]] == ["caf\ufffd au lait"]


@pytest.mark.parametrize("indexed", [False, True])
def test_a_query_of_only_excluded_terms_finds_nothing_and_says_why(store, indexed):
    """`NOT emoji` had its NOT dropped as a dangling operator and returned the messages that
    *contain* emoji. Only excluded terms: nothing is sought, the route note
    says so (and for a query of punctuation only); the word NOT alone is still a word."""
    store.apply(
        "messages.append",
        {
            "session_id": "s",
            "messages": [user("an emoji here"), assistant("plain text"), user("say NOT loudly")],
        },
    )
    if indexed:
        store.index()
    with store.reader() as r:
        assert r.search("NOT emoji") == [] and r.search("NOT NOT emoji") == []
        assert [h["snippet"] for h in r.search("text NOT emoji")] == ["plain text"]
        assert [h["snippet"] for h in r.search("NOT")] == ["say NOT loudly"]
    for text in ("NOT emoji", "==>"):
        assert (
            search_mod.route(text)["route"] == "none"
            and "nothing in this query" in search_mod.route(text)["note"]
        )
    assert search_mod.route("emoji")["note"] is None and search_mod.route("")["note"] is None


@pytest.mark.parametrize("indexed", [False, True])
def test_an_escaped_lone_surrogate_in_stored_arguments_never_fails_a_search(store, indexed):
    # Argument JSON cut inside an emoji: valid JSON text whose decoded value is a lone surrogate.
    args = '{"q": "\\ud83d zxcvbnm", "deep": {"k": ["\\udc00 qwertyu"]}}'
    store.apply(
        "messages.append",
        {
            "session_id": "s",
            "messages": [
                user("look it up"),
                assistant(None, tool_calls=[_call("c1", "web", args)]),
            ],
        },
    )
    if indexed:
        store.index()
    with store.reader() as r:
        for query, kinds in (("zxcvbnm", None), ("qwertyu", ["tool"]), ("web", ["tool"])):
            for order in ("newest", "relevance") if indexed else ("newest",):
                got = r.search(query, kinds=kinds, order=order)
                assert [h["message_id"] for h in got] == [2], (query, order)
                assert got[0]["matched_in"] == "tool"
                snippet = got[0]["snippet"]
                snippet.encode("utf-8")  # valid text (SQLite: the lost character is U+FFFD)
                assert query in snippet, snippet
        assert len(r.search("zxcvbnm", substring=True)) <= 1  # substring route: no failure

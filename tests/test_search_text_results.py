"""Search results without blind spots: snippets on the match, bounded context, routes said
out loud (and an old index layout re-indexed on open), a page's context equal to each hit's own
neighbours. Real SQLite files through the real spool."""

from __future__ import annotations

import json

import pytest
from conftest import QuillCLI
from search_text_helpers import ISSUE_ARGS, _call
from semantics_helpers import Store, assistant, tool, user

from quill.store.search import hits as hits_mod
from quill.store.search import plan as query
from quill.store.search import run as search_mod
from quill.store.search import textfold


@pytest.fixture
def store(tmp_path, backend):
    s = Store(tmp_path, backend)
    yield s
    s.close()


# -- snippets on the match -----------------------------------------------------------------


@pytest.mark.parametrize("indexed", [False, True])
def test_snippets_contain_and_highlight_the_matched_words(store, indexed):
    filler = "lorem ipsum dolor " * 40
    msgs = [
        user(filler + "then path.join(a, b) appears " + filler),
        assistant(
            "I will run it",
            tool_calls=[
                _call("c1", "bash", json.dumps({"cmd": filler + "node -e 'path.join(x)'"}))
            ],
        ),
        tool("c1", filler * 3 + "\n\tError at PATH.JOIN(y)\n" + filler, name="bash"),
        assistant("Pensé en café", reasoning=filler + "the JOIN of path segments"),
    ]
    store.apply("messages.append", {"session_id": "s", "messages": msgs})
    if indexed:
        store.index()
    with store.reader() as r:
        got = r.search("path.join(")
        assert len(got) == 3
        for h in got:
            marked = [h["snippet"][a:b].lower() for a, b in h["highlights"]]
            assert "path" in marked and "join" in marked, h
            assert len(h["snippet"]) <= hits_mod.SNIPPET_CHARS + 2
        assert {h["matched_in"] for h in got} == {"text", "tool"}
        cafe = r.search("cafe")[0]  # diacritics folded as the index folds them
        assert [cafe["snippet"][a:b] for a, b in cafe["highlights"]] == ["café"]


def test_excerpt_centres_the_first_match():
    text = "a" * 1000 + " needle " + "b" * 1000
    snip, marks = hits_mod.excerpt(text, hits_mod.match_spans(text, "fts", ["needle"]))
    ((a, b),) = marks
    assert snip[a:b] == "needle"
    assert abs(a - (len(snip) - b)) <= 4  # as much before the match as after it


def test_ascii_word_spans_are_the_tokenizers_matches():
    """The ASCII fast path (a regex, no tokenizer) finds exactly the tokens the word index's
    own tokenizer makes that equal a term or start with a prefix, on random ASCII text with
    separators, digits, underscores and mixed case."""
    import random

    rng = random.Random(17)
    alphabet = "abcXYZ019 _-.\n\t'\"/"
    for _ in range(5000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 80)))
        tokens = textfold.words(text)
        pool = [t for _, _, t in tokens] + ["ab", "c", "x", "0", "a1", "é"]
        want = set(rng.sample(pool, min(len(pool), rng.randint(1, 3))))
        prefixes = tuple(rng.sample(["a", "x", "b", "0", "ab", "ü"], rng.randint(0, 2)))
        expected = [
            (a, b) for a, b, t in tokens if t in want or (prefixes and t.startswith(prefixes))
        ]
        assert hits_mod.match_spans(text, "fts", sorted(want), prefixes) == expected, (
            text,
            want,
            prefixes,
        )


def test_finder_equals_match_spans():
    """``hits.finder`` (the per-page matcher search uses) gives ``match_spans``' spans for
    every kind, on ASCII and non-ASCII text, with and without prefixes and terms."""
    import random

    rng = random.Random(31)
    alphabet = "abcXYZ019 _-.\n\t'é连Ü"
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 80)))
        kind = rng.choice(["fts", "substring"])
        terms = rng.sample(["ab", "c", "x", "0", "a1", "é", "连", "ü", "b x"], rng.randint(0, 3))
        prefixes = (
            tuple(rng.sample(["a", "x", "b", "0", "ü"], rng.randint(0, 2))) if kind == "fts" else ()
        )
        find = hits_mod.finder(kind, terms, prefixes)
        assert find(text) == hits_mod.match_spans(text, kind, terms, prefixes), (
            text,
            kind,
            terms,
            prefixes,
        )


def test_snippet_finder_equals_excerpt_of_match_spans():
    """``hits.snippet_finder`` (what search builds snippets with) gives ``excerpt`` of
    ``match_spans``' spans (None without a match) for every kind, on ASCII and non-ASCII text
    long enough for the window, the span horizon and whitespace runs to matter, with long
    tokens (a prefix match longer than the window), narrow and default widths."""
    import random

    rng = random.Random(47)
    alphabets = ["ab c  x0\n\t", "abcXYZ019 _-.\n\t'é连Ü \u00a0", "a" * 20 + " b"]
    for _ in range(4000):
        alphabet = rng.choice(alphabets)
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 900)))
        kind = rng.choice(["fts", "fts", "substring"])
        terms = rng.sample(
            ["ab", "c", "x", "0", "a1", "é", "连", "ü", "b x", "aaaa"], rng.randint(0, 3)
        )
        prefixes = (
            tuple(rng.sample(["a", "x", "b", "0", "ü"], rng.randint(0, 2))) if kind == "fts" else ()
        )
        width = rng.choice([hits_mod.SNIPPET_CHARS, hits_mod.SNIPPET_CHARS, 20, 400])
        spans = hits_mod.match_spans(text, kind, terms, prefixes)
        want = hits_mod.excerpt(text, spans, width) if spans else None
        assert hits_mod.snippet_finder(kind, terms, prefixes, width)(text) == want, (
            text,
            kind,
            terms,
            prefixes,
            width,
        )


def test_excerpt_one_pass_equals_piecewise_collapse():
    """``excerpt``'s one-pass whitespace collapse (spans bracketed by marks) gives the snippet
    and highlights of the piece-by-piece collapse, including overlapping spans, spans that
    start or end with whitespace (these take the piecewise path) and Unicode whitespace."""
    import random

    rng = random.Random(23)
    alphabet = "ab  \n\t\u00a0xé连"
    for _ in range(5000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 300)))
        spans = hits_mod.match_spans(
            text, "substring", rng.sample(["ab", "a", "b x", "xé", "连", " a"], 2)
        )
        width = rng.choice([20, 160])
        snippet, marks = hits_mod.excerpt(text, spans, width)
        start = (
            max(0, min(spans[0][0] - (width - (spans[0][1] - spans[0][0])) // 2, len(text) - width))
            if spans
            else 0
        )
        end = min(len(text), start + width)
        inside, pos = [], start
        for a, b in spans:
            a, b = max(a, pos), min(b, end)
            if a < b:
                inside.append((a, b))
                pos = b
        out, want_marks = hits_mod._joined(text, start, end, inside)
        lead, body, prefix = len(out) - len(out.lstrip()), out.strip(), "…" if start > 0 else ""
        shift = len(prefix) - lead
        want_marks = [
            [max(a + shift, len(prefix)), min(b + shift, len(prefix) + len(body))]
            for a, b in want_marks
        ]
        assert snippet == prefix + body + ("…" if end < len(text) else ""), text
        assert marks == [m for m in want_marks if m[0] < m[1]], text


# -- bounded context -----------------------------------------------------------------------


def test_context_neighbours_are_cut_to_a_bounded_preview(store):
    big = "x" * 3_000_000
    store.apply(
        "messages.append",
        {
            "session_id": "s",
            "messages": [
                user("run it"),
                assistant(
                    "running needleword", tool_calls=[_call("c1", "bash", json.dumps({"cmd": big}))]
                ),
                tool("c1", big, name="bash"),
                assistant("done"),
            ],
        },
    )
    store.index()
    with store.reader() as r:
        (hit,) = r.search("needleword")
    size = len(json.dumps(hit, ensure_ascii=False))
    assert size < 4000, size
    assert hit["after"]["cut"] == {"content": 3_000_000}
    assert (
        hit["after"]["content"].startswith("xxx")
        and len(hit["after"]["content"]) <= hits_mod.PREVIEW_CHARS + 1
    )
    assert hit["before"]["content"] == "run it" and "cut" not in hit["before"]


# -- routes are said -----------------------------------------------------------------------


def test_route_says_when_a_query_goes_to_a_narrower_index():
    assert search_mod.route("hello world") == {"route": "fts", "narrower": False, "note": None}
    short = search_mod.route("数据")
    assert short["route"] == "scan" and short["narrower"] and "'数据'" in short["note"]
    assert str(search_mod.SCAN_MAX_ROWS) in short["note"]
    tri = search_mod.route("数据库")
    assert tri["route"] == "trigram" and tri["narrower"] and "user and assistant" in tri["note"]
    assert search_mod.route("ab", substring=True)["route"] == "scan"
    assert search_mod.route("🚀")["route"] == "scan"
    assert query.plan("!!! ***").kind == "none"


def test_cli_prints_the_route_note_on_stderr(tmp_path):
    home = tmp_path / "home"
    s = Store(home)
    s.apply("messages.append", {"session_id": "s", "messages": [user("数据库 ready")]})
    s.close()
    cli = QuillCLI(home)
    proc = cli.run("search", "数据", "--json")
    assert "scan of the newest" in proc.stderr
    assert [h["snippet"] for h in json.loads(proc.stdout)["hits"]] == ["数据库 ready"]
    assert "scan" not in cli.run("search", "ready").stderr


def test_a_store_indexed_with_the_old_layout_is_re_indexed_on_open(tmp_path):
    """SQLite only: FTS5's index layout version (PostgreSQL's indexes are the server's)."""
    s = Store(tmp_path)
    s.apply(
        "messages.append",
        {
            "session_id": "s",
            "messages": [assistant(None, tool_calls=[_call("c1", "edit", ISSUE_ARGS)])],
        },
    )
    s.index()
    # What a store indexed before layouts were named looks like: one raw-JSON text column.
    s.conn.execute(
        "DROP TABLE messages_fts; CREATE VIRTUAL TABLE messages_fts USING fts5(text, content='', "
        "contentless_delete=1, tokenize='unicode61 remove_diacritics 2'); "
        "DELETE FROM state_meta WHERE key = 'fts_layout'"
    )
    with s.reader() as r:
        assert r.search_health()["fts_state"] == "layout"
        assert (
            len(r.search("secondword")) == 1
        )  # not indexed in this layout: found by the tail scan
    s.close()
    s = Store(tmp_path)  # opens the writer connection again
    cols = [row[1] for row in s.conn.execute("PRAGMA table_info(messages_fts)")]
    assert cols == ["content", "tools", "reasoning"]
    assert (
        s.conn.execute("SELECT value FROM state_meta WHERE key = 'fts_indexed_upto'").fetchone()[0]
        == "0"
    )
    s.index()
    with s.reader() as r:
        assert r.search_health()["fts_state"] == "ok"
        assert len(r.search("secondword")) == 1
    s.close()


# -- the page's context in two queries equals the per-hit reads ------------------------------


def test_context_of_a_page_equals_each_hits_own_neighbours(store):
    from quill.store.read import projections

    store.apply(
        "messages.append", {"session_id": "a", "messages": [user(f"a{i} word") for i in range(6)]}
    )
    store.apply(
        "messages.append",
        {
            "session_id": "b",
            "messages": [
                user("b0 word"),
                assistant("b1 word"),
                user("b2 word"),
                assistant("b3 word"),
            ],
        },
    )
    assert store.apply("messages.rewind", {"session_id": "b", "user_turn": 2}) == []
    store.apply(
        "messages.append", {"session_id": "b", "messages": [user("b4 word"), assistant("b5 word")]}
    )
    wm = store.conn.execute("SELECT max(id) FROM messages WHERE session_id = 'b'").fetchone()[0]
    assert (
        store.apply(
            "messages.compact",
            {
                "session_id": "b",
                "watermark": wm,
                "tail_count": 1,
                "messages": [user("[summary] word"), assistant("b5 word")],
            },
        )
        == []
    )
    states = {r[0] for r in store.conn.execute("SELECT state FROM messages")}
    assert states == {"live", "compacted", "superseded", "rewound"}
    store.apply("messages.append", {"session_id": "b", "messages": [user("b6 word")]})
    ids = [
        (sid, mid)
        for mid, sid in store.conn.execute("SELECT id, session_id FROM messages ORDER BY id")
    ]
    assert len(ids) > 12
    with store.reader() as r:
        conn = r.conn
        for projection in ("display", "model", "audit"):
            many = projections.neighbors_many(conn, projection, ids)
            for sid, mid in ids:
                assert many[mid] == projections.neighbors(conn, sid, projection, mid), (
                    projection,
                    mid,
                )
        reps = projections.representatives(conn, [m for _, m in ids])
        assert reps == {m: projections.representative(conn, m) for _, m in ids}
        if store.kind == "sqlite":
            timings: dict = {}
            from quill.store.search import run as s

            got = s.search(conn, "word", limit=100, timings=timings)
            assert set(timings) == {"candidates_s", "page_s", "context_s"}
        else:
            got = r.search("word", limit=100)
        assert len(got) > 6
        for h in got:
            want = projections.neighbors(conn, h["session_id"], "display", h["message_id"])
            assert (h["before"], h["after"]) == want

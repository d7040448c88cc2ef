"""Substring and CJK search over packed texts (store/packed.py). The trigram index holds a packed
text whole, whatever its role (store/search/columns.py), so a search unpacks a row only when
the index names it a candidate, and its hits are a full scan's: on a store packed as it was
written, and on one written plain and packed later by the ``vacuum`` job's ``pack_stored``
(which re-indexes the rows it packs), each with rows the indexer has not reached yet."""

from __future__ import annotations

import pytest
from semantics_helpers import Store, assistant, call, tool, user
from test_packed import _store

from quill.jobs.store_jobs import pack_stored
from quill.store import packed
from quill.store.search import plan as query
from quill.store.search import run as search_mod
from quill.store.search.columns import CONTENT_SQL, TOOLS_BLOB_SQL, tools_text

SID = "s-packed-search"
NONE = 10**9  # a threshold no text reaches: stored plain
FILL = " ".join(f"step {i} compiled module{i % 9} ok" for i in range(90))  # ~2.5 KB, no term
CJK = "数据库连接失败"
#: Substring queries (text, substring flag, kinds): single terms, a term in the content with
#: another in the tool calls, a negated term, alternatives, kinds.
QUERIES = [
    ("parsedconf", True, None),
    (CJK, False, None),
    ("kumquat tangelo", True, None),
    ("parsedconf NOT zebrafish", True, None),
    ("parsedconf OR tangelo", True, None),
    ("parsedconf", True, ["text"]),
    ("tangelo", True, ["tool"]),
    ("bash", True, None),  # a tool result's tool name, beside its packed output
    ("parsedconf", True, ["tool", "reasoning"]),
    ("失败", False, None),  # short CJK: the scan route
]


def _messages(tag: str) -> list[dict]:
    """Rows holding the terms where the trigram prefix cannot see them (past 2,000
    characters, tool results, system text) and where it can, among long rows holding none."""
    return [
        user(f"short {tag} parsedconf question"),
        assistant(FILL + f" then reparsedconfig {tag} at the end"),  # packed, past the prefix
        assistant(
            f"kumquat {tag} and parsedconf",
            tool_calls=[call(f"c1{tag}", "bash", '{"cmd": "tangelo --x"}')],
        ),
        {**tool(f"c1{tag}", FILL + " output PARSEDCONF zebrafish", name="bash")},
        assistant(FILL + " kumquat", tool_calls=[call(f"c2{tag}", "bash", '{"cmd": "tangelo"}')]),
        {**tool(f"c2{tag}", FILL + " " + CJK * 2, name="bash")},
        {"role": "system", "content": FILL + " system parsedconf"},
        user("日志：" + "数据" * 1200 + CJK),  # ~7 KB of CJK, the term past the prefix
        assistant(FILL, reasoning="thinking about parsedconf"),
        *[tool(f"f{i}{tag}", FILL + f" filler {i}", name="bash") for i in range(12)],
        *[assistant(FILL + f" filler {i}") for i in range(12)],
    ]


def _full_scan(conn, text: str, substring: bool, kinds: list[str] | None) -> list[int]:
    """Every row (audit) whose searched texts satisfy the plan, newest first, by Python."""
    plan = query.plan(text, substring=substring)
    rows = conn.execute(
        f"SELECT m.id, {CONTENT_SQL}, {TOOLS_BLOB_SQL}, m.reasoning FROM messages m "
        "ORDER BY m.id DESC"
    ).fetchall()
    want = kinds or ["text", "tool", "reasoning"]
    out = []
    for mid, content, tools, reasoning in rows:
        by_kind = {"text": content, "tool": tools_text(tools), "reasoning": reasoning}
        if query.matches(plan, [by_kind[k] for k in want if by_kind[k]]):
            out.append(mid)
    return out


def _searched(conn, text: str, substring: bool, kinds: list[str] | None) -> list[int]:
    hits = search_mod.search(
        conn, text, substring=substring, kinds=kinds, limit=500, context=False, projection="audit"
    )
    return [h["message_id"] for h in hits]


def _forms(conn) -> dict[str, int]:
    return dict(conn.execute("SELECT typeof(content), count(*) FROM messages GROUP BY 1"))


def _check(store: Store) -> None:
    for text, substring, kinds in QUERIES:
        want = _full_scan(store.conn, text, substring, kinds)
        assert want, (text, kinds)  # every query has hits here
        assert _searched(store.conn, text, substring, kinds) == want, (text, kinds)


@pytest.fixture
def packed_at_write(tmp_path):
    s = _store(tmp_path / "w", 1024)
    assert s.apply("messages.append", {"session_id": SID, "messages": _messages("a")}) == []
    s.index()
    # Rows above the index watermark: the tail, matched in Python.
    assert s.apply("messages.append", {"session_id": SID, "messages": _messages("b")}) == []
    yield s
    s.close()


def test_hits_equal_a_full_scan_on_a_store_packed_as_written(packed_at_write):
    forms = _forms(packed_at_write.conn)
    assert forms["blob"] >= 60 and forms["text"] >= 4, forms
    _check(packed_at_write)


def test_hits_equal_a_full_scan_on_a_store_packed_by_the_vacuum_job(tmp_path):
    plain = _store(tmp_path / "v", NONE)
    assert plain.apply("messages.append", {"session_id": SID, "messages": _messages("a")}) == []
    plain.index()
    plain.close()
    store = _store(tmp_path / "v", 1024)  # the same file, opened by a writer that packs
    try:
        assert "blob" not in _forms(store.conn)
        assert pack_stored(store.conn) >= 30
        assert _forms(store.conn)["blob"] >= 30
        assert store.apply("messages.append", {"session_id": SID, "messages": _messages("b")}) == []
        _check(store)
        store.index()
        _check(store)
        assert store.conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        store.conn.execute(  # raises when the index disagrees with itself
            "INSERT INTO messages_trigram(messages_trigram, rank) VALUES ('integrity-check', 0)"
        )
    finally:
        store.close()


def test_a_substring_search_unpacks_only_the_candidates_the_index_names(packed_at_write):
    """A search for a term one packed tool result holds unpacks that row (and no other):
    every long row the trigram index does not list as a candidate is left packed."""
    store = packed_at_write
    store.index()
    conn = store.conn
    unpacked: list[int] = []

    def counting(value):
        unpacked.append(1)
        return packed.unpack(value)

    conn.create_scalar_function(packed.TEXT_FUNCTION, counting, 1, deterministic=True)
    blobs = _forms(conn)["blob"]
    for text in ("zebrafish", CJK):
        unpacked.clear()
        hits = search_mod.search(
            conn, text, substring=True, limit=20, context=False, projection="audit"
        )
        assert hits and len(hits) <= 6
        # Each hit's text is unpacked to test it and to cut its snippet: a few calls a hit.
        assert len(unpacked) <= 4 * len(hits) < blobs, (text, len(unpacked), blobs)

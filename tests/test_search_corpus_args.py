"""Tool-call arguments are text, on the whole corpus: every word of every tool-call argument
in the real transcripts (decoded as a reader decodes them, tokenised by the index's own
tokenizer) is found by search. A companion of test_search_text_content.py (same fixtures)."""

from __future__ import annotations

import json

import pytest
from conftest import CORPUS
from semantics_helpers import Store

from quill.store.search import textfold


@pytest.fixture
def store(tmp_path, backend):
    s = Store(tmp_path, backend)
    yield s
    s.close()


def _argument_words(tool_calls_json: str) -> set[str]:
    """Every word of every string/number inside each call's name and arguments, decoded the
    way a reader of the transcript decodes them (json.loads, in Python), tokenised by the
    index's own tokenizer."""
    found: set[str] = set()

    def walk(v: object) -> None:
        if isinstance(v, str):
            try:
                inner = json.loads(v)
            except ValueError:
                inner = None
            if isinstance(inner, (dict, list)):
                walk(inner)
            else:
                found.update(textfold.word_tokens(v))
        elif isinstance(v, bool) or v is None:
            return
        elif isinstance(v, (int, float)):
            found.update(textfold.word_tokens(json.dumps(v)))
        elif isinstance(v, list):
            for x in v:
                walk(x)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)

    for c in json.loads(tool_calls_json):
        fn = c.get("function", c)
        walk(fn.get("name"))
        walk(fn.get("arguments", fn.get("input")))
    return found


@pytest.mark.corpus
def test_every_word_of_every_tool_call_argument_in_the_corpus_is_found(store):
    if store.kind == "postgres":
        pytest.skip(
            "SQLite only: reads the FTS5 tools column directly (8 s of corpus); PostgreSQL's "
            "tool text (quill_tool_text) is checked through the API by the two tool-argument "
            "tests in test_search_text_content.py"
        )
    from quill.ops.importers import iter_transcript_files, parse_file

    for p in iter_transcript_files([CORPUS]):
        parsed = parse_file(p)
        for s in parsed.sessions:
            store.spool.append(
                "messages.append", {"session_id": s.session["session_id"], "messages": s.messages}
            )
    store.drain()
    store.index()
    rows = store.conn.execute(
        "SELECT id, tool_calls FROM messages WHERE tool_calls IS NOT NULL"
    ).fetchall()
    assert len(rows) > 100
    checked = 0
    for mid, calls in rows:
        words = sorted(_argument_words(calls))
        for i in range(0, len(words), 200):
            chunk = words[i : i + 200]
            expr = (
                "{tools} : (" + " AND ".join('"' + w.replace('"', '""') + '"' for w in chunk) + ")"
            )
            got = store.conn.execute(
                "SELECT count(*) FROM messages_fts WHERE messages_fts MATCH ? AND rowid = ?",
                (expr, mid),
            ).fetchone()[0]
            if got != 1:
                missing = [
                    w
                    for w in chunk
                    if not store.conn.execute(
                        "SELECT 1 FROM messages_fts WHERE messages_fts MATCH ? AND rowid = ?",
                        ('{tools} : "' + w.replace('"', '""') + '"', mid),
                    ).fetchone()
                ]
                raise AssertionError(f"message {mid}: words not found {missing[:20]}")
        checked += len(words)
    assert checked > 1000
    # And through the public API, for the words the raw-JSON index used to miss: the first
    # word of each line after the first (in the JSON text it follows an escaped \n).
    tried = 0
    with store.reader() as r:
        for mid, sid, calls in store.conn.execute(
            "SELECT id, session_id, tool_calls FROM messages WHERE tool_calls LIKE '%\\n%' LIMIT 40"
        ).fetchall():
            for c in json.loads(calls):
                args = c.get("function", {}).get("arguments")
                values = (
                    json.loads(args).values()
                    if isinstance(args, str) and args.startswith("{")
                    else []
                )
                for v in values:
                    for line in str(v).split("\n")[1:3]:
                        word = next(iter(textfold.word_tokens(line)), None)
                        if word:
                            tried += 1
                            got = r.search(
                                f'"{word}"',
                                limit=10_000,
                                session_id=sid,
                                kinds=["tool"],
                                projection="audit",
                                context=False,
                            )
                            assert mid in {h["message_id"] for h in got}, (mid, word)
    assert tried > 20


# -- reasoning ---------------------------------------------------------------------------------

"""Folding and tokenising text exactly as the search indexes do, for the rows and strings
that are matched outside an index (the unindexed tail, short-term scans, snippets).

Why not ``str.lower()``: SQLite's ``lower()``/``LIKE`` fold ASCII only, Python's ``lower()`` is
context-sensitive (final sigma) and may change a string's length (``İ``), and neither is what
FTS5 does. FTS5 folds one code point to one code point with its own tables (``unicode61``
and ``trigram case_sensitive 0`` share them), and ``unicode61 remove_diacritics 2`` also
strips diacritics and splits on its own token classes (``_`` separates words, emoji are not
tokens). So:

* ``fold`` maps each code point the way FTS5's case folding does; the table is read from the
  linked SQLite's trigram tokenizer once per process (tests/test_search_text_content.py checks it
  against every code point). One code point in, one out: offsets in the folded text are
  offsets in the original, which snippets rely on;
* ``words`` runs the index's own ``unicode61`` tokenizer (apsw ``fts5_tokenizer``), so a row
  matched in Python is matched exactly as the index would match it.
"""

from __future__ import annotations

import functools

import apsw

#: The ``messages_fts`` tokenizer (schema.FTS_DDL).
WORD_TOKENIZER = ("unicode61", ["remove_diacritics", "2"])
#: Blocks (start, end) holding every code point that has a case in Python's Unicode data;
#: FTS5's fold data (Unicode 6.1) is a subset, so only these need asking.
_CASED_BLOCKS = (
    (0x0, 0x600),
    (0x1000, 0x1100),
    (0x1300, 0x1400),
    (0x1C00, 0x2000),
    (0x2100, 0x2200),
    (0x2400, 0x2500),
    (0x2C00, 0x2E00),
    (0xA600, 0xA800),
    (0xAB00, 0xAC00),
    (0xFB00, 0xFC00),
    (0xFF00, 0x10000),
    (0x10400, 0x10600),
    (0x10C00, 0x10D00),
    (0x11800, 0x11900),
    (0x16E00, 0x16F00),
    (0x1E900, 0x1EA00),
)


@functools.cache
def _connection() -> apsw.Connection:
    """A private in-memory connection that owns the tokenizers (process-wide, read-only use)."""
    return apsw.Connection(":memory:")


@functools.cache
def _fold_table() -> dict[int, int]:
    """Code point → folded code point, for every code point FTS5 folds (a constant of the
    linked SQLite, computed once: every cased code point through the trigram tokenizer)."""
    tok = _connection().fts5_tokenizer("trigram", ["case_sensitive", "0"])
    chars = [chr(c) for a, b in _CASED_BLOCKS for c in range(a, b) if not 0xD800 <= c < 0xE000]
    data = "".join(c * 3 for c in chars).encode("utf-8")
    folded = {
        start: text[0] for start, _end, text, *_ in tok(data, apsw.FTS5_TOKENIZE_DOCUMENT, None)
    }
    table, offset = {}, 0
    for c in chars:
        got = folded.get(offset, c)
        if got != c:
            table[ord(c)] = ord(got)
        offset += 3 * len(c.encode("utf-8"))
    return table


@functools.cache
def _fold_targets() -> frozenset[str]:
    """Characters some other character folds to (``A`` → ``a``: ``a`` is one)."""
    return frozenset(chr(c) for c in _fold_table().values())


def fold_free(term: str) -> bool:
    """True when a folded ``term`` holds no character that another character folds to (CJK,
    emoji, digits, most symbols): then ``term`` is in ``fold(text)`` exactly where it is in
    ``text`` itself, and a scan can test the raw text in SQL (``instr``) without folding
    every row in Python. U+FFFD is excluded: a tool-call text turns bytes into it on decode."""
    return not any(c in _fold_targets() or c == "\ufffd" for c in term)


def fold(text: str) -> str:
    """``text`` case-folded the way FTS5 folds it (same length, code point for code point)."""
    return text.translate(_fold_table())


@functools.cache
def _word_tokenizer() -> apsw.FTS5Tokenizer:
    name, args = WORD_TOKENIZER
    return _connection().fts5_tokenizer(name, args)


def words(text: str) -> list[tuple[int, int, str]]:
    """The tokens the word index makes of ``text``: ``(start, end, token)`` with character
    offsets into ``text`` and the folded, diacritic-free token. ``text`` must be valid
    Unicode (no lone surrogates; the store's normaliser guarantees it for stored text)."""
    data = text.encode("utf-8")
    tokens = _word_tokenizer()(data, apsw.FTS5_TOKENIZE_DOCUMENT, None)
    if len(data) == len(text):  # ASCII: byte offsets are character offsets
        return [(start, end, token) for start, end, token, *_ in tokens]
    out = []
    chars = pos = 0  # running byte→character conversion; tokens come in text order
    for start, end, token, *_ in tokens:
        chars += len(data[pos:start].decode("utf-8"))
        s = chars
        chars += len(data[start:end].decode("utf-8"))
        pos = end
        out.append((s, chars, token))
    return out


def word_tokens(text: str) -> list[str]:
    """Just the tokens of ``words(text)`` (cheaper: no offsets)."""
    return [
        t[2] for t in _word_tokenizer()(text.encode("utf-8"), apsw.FTS5_TOKENIZE_DOCUMENT, None)
    ]


def register(conn: apsw.Connection) -> None:
    """Make ``quill_fold(text)`` (``fold``) callable in SQL on ``conn`` (for scans). A BLOB
    argument is a tool-call text (``search.columns.TOOLS_BLOB_SQL``), decoded by ``tools_text``."""
    from quill.store.search.columns import tools_text

    def _fold(t: str | bytes | None) -> str | None:
        if isinstance(t, bytes):
            t = tools_text(t)
        return None if t is None else fold(t)

    conn.create_scalar_function("quill_fold", _fold, 1, deterministic=True)

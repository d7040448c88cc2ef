"""The bounds of the PostgreSQL word index document (``quill_words`` in
``store.postgres.schema``): how much of a message enters it, and why the result always fits
in a tsvector (PostgreSQL refuses one over 1 MB with SQLSTATE 54000, which would make the
message impossible to store). docs/backends.md, "Search".
"""

from __future__ import annotations

import string

#: Characters of a message's searchable text that enter the word index (see module doc).
WORD_INDEX_CHARS = 100_000
#: An upper bound on the bytes a tsvector spends per character of its (folded) text. A lexeme
#: is a lowercased token (≤ 4 bytes a character); a hyphenated word or a URL (unaccent can
#: bring back ``-``, ``.``, ``/``, ``@``) is indexed whole and by its parts, so a character
#: is in at most 2 lexemes (8 bytes); each lexeme adds 1 alignment byte, a 2-byte position
#: count and its first 2-byte position, and there are at most 1.5 tokens a character (7.5
#: bytes). Further positions are ≤ 16,383 and distinct per lexeme: at most
#: ``_POSITION_SLACK`` bytes a part. PostgreSQL refuses a tsvector whose lexemes and
#: positions pass 1,048,575 bytes (SQLSTATE 54000, docs: "Limitations" of text search).
WORD_BYTES_PER_CHAR = 16
_POSITION_SLACK = 2 * 16_384
_TSVECTOR_MAX = 1_048_575
#: Folded characters (text + tool text + reasoning) below which the word document provably
#: fits; above it the full document is tried first (``quill_words``).
WORD_SAFE_CHARS = 56_000
#: Characters of each part indexed when the full document is over the limit.
WORD_FALLBACK_CHARS = 18_000
assert WORD_SAFE_CHARS * WORD_BYTES_PER_CHAR + 3 * _POSITION_SLACK < _TSVECTOR_MAX
assert 3 * WORD_FALLBACK_CHARS * WORD_BYTES_PER_CHAR + 3 * _POSITION_SLACK < _TSVECTOR_MAX


def punct_to_space(expr: str) -> str:
    """SQL replacing every ASCII punctuation character of ``expr`` by a space."""
    for ch in string.punctuation:
        expr = f"replace({expr}, '{ch.replace(chr(39), chr(39) * 2)}', ' ')"
    return expr

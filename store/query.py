"""Turning any user string into a valid FTS5 query.

FTS5 syntax errors on input like ``#123``, ``src/main.py``, ``don't``, ``50%`` or a dangling
``AND``. The sanitizer keeps what a user means and quotes everything else:
* ``"quoted phrases"`` stay phrases;
* ``AND``, ``OR``, ``NOT`` (upper case) stay operators when they stand between two terms;
  dangling ones are dropped;
* a trailing ``*`` stays a prefix query (``chat-send*`` → ``"chat-send"*``);
* every other token becomes a quoted string, which the tokenizer splits like the indexed text.
"""
from __future__ import annotations

import re

_TOKEN = re.compile(r'"([^"]*)"?|(\S+)')
_OPERATORS = frozenset({"AND", "OR", "NOT"})
_WORD = re.compile(r"\w", re.UNICODE)


def _quote(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


def sanitize(query: str) -> str:
    """Return an FTS5 MATCH expression for ``query``, or ``""`` when it has no searchable term."""
    parts: list[str] = []
    for match in _TOKEN.finditer(query):
        phrase, word = match.group(1), match.group(2)
        if phrase is not None:
            if _WORD.search(phrase):
                parts.append(_quote(phrase))
            continue
        if word in _OPERATORS:
            parts.append(word)
            continue
        prefix = word.endswith("*")
        body = word.rstrip("*")
        if not _WORD.search(body):
            continue
        parts.append(_quote(body) + ("*" if prefix else ""))
    # Drop operators that do not stand between two terms.
    cleaned: list[str] = []
    for part in parts:
        if part in _OPERATORS:
            if cleaned and cleaned[-1] not in _OPERATORS:
                cleaned.append(part)
        else:
            cleaned.append(part)
    while cleaned and cleaned[-1] in _OPERATORS:
        cleaned.pop()
    return " ".join(cleaned)


def terms(query: str) -> list[str]:
    """Lower-cased word terms of ``query``, for scanning unindexed rows and making snippets."""
    return [t.lower() for t in re.findall(r"\w+", query) if t not in _OPERATORS]

"""Turning any user string into a valid search plan (FTS5 word query, trigram substring
query, or a bounded scan).

FTS5 syntax errors on input like ``#123``, ``src/main.py``, ``don't``, ``50%`` or a dangling
``AND``. The sanitizer keeps what a user means and quotes everything else:
* ``"quoted phrases"`` stay phrases (an unterminated quote runs to the end);
* ``AND``, ``OR``, ``NOT`` (upper case) stay operators when they stand between two terms;
  dangling ones are dropped;
* a trailing ``*`` stays a prefix query (``chat-send*`` → ``"chat-send"*``);
* every other token becomes a quoted string, which the tokenizer splits like the indexed
  text; a token with no letter or digit is dropped (never an empty phrase ``""``).

Routing (``plan``), after the reference study §6: text with CJK characters (unicode61 keeps a
CJK run as one token, so words inside it are not findable) or an explicit substring search
goes to the trigram index when every term has ≥3 characters, else to a scan; everything else
goes to the unicode61 word index.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

_TOKEN = re.compile(r'"([^"]*)"?|(\S+)')
_OPERATORS = frozenset({"AND", "OR", "NOT"})
_WORD = re.compile(r"\w", re.UNICODE)
#: CJK ideographs, kana, hangul, CJK punctuation/fullwidth forms.
_CJK = re.compile(r"[\u2e80-\u2fff\u3000-\u30ff\u3100-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
                  r"\uac00-\ud7af\uf900-\ufaff\uff00-\uffef]")
#: Trigram queries need terms of at least this many characters (the tokenizer's n).
TRIGRAM_MIN_CHARS = 3
#: Longest query accepted; longer input is cut (a pasted log is not a query).
MAX_QUERY_CHARS = 2048


@dataclass(frozen=True)
class Term:
    """One search term: ``text`` (a word or phrase as typed), ``prefix`` (trailing ``*``),
    ``negated`` (preceded by ``NOT``)."""

    text: str
    prefix: bool = False
    negated: bool = False


@dataclass
class Plan:
    """How to run a query. ``kind``: ``fts`` | ``trigram`` | ``scan`` | ``none``.
    ``match`` is the MATCH expression (fts/trigram); ``groups`` are OR-alternatives, each an
    AND-list of terms (for scanning rows the index does not cover); ``terms`` are lower-cased
    words for snippets."""

    kind: str
    match: str = ""
    groups: list[list[Term]] = field(default_factory=list)
    terms: list[str] = field(default_factory=list)


def _quote(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


def has_cjk(text: str) -> bool:
    """True when ``text`` contains a CJK character."""
    return bool(_CJK.search(text))


def _parts(query: str) -> list[str | Term]:
    """Terms and operators of ``query``, with dangling operators already dropped."""
    parts: list[str | Term] = []
    for match in _TOKEN.finditer(query[:MAX_QUERY_CHARS]):
        phrase, word = match.group(1), match.group(2)
        if phrase is not None:
            if _WORD.search(phrase):
                parts.append(Term(" ".join(phrase.split())))
            continue
        if word in _OPERATORS:
            parts.append(word)
            continue
        body = word.rstrip("*")
        if _WORD.search(body):
            parts.append(Term(body, prefix=word.endswith("*")))
    cleaned: list[str | Term] = []
    for part in parts:
        if isinstance(part, str):
            if cleaned and not isinstance(cleaned[-1], str):
                cleaned.append(part)
        else:
            cleaned.append(part)
    while cleaned and isinstance(cleaned[-1], str):
        cleaned.pop()
    return cleaned


def _expression(parts: list[str | Term], *, prefixes: bool) -> str:
    return " ".join(p if isinstance(p, str) else _quote(p.text) + ("*" if p.prefix and prefixes else "")
                    for p in parts)


def sanitize(query: str) -> str:
    """Return an FTS5 MATCH expression for ``query``, or ``""`` when it has no searchable term."""
    return _expression(_parts(query), prefixes=True)


def _groups(parts: list[str | Term]) -> list[list[Term]]:
    groups: list[list[Term]] = [[]]
    negate = False
    for part in parts:
        if part == "OR":
            groups.append([])
        elif part == "NOT":
            negate = True
        elif isinstance(part, Term):
            groups[-1].append(Term(part.text, part.prefix, negate))
            negate = False
    return [g for g in groups if any(not t.negated for t in g)]


def terms(query: str) -> list[str]:
    """Lower-cased word terms of ``query``, for scanning unindexed rows and making snippets."""
    return [t.lower() for t in re.findall(r"\w+", query[:MAX_QUERY_CHARS]) if t not in _OPERATORS]


def plan(query: str, *, substring: bool = False) -> Plan:
    """Decide how to run ``query`` (see the module doc). Never raises for any string."""
    parts = _parts(query)
    groups = _groups(parts)
    words = terms(query)
    if not groups:
        return Plan("none")
    texts = [p.text for p in parts if isinstance(p, Term)]
    if substring or any(has_cjk(t) for t in texts):
        if all(len(t) >= TRIGRAM_MIN_CHARS for t in texts):
            return Plan("trigram", _expression(parts, prefixes=False), groups, [t.lower() for t in texts])
        return Plan("scan", "", groups, [t.lower() for t in texts])
    return Plan("fts", _expression(parts, prefixes=True), groups, words)


_WORDS = re.compile(r"\w+")


def _has_phrase(tokens: list[str], term: Term) -> bool:
    want = [w.lower() for w in _WORDS.findall(term.text)]
    if not want:
        return False
    n = len(want)
    for i in range(len(tokens) - n + 1):
        if tokens[i:i + n - 1] == want[:-1] and (
                tokens[i + n - 1] == want[-1] or term.prefix and tokens[i + n - 1].startswith(want[-1])):
            return True
    return False


def matches(p: Plan, text: str) -> bool:
    """Whether ``text`` satisfies plan ``p`` the way its index would (words and phrases for
    ``fts``; case-insensitive substrings for ``trigram``/``scan``). Used for rows the index
    does not cover yet."""
    if p.kind == "none":
        return False
    if p.kind == "fts":
        tokens = [w.lower() for w in _WORDS.findall(text)]
        return any(all(_has_phrase(tokens, t) != t.negated for t in g) for g in p.groups)
    low = text.lower()
    return any(all((t.text.lower() in low) != t.negated for t in g) for g in p.groups)

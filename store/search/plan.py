"""Turning any user string into a valid search plan (FTS5 word query, trigram substring
query, or a bounded scan).

FTS5 syntax errors on input like ``#123``, ``src/main.py``, ``don't``, ``50%`` or a dangling
``AND``. The sanitizer keeps what a user means and quotes everything else:
* ``"quoted phrases"`` stay phrases (an unterminated quote runs to the end);
* ``AND``, ``OR``, ``NOT`` (upper case) stay operators when they stand between two terms;
  dangling ones are dropped; a query of nothing but operator words searches for those words;
* a trailing ``*`` stays a prefix query (``chat-send*`` → ``"chat-send"*``);
* every other token becomes a quoted string, which the tokenizer splits like the indexed
  text; a token with no letter or digit is dropped (never an empty phrase ``""``).

Routing (``plan``): text with CJK characters (unicode61 keeps a
CJK run as one token, so words inside it are not findable) or an explicit substring search
goes to the trigram index when every term has ≥3 characters, else to a scan; everything else
goes to the unicode61 word index. Rows outside an index are matched by ``matches`` with the
index's own tokenizer and case folding (``textfold``), so indexed and unindexed rows agree.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from dataclasses import dataclass, field

from quill.store.apply.normalize import scrub
from quill.store.search import textfold

_TOKEN = re.compile(r'"([^"]*)"?|(\S+)')
_OPERATORS = frozenset({"AND", "OR", "NOT"})
_WORD = re.compile(r"\w", re.UNICODE)
#: CJK ideographs, kana, hangul, CJK punctuation/fullwidth forms.
_CJK = re.compile(
    r"[\u2e80-\u2fff\u3000-\u30ff\u3100-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
    r"\uac00-\ud7af\uf900-\ufaff\uff00-\uffef]"
)
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
    AND-list of terms (for scanning rows the index does not cover); ``terms`` are folded
    word tokens (``fts``) or folded substrings, for snippets."""

    kind: str
    match: str = ""
    groups: list[list[Term]] = field(default_factory=list)
    terms: list[str] = field(default_factory=list)


def _quote(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


def has_cjk(text: str) -> bool:
    """True when ``text`` contains a CJK character."""
    return bool(_CJK.search(text))


def has_symbol(text: str) -> bool:
    """True when ``text`` holds a non-ASCII symbol (Unicode category S*: emoji, arrows, …),
    which the word index's tokenizer treats as a separator."""
    return any(not c.isascii() and unicodedata.category(c)[0] == "S" for c in text)


def needs_substring(text: str) -> bool:
    """True when a term cannot be found through the word index: CJK (unicode61 keeps a CJK
    run as one token) or a symbol such as an emoji (not a token at all)."""
    return has_cjk(text) or has_symbol(text)


def _searchable(text: str, words: bool) -> bool:
    """Whether a term can match: it holds a symbol (found by substring), or a word token
    (``words``: the word index's tokens, so ``_`` alone, which no index row holds as a token,
    is no term of a word search) or a word character (a substring search finds ``_``)."""
    if has_symbol(text):
        return True
    return bool(textfold.word_tokens(text)) if words else bool(_WORD.search(text))


def _parts(query: str, *, words: bool = True) -> list[str | Term]:
    """Terms and operators of ``query``, with dangling operators already dropped. ``words``:
    for a word search (a term without a word token is dropped, as the index, the scan of rows
    it does not cover and the PostgreSQL query all would find nothing for it), else for a
    substring search."""
    parts: list[str | Term] = []
    for match in _TOKEN.finditer(query[:MAX_QUERY_CHARS]):
        phrase, word = match.group(1), match.group(2)
        if phrase is not None:
            if _searchable(phrase, words):
                parts.append(Term(" ".join(phrase.split())))
            continue
        if word in _OPERATORS:
            parts.append(word)
            continue
        body = word.rstrip("*")
        if _searchable(body, words):
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
    if not cleaned and parts:  # only operator words (`AND`, `OR OR`): they are the words sought
        return [Term(p) for p in parts if isinstance(p, str)]
    return cleaned


def _expression(parts: list[str | Term], *, prefixes: bool) -> str:
    return " ".join(
        p if isinstance(p, str) else _quote(p.text) + ("*" if p.prefix and prefixes else "")
        for p in parts
    )


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


def _only_excluded(query: str, parts: list[str | Term]) -> bool:
    """Whether ``query`` opens with ``NOT`` and has no ``OR``: every term in it is excluded,
    so nothing is sought (an index cannot list "every message without X"). ``_parts`` drops
    the leading ``NOT`` as a dangling operator, which would turn ``NOT x`` into ``x``."""
    first = _TOKEN.search(query[:MAX_QUERY_CHARS])
    return (
        first is not None
        and first.group(2) == "NOT"
        and "OR" not in parts
        and any(isinstance(p, Term) and p.text not in _OPERATORS for p in parts)
    )


def phrases(query: str) -> list[str]:
    """The phrases of ``sanitize(query)`` in FTS5's phrase order (every term is one quoted
    phrase; operators are not phrases), each as a MATCH expression of its own."""
    return [
        _quote(p.text) + ("*" if p.prefix else "")
        for p in _parts(scrub(query))
        if isinstance(p, Term)
    ]


def terms(query: str) -> list[str]:
    """Folded word tokens of ``query`` as the word index makes them (operators excluded)."""
    return [
        t
        for p in _parts(scrub(query))
        if isinstance(p, Term) and not p.negated
        for t in textfold.word_tokens(p.text)
    ]


def plan(query: str, *, substring: bool = False) -> Plan:
    """Decide how to run ``query`` (see the module doc). Never raises for any string.
    ``terms`` of the plan are what a snippet highlights: folded word tokens (``fts``) or
    folded substrings (``trigram``/``scan``) of the positive terms."""
    query = scrub(query)
    parts = _parts(query, words=False)
    texts = [p.text for p in parts if isinstance(p, Term)]
    substring = substring or any(needs_substring(t) for t in texts)
    if not substring:
        parts = _parts(query)
        texts = [p.text for p in parts if isinstance(p, Term)]
    groups = _groups(parts)
    if not groups or _only_excluded(query, parts):
        return Plan("none")
    positive = [t.text for g in groups for t in g if not t.negated]
    if substring:
        folded = list(dict.fromkeys(textfold.fold(t) for t in positive))
        if all(len(t) >= TRIGRAM_MIN_CHARS for t in texts):
            return Plan("trigram", _expression(parts, prefixes=False), groups, folded)
        return Plan("scan", "", groups, folded)
    words = list(dict.fromkeys(w for t in positive for w in textfold.word_tokens(t)))
    return Plan("fts", _expression(parts, prefixes=True), groups, words)


#: Joins a text's word tokens for phrase matching; never inside a token (unicode61 tokens are
#: letters, digits and the like), so a phrase is a substring of the joined tokens exactly when
#: its tokens stand in a row starting at a token boundary (``_Column.has``).
_SEP = "\x01"


@functools.lru_cache(maxsize=512)
def _needle(text: str, prefix: bool) -> str | None:
    """A term's tokens joined by ``_SEP`` as they must appear in a tokenised ``_Column`` (the
    last token open-ended when ``prefix``); None when the term has no word token (no match)."""
    want = textfold.word_tokens(text)
    if not want:
        return None
    return _SEP + _SEP.join(want) + ("" if prefix else _SEP)


class _Column:
    """One index column's text as ``matches`` reads it: tokenised (``_joined``) only when a
    cheaper test cannot settle a term. For ASCII text, unicode61's tokens are its lower-cased
    runs of letters and digits, so a term whose tokens are not all substrings of
    ``text.lower()`` cannot be in it."""

    __slots__ = ("text", "_lower", "_joined")

    def __init__(self, text: str):
        self.text = text
        self._lower = text.lower() if text.isascii() else None
        self._joined: str | None = None

    def has(self, term: Term) -> bool:
        """Whether ``term`` (a word, a phrase, a prefix) is in this text as FTS5 matches it."""
        needle = _needle(term.text, term.prefix)
        if needle is None:
            return False
        if self._lower is not None and not all(w in self._lower for w in needle.split(_SEP) if w):
            return False
        if self._joined is None:
            self._joined = _SEP + _SEP.join(textfold.word_tokens(self.text)) + _SEP
        return needle in self._joined


def matches(p: Plan, text: str | list[str]) -> bool:
    """Whether a row satisfies plan ``p`` the way its index would (words and phrases for
    ``fts``; case-folded substrings for ``trigram``/``scan``). ``text`` is the row's text, or
    its index columns' texts: a term holds when one column holds it (FTS5 matches a phrase
    within one column, never across two). Used for rows the index does not cover."""
    if p.kind == "none":
        return False
    texts = [text] if isinstance(text, str) else [t for t in text if t]
    if p.kind == "fts":
        columns = [_Column(t) for t in texts]
        return any(all(any(c.has(t) for c in columns) != t.negated for t in g) for g in p.groups)
    low = [textfold.fold(t) for t in texts]
    return any(
        all(any(textfold.fold(t.text) in lt for lt in low) != t.negated for t in g)
        for g in p.groups
    )

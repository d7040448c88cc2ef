"""What a search hit shows: a snippet centred on the match, with highlight spans, and context
neighbours cut to a bounded preview (issue 12 B6, B7).

* ``excerpt`` finds the match the way the index found it (``textfold``: the word index's
  tokens for word queries, FTS5's case folding for substrings), centres a window of
  ``SNIPPET_CHARS`` on the first match and returns the character spans of every match inside
  it, so a terminal can highlight them and a UI can too (``--json``);
* ``preview`` bounds a neighbour message: every string longer than ``PREVIEW_CHARS`` is cut
  and every list longer than ``PREVIEW_ITEMS`` shortened, and ``cut`` maps each shortened
  field's path to its full length (characters or items). A page of hits then stays small
  whatever the neighbours hold (a 3 MB tool output was inlined before).
"""
from __future__ import annotations

import re
from typing import Any

from . import textfold

SNIPPET_CHARS = 160
#: Longest string kept in a context neighbour (characters) and longest list (items).
PREVIEW_CHARS = 400
PREVIEW_ITEMS = 8
_SPACE = re.compile(r"\s+")


#: Text is tokenised in pieces of about this many characters (cut at whitespace) until the
#: first match, then one piece more: a snippet of a 3 MB tool output costs what its first
#: match's neighbourhood costs, not a tokenisation of the whole text.
_PIECE_CHARS = 1000


def _pieces(text: str):
    """``(offset, piece)`` of ``text`` in order, cut after whitespace so no token is split."""
    start = 0
    while start < len(text):
        end = start + _PIECE_CHARS
        if end < len(text):
            cut = max(text.rfind(" ", start, end), text.rfind("\n", start, end))
            end = cut + 1 if cut > start else end
        yield start, text[start:end]
        start = end


def match_spans(text: str, kind: str, terms: list[str], prefixes: tuple[str, ...] = ()) -> list[tuple[int, int]]:
    """Character spans of ``terms`` in ``text``, in text order, from the first match to about
    ``_PIECE_CHARS`` past it (what a snippet can show). ``kind`` ``fts``: tokens equal to a
    term (or starting with one of ``prefixes``); else case-folded substrings."""
    if not text or not terms:
        return []
    if kind == "fts":
        want = set(terms)
        needles = tuple(want) + prefixes
        if text.isascii():
            return _ascii_word_spans(text, want, prefixes, needles)
        spans: list[tuple[int, int]] = []
        for offset, piece in _pieces(text):
            found = [(offset + s, offset + e) for s, e, tok in textfold.words(piece)
                     if tok in want or (prefixes and tok.startswith(prefixes))]
            if spans:
                return spans + found
            spans = found
        return spans
    low = textfold.fold(text)
    spans = []
    for term in terms:
        start = low.find(term)
        while start >= 0 and term:
            spans.append((start, start + len(term)))
            start = low.find(term, start + len(term))
    return sorted(spans)


def _ascii_word_spans(text: str, want: set[str], prefixes: tuple[str, ...],
                      needles: tuple[str, ...]) -> list[tuple[int, int]]:
    """Word spans of ASCII ``text`` near its first match: ASCII folds by ``lower()``, so every
    token match starts at a substring hit of a needle; only the neighbourhood (± a snippet
    width) of each hit is tokenised, until one holds a real token match."""
    low = text.lower()
    hits = [i for n in needles if (i := low.find(n)) >= 0]
    pos = min(hits) if hits else -1
    while pos >= 0:
        a = low.rfind(" ", 0, max(0, pos - SNIPPET_CHARS)) + 1
        b = low.find(" ", pos + SNIPPET_CHARS)
        b = len(text) if b < 0 else b
        found = [(a + s, a + e) for s, e, tok in textfold.words(text[a:b])
                 if tok in want or (prefixes and tok.startswith(prefixes))]
        if found:
            return found
        hits = [i for n in needles if (i := low.find(n, pos + 1)) >= 0]
        pos = min(hits) if hits else -1
    return []


def excerpt(text: str, spans: list[tuple[int, int]], width: int = SNIPPET_CHARS) -> tuple[str, list[list[int]]]:
    """``(snippet, highlights)``: a window of about ``width`` characters of ``text`` centred on
    the first span, whitespace runs collapsed, ``…`` where cut, and the ``[start, end)``
    offsets (in the snippet) of the spans inside the window."""
    if spans:
        s, e = spans[0]
        start = max(0, min(s - (width - (e - s)) // 2, len(text) - width))
    else:
        start = 0
    end = min(len(text), start + width)
    out = ""
    marks: list[list[int]] = []
    pos = start
    for s, e in spans:
        s, e = max(s, pos), min(e, end)
        if s >= e:
            continue
        out = _append(out, text[pos:s])
        hit = _SPACE.sub(" ", text[s:e])
        if out.endswith(" ") and hit.startswith(" "):
            hit = hit[1:]
        marks.append([len(out), len(out) + len(hit)])
        out += hit
        pos = e
    out = _append(out, text[pos:end])
    lead = len(out) - len(out.lstrip())
    body = out.strip()
    prefix = "…" if start > 0 else ""
    shift = len(prefix) - lead
    marks = [[max(a + shift, len(prefix)), min(b + shift, len(prefix) + len(body))] for a, b in marks]
    return prefix + body + ("…" if end < len(text) else ""), [m for m in marks if m[0] < m[1]]


def _append(out: str, piece: str) -> str:
    piece = _SPACE.sub(" ", piece)
    if out.endswith(" ") and piece.startswith(" "):
        piece = piece[1:]
    return out + piece


def preview(value: Any, *, max_chars: int = PREVIEW_CHARS, max_items: int = PREVIEW_ITEMS) -> Any:
    """A bounded copy of a message dict: see the module doc. The result carries ``cut``
    (path → full length) when anything was shortened; nothing is added otherwise."""
    cut: dict[str, int] = {}
    out = _bound(value, "", cut, max_chars, max_items)
    if cut and isinstance(out, dict):
        out["cut"] = cut
    return out


def _bound(value: Any, path: str, cut: dict[str, int], max_chars: int, max_items: int) -> Any:
    if isinstance(value, str):
        if len(value) > max_chars:
            cut[path or "."] = len(value)
            return value[:max_chars] + "…"
        return value
    if isinstance(value, list):
        if len(value) > max_items:
            cut[path or "."] = len(value)
        return [_bound(v, f"{path}[{i}]", cut, max_chars, max_items) for i, v in enumerate(value[:max_items])]
    if isinstance(value, dict):
        return {k: _bound(v, f"{path}.{k}" if path else str(k), cut, max_chars, max_items) for k, v in value.items()}
    return value

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


def match_spans(text: str, kind: str, terms: list[str], prefixes: tuple[str, ...] = ()) -> list[tuple[int, int]]:
    """Character spans of ``terms`` in ``text``, in text order. ``kind`` ``fts``: tokens equal
    to a term (or starting with one of ``prefixes``); else case-folded substrings."""
    if not text or not terms:
        return []
    if kind == "fts":
        want = set(terms)
        return [(s, e) for s, e, tok in textfold.words(text) if tok in want or tok.startswith(prefixes)]
    low = textfold.fold(text)
    spans = []
    for term in terms:
        start = low.find(term)
        while start >= 0 and term:
            spans.append((start, start + len(term)))
            start = low.find(term, start + len(term))
    return sorted(spans)


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

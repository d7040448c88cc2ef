"""What a search hit shows: a snippet centred on the match, with highlight spans, and context
neighbours cut to a bounded preview.

* ``excerpt`` finds the match the way the index found it (``textfold``: the word index's
  tokens for word queries, FTS5's case folding for substrings), centres a window of
  ``SNIPPET_CHARS`` on the first match and returns the character spans of every match inside
  it, so a terminal can highlight them and a UI can too (``--json``);
* ``preview`` bounds a neighbour message: every string longer than ``PREVIEW_CHARS`` is cut
  and every list longer than ``PREVIEW_ITEMS`` shortened, and ``cut`` maps each shortened
  field's path to its full length (characters or items). A page of hits then stays small
  whatever the neighbours hold (a tool output of megabytes is never inlined).
"""

from __future__ import annotations

import functools
import re
from typing import Any

from quill.store.search import textfold

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


def match_spans(
    text: str, kind: str, terms: list[str], prefixes: tuple[str, ...] = ()
) -> list[tuple[int, int]]:
    """Character spans of ``terms`` in ``text``, in text order, from the first match to at
    least ``2 * SNIPPET_CHARS`` past it (more than a snippet centred on it can show). ``kind``
    ``fts``: tokens equal to a term (or starting with one of ``prefixes``); else case-folded
    substrings."""
    if not text or not terms:
        return []
    if kind == "fts":
        want = set(terms)
        if text.isascii():
            return _ascii_word_spans(text, want, prefixes)
        spans: list[tuple[int, int]] = []
        for offset, piece in _pieces(text):
            found = [
                (offset + s, offset + e)
                for s, e, tok in textfold.words(piece)
                if tok in want or (prefixes and tok.startswith(prefixes))
            ]
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


def finder(kind: str, terms: list[str], prefixes: tuple[str, ...] = ()):
    """``match_spans`` with its arguments bound: a function ``text -> spans`` equal to
    ``match_spans(text, kind, terms, prefixes)``, with the per-query work (the term set and
    the ASCII regex) done once for a page of hits instead of once per hit."""
    if kind != "fts" or not terms:
        return lambda text: match_spans(text, kind, terms, prefixes)
    pattern = _word_pattern(
        tuple(sorted(w for w in set(terms) if w.isascii())),
        tuple(sorted(p for p in prefixes if p.isascii())),
    )

    def find(text: str) -> list[tuple[int, int]]:
        if not text:
            return []
        if text.isascii():
            return _ascii_spans(text, pattern)
        return match_spans(text, kind, terms, prefixes)

    return find


def snippet_finder(
    kind: str, terms: list[str], prefixes: tuple[str, ...] = (), width: int = SNIPPET_CHARS
):
    """A function ``text -> (snippet, highlights) | None``, equal to ``excerpt(text, spans,
    width)`` with ``spans = finder(kind, terms, prefixes)(text)`` when there are spans and None
    when there are none. For ASCII text and a word query the spans are read only up to the
    window's end (``excerpt`` drops the ones after it; ``match_spans`` stops at its horizon)."""
    find = finder(kind, terms, prefixes)
    if kind != "fts" or not terms:
        return lambda text: excerpt(text, spans, width) if (spans := find(text)) else None
    pattern = _word_pattern(
        tuple(sorted(w for w in set(terms) if w.isascii())),
        tuple(sorted(p for p in prefixes if p.isascii())),
    )

    def snip(text: str) -> tuple[str, list[list[int]]] | None:
        if not text:
            return None
        if not text.isascii():
            spans = find(text)
            return excerpt(text, spans, width) if spans else None
        if pattern is None:
            return None
        low = text.lower()  # as _ascii_spans
        first = pattern.search(low)
        if first is None:
            return None
        s, e = first.span()
        start = max(0, min(s - (width - (e - s)) // 2, len(text) - width))
        end = min(len(text), start + width)
        stop = min(end, s + 2 * SNIPPET_CHARS + 1)  # _ascii_spans' horizon, excerpt's window end
        spans = [(s, e)]
        for m in pattern.finditer(low, e):
            if m.start() >= stop:
                break
            spans.append(m.span())
        return _window_excerpt(text, start, end, spans)

    return snip


def _ascii_word_spans(
    text: str, want: set[str], prefixes: tuple[str, ...]
) -> list[tuple[int, int]]:
    """Word spans of ASCII ``text``, from its first match to ``2 * SNIPPET_CHARS`` past it.

    For ASCII text the word index's tokenizer (unicode61, default token characters) makes
    exactly the maximal runs of ``[0-9A-Za-z]`` and folds them by ASCII ``lower()``, so a token
    equal to a term (or starting with a prefix) is a regular-expression match in the
    lower-cased text bounded by non-alphanumerics on both sides (the prefix form runs to the
    token's end). Terms that are not ASCII can never equal an ASCII token. The regex runs in
    C and no token list is built (tests/test_search_text_results.py checks it against the
    tokenizer)."""
    return _ascii_spans(
        text,
        _word_pattern(
            tuple(sorted(w for w in want if w.isascii())),
            tuple(sorted(p for p in prefixes if p.isascii())),
        ),
    )


def _ascii_spans(text: str, pattern: re.Pattern[str] | None) -> list[tuple[int, int]]:
    """``_ascii_word_spans`` with its regex (``_word_pattern``) given."""
    if pattern is None:
        return []
    low = text.lower()  # ASCII: FTS5's folding, same length (cheaper than a case-insensitive regex)
    first = pattern.search(low)
    if first is None:
        return []
    horizon = first.start() + 2 * SNIPPET_CHARS
    spans = [first.span()]
    for m in pattern.finditer(low, first.end()):
        if m.start() > horizon:
            break
        spans.append(m.span())
    return spans


@functools.lru_cache(maxsize=256)
def _word_pattern(words: tuple[str, ...], prefixes: tuple[str, ...]) -> re.Pattern[str] | None:
    """The token-matching regex of ``_ascii_word_spans`` (None: nothing can match). Each
    alternative starts with its first character and only then looks behind it (``(?<!…)``
    two characters back: the one before the match must not be alphanumeric), so the regex
    engine can skip ahead to candidate first characters instead of trying every position."""

    def start(w: str) -> str:
        return re.escape(w[0]) + "(?<![0-9a-z].)" + re.escape(w[1:])

    alts = [start(w) + "(?![0-9a-z])" for w in sorted(words, key=len, reverse=True)]
    alts += [start(p) + "[0-9a-z]*" for p in prefixes]
    if not alts:
        return None
    return re.compile("|".join(alts), re.ASCII)


def excerpt(
    text: str, spans: list[tuple[int, int]], width: int = SNIPPET_CHARS
) -> tuple[str, list[list[int]]]:
    """``(snippet, highlights)``: a window of about ``width`` characters of ``text`` centred on
    the first span, whitespace runs collapsed, ``…`` where cut, and the ``[start, end)``
    offsets (in the snippet) of the spans inside the window."""
    if spans:
        s, e = spans[0]
        start = max(0, min(s - (width - (e - s)) // 2, len(text) - width))
    else:
        start = 0
    return _window_excerpt(text, start, min(len(text), start + width), spans)


def _window_excerpt(
    text: str, start: int, end: int, spans: list[tuple[int, int]]
) -> tuple[str, list[list[int]]]:
    """``excerpt`` once its window ``text[start:end]`` is known (spans in text order)."""
    inside: list[tuple[int, int]] = []
    pos = start
    one_pass = True  # no span starts or ends with whitespace (see _collapsed_excerpt)
    for s, e in spans:
        if s >= end:
            break  # spans come in text order
        if s < pos:
            s = pos
        if e > end:
            e = end
        if s >= e:
            continue
        if one_pass and (text[s].isspace() or text[e - 1].isspace()):
            one_pass = False
        inside.append((s, e))
        pos = e
    if one_pass:
        return _collapsed_excerpt(text, start, end, inside)
    out, marks = _joined(text, start, end, inside)
    lead = len(out) - len(out.lstrip())
    body = out.strip()
    prefix = "…" if start > 0 else ""
    shift = len(prefix) - lead
    marks = [
        [max(a + shift, len(prefix)), min(b + shift, len(prefix) + len(body))] for a, b in marks
    ]
    return prefix + body + ("…" if end < len(text) else ""), [m for m in marks if m[0] < m[1]]


#: Whitespace runs that collapsing shortens (a single whitespace character stays one character).
_RUNS = re.compile(r"\s{2,}")


def _collapsed_excerpt(
    text: str, start: int, end: int, inside: list[tuple[int, int]]
) -> tuple[str, list[list[int]]]:
    """``excerpt``'s result for the window ``text[start:end]`` and its ``inside`` spans when no
    span starts or ends with whitespace, equal to the piecewise ``_joined`` path
    (tests/test_search_text_results.py). The snippet body is the window with every whitespace run
    collapsed to one space and both ends stripped (``str.split``: the same whitespace as
    ``_SPACE``, ``str.isspace``). A span boundary then never lies inside a whitespace run, so
    its offset in the body is its offset in the window, minus what the runs wholly before it
    lost (length - 1 each; ``_RUNS`` finds only the runs that lose anything), minus the one
    leading space the strip removes, plus the ``…`` prefix: no span is clipped or emptied."""
    window = text[start:end]
    body = " ".join(window.split())
    prefix = "…" if start > 0 else ""
    lead = 1 if window[:1].isspace() else 0
    shift = len(prefix) - start - lead
    # The runs lost len(window) - len(body) - the two end spaces in all: none, no regex pass.
    lost = len(window) - len(body) - lead - (1 if body and window[-1].isspace() else 0)
    runs = (
        [(m.end() + start, m.end() - m.start() - 1) for m in _RUNS.finditer(window)]
        if inside and lost
        else []
    )
    if not runs:
        marks = [[s + shift, e + shift] for s, e in inside]
    else:
        marks, i, n = [], 0, len(runs)
        for s, e in inside:
            while i < n and runs[i][0] <= s:
                shift -= runs[i][1]
                i += 1
            a = s + shift
            while i < n and runs[i][0] <= e:
                shift -= runs[i][1]
                i += 1
            marks.append([a, e + shift])
    return prefix + body + ("…" if end < len(text) else ""), marks


def _joined(
    text: str, start: int, end: int, inside: list[tuple[int, int]]
) -> tuple[str, list[list[int]]]:
    """The window ``text[start:end]`` with whitespace runs collapsed (also across pieces) and
    the offsets of the ``inside`` spans in it, piece by piece."""
    out = ""
    marks: list[list[int]] = []
    pos = start
    for s, e in inside:
        out = _append(out, text[pos:s])
        hit = _SPACE.sub(" ", text[s:e])
        if out.endswith(" ") and hit.startswith(" "):
            hit = hit[1:]
        marks.append([len(out), len(out) + len(hit)])
        out += hit
        pos = e
    return _append(out, text[pos:end]), marks


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


#: Types ``_bound`` returns as they are (JSON's scalars): checked by ``type() in`` before the
#: ``isinstance`` tests, which decide everything else exactly as before.
_SCALARS = frozenset({int, float, bool, type(None)})


def _bound(value: Any, path: str, cut: dict[str, int], max_chars: int, max_items: int) -> Any:
    if isinstance(value, str):
        if len(value) > max_chars:
            cut[path or "."] = len(value)
            return value[:max_chars] + "…"
        return value
    if isinstance(value, list):
        if len(value) > max_items:
            cut[path or "."] = len(value)
        items = value[:max_items]  # a new plain list; only the items that need it are replaced
        for i, v in enumerate(items):
            t = type(v)
            if (
                t in _SCALARS
                or t is str
                and len(v) <= max_chars
                or not isinstance(v, (str, list, dict))
            ):
                continue  # kept as it is: no path is built for it
            items[i] = _bound(v, f"{path}[{i}]", cut, max_chars, max_items)
        return items
    if isinstance(value, dict):
        out = dict(value)  # a new plain dict in the same key order; values replaced in place
        for k, v in value.items():
            # Scalars and short strings are kept as they are: no path is built for them.
            t = type(v)
            if (
                t in _SCALARS
                or t is str
                and len(v) <= max_chars
                or not isinstance(v, (str, list, dict))
            ):
                continue
            out[k] = _bound(v, f"{path}.{k}" if path else str(k), cut, max_chars, max_items)
        return out
    return value

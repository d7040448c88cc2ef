"""Ranked (BM25) word search over a bounded candidate set, without FTS5's full-index count.

The design ranks only the newest ``CANDIDATES`` matches (ranking every match of a common
word costs seconds at 1M messages; docs/architecture.md). FTS5's own ``bm25()`` does rank
only the rows it is called for, but before its first score it counts, for each phrase of the
query, every row of the whole index holding that phrase (``xQueryPhrase``, for the idf): for
a word in 98 % of 1M messages that is ~1M rows visited — most of a bounded ranked query's
time (bench/RESULTS.md, "Search II").

``bm25_bounded`` computes the same score as FTS5's ``bm25()`` (fts5_aux.c: k1 = 1.2, b =
0.75, every column weight 1, ``f`` = the phrase's instances in the row, ``D`` = the row's
tokens over all columns, ``avgdl`` and ``N`` from the index's own totals, idf = ln((N − n +
0.5) / (n + 0.5)) raised to 1e-6 when ≤ 0; negated, so smaller ranks first), except that a
phrase's document count ``n`` is counted over at most ``DF_SAMPLE`` of its newest matching
rows and, when it has more, extrapolated from their density in the id range they span:

* with every phrase in at most ``DF_SAMPLE`` rows the scores are FTS5's exactly;
* for a one-phrase query the order is FTS5's whatever ``n`` is (the idf is one positive
  factor common to every row);
* otherwise the phrases' relative weights use estimated document frequencies.
When every phrase is counted exactly, FTS5's own ``bm25()`` computes the scores (its count is
then bounded by the sample too, and C is faster than a Python auxiliary function on a small
index). tests/test_search_rank.py checks the Python formula and both cases against FTS5.
"""

from __future__ import annotations

import math
from typing import Any

import apsw

from quill.store.search import plan as query

#: Matches ranked: the newest this many rows matching the query (the bounded candidate set).
CANDIDATES = 1000
#: Rows per phrase counted for its document frequency before extrapolating.
DF_SAMPLE = 10_000
_K1, _B = 1.2, 0.75
_FUNCTION = "quill_bm25"


def _score(api: apsw.FTS5ExtensionApi, *doc_counts: float) -> float:
    """FTS5's bm25 for the current row, with the phrases' document counts given."""
    data = api.aux_data
    if data is None:
        rows = max(api.row_count, 1)
        avgdl = api.column_total_size(-1) / rows or 1.0
        idf = [max(math.log((rows - n + 0.5) / (n + 0.5)), 0.0) or 1e-6 for n in doc_counts]
        data = api.aux_data = (idf, avgdl)
    idf, avgdl = data
    norm = _K1 * (1 - _B + _B * api.column_size(-1) / avgdl)
    if len(idf) == 1:  # one phrase: its instances are all the row's instances (one call)
        freq = api.inst_count
        return -idf[0] * (freq * (_K1 + 1.0)) / (freq + norm)
    score = 0.0
    for i, weight in enumerate(idf):
        freq = sum(len(offsets) for offsets in api.phrase_locations(i))
        score += weight * (freq * (_K1 + 1.0)) / (freq + norm)
    return -score


def doc_count(conn: apsw.Connection, phrase: str, sample: int = DF_SAMPLE) -> float:
    """Rows of the word index holding ``phrase``: exact when at most ``sample``, else the
    newest ``sample`` rows' density over the id range they span times the indexed id range."""
    return _doc_count(conn, phrase, sample)[0]


def _doc_count(conn: apsw.Connection, phrase: str, sample: int) -> tuple[float, bool]:
    """``(doc_count, exact)``."""
    n, low = conn.execute(
        "SELECT count(*), min(rowid) FROM "
        "(SELECT rowid FROM messages_fts WHERE messages_fts MATCH ? "
        f"ORDER BY rowid DESC LIMIT {int(sample)})",
        (phrase,),
    ).fetchone()
    if n < sample:
        return float(n), True
    # Two subqueries: each is one index probe; "SELECT min(id), max(id)" would scan the table.
    first, last = conn.execute(
        "SELECT (SELECT min(id) FROM messages), (SELECT max(id) FROM messages)"
    ).fetchone()
    return n * (last - first + 1) / max(last - low + 1, 1), False


def bm25_bounded(
    conn: apsw.Connection,
    text: str,
    *,
    limit: int = 20,
    candidates: int = CANDIDATES,
    sample: int = DF_SAMPLE,
) -> list[tuple[int, float]]:
    """``(message id, score)`` of the best ``limit`` of the newest ``candidates`` rows of the
    word index matching ``text`` (any string: ``query.plan``), best first (lowest score, as
    FTS5's ``bm25()``; ties newest first). Visibility is not applied here (``ranked`` takes
    the caller's filters; ``store.search.run`` ranks with them). When every phrase was counted
    exactly, FTS5's own ``bm25()`` scores the candidates (the same scores, in C; its own count
    then visits at most ``sample`` rows per phrase); else ``_score`` with the estimated counts.
    Raises ``ValueError`` when ``text`` is not a word query (substring/CJK routes have no word
    index to rank by)."""
    plan = query.plan(text)
    if plan.kind == "none":
        return []
    if plan.kind != "fts":
        raise ValueError(
            f"ranked search needs a word query; {text!r} goes to the {plan.kind} route"
        )
    return ranked(
        conn, plan.match, query.phrases(text), limit=limit, candidates=candidates, sample=sample
    )


def ranked(
    conn: apsw.Connection,
    match: str,
    phrases: list[str],
    *,
    limit: int = 20,
    candidates: int = CANDIDATES,
    sample: int = DF_SAMPLE,
    join: str = "",
    where: str = "1",
    args: tuple[Any, ...] = (),
) -> list[tuple[int, float]]:
    """``bm25_bounded`` for the FTS5 expression ``match`` whose phrases are ``phrases``
    (``query.phrases``: each one's document count is sampled), the candidates being the newest
    ``candidates`` rows of ``messages_fts f`` (joined with ``join``, e.g. ``JOIN messages m ON
    m.id = f.rowid``) that match and satisfy the SQL condition ``where`` (its parameters
    ``args``). The filters bound the candidates, not the document counts (FTS5's ``bm25()``
    counts over the whole index too), so a filtered ranking scores each row as an unfiltered
    one does."""
    counted = [_doc_count(conn, p, sample) for p in phrases]
    sql = _RANKED_SQL.replace("{join}", join).replace("{where}", where)
    if all(exact for _, exact in counted):
        return conn.execute(
            sql.format(score="bm25(messages_fts)", candidates=int(candidates), limit=int(limit)),
            (match, *args),
        ).fetchall()
    conn.register_fts5_function(_FUNCTION, _score)
    counts = [n for n, _ in counted]
    extra = "".join(", ?" for _ in counts)
    return conn.execute(
        sql.format(
            score=f"{_FUNCTION}(messages_fts{extra})", candidates=int(candidates), limit=int(limit)
        ),
        (*counts, match, *args),
    ).fetchall()


# The candidates: the newest matches (FTS5 hands rows out by rowid, descending, so only the
# LIMIT rows are read and scored); then ordered by score. {join}/{where} are the caller's.
# The LIMITs are literals: a LIMIT parameter on an FTS5 query makes SQLite re-prepare the
# statement at every call (store/search/run.py, measured there).
_RANKED_SQL = (
    "SELECT id, r FROM (SELECT f.rowid AS id, {score} AS r FROM messages_fts f {join} "
    "WHERE messages_fts MATCH ? AND ({where}) ORDER BY f.rowid DESC LIMIT {candidates}) "
    "ORDER BY r, id DESC LIMIT {limit}"
)


def ranked_with_counts(
    conn: apsw.Connection,
    match: str,
    counts: list[float],
    *,
    limit: int = 20,
    candidates: int = CANDIDATES,
) -> list[tuple[int, float]]:
    """``bm25_bounded``'s ranking of the FTS5 expression ``match`` with the phrases'
    document counts given (``_score``, FTS5's formula in Python)."""
    conn.register_fts5_function(_FUNCTION, _score)
    args = "".join(", ?" for _ in counts)
    sql = _RANKED_SQL.replace("{join}", "").replace("{where}", "1")
    return conn.execute(
        sql.format(
            score=f"{_FUNCTION}(messages_fts{args})", candidates=int(candidates), limit=int(limit)
        ),
        (*counts, match),
    ).fetchall()


def describe() -> dict[str, Any]:
    """The constants above, for reports."""
    return {"candidates": CANDIDATES, "df_sample": DF_SAMPLE, "k1": _K1, "b": _B}

"""A substring or word search folds case as FTS5 does on both backends (``textfold.fold``).
PostgreSQL's substring routes match with ``ILIKE`` (``lower()`` of the database's collation),
which differs
from FTS5's fold on 406 code points (C.UTF-8, PostgreSQL 15+): ``İ`` lowers to ``i`` there but
FTS5 keeps it, ``ſ``/``ς``/``µ`` fold to ``s``/``σ``/``μ`` in FTS5 but stay themselves under
``lower()``, Cherokee capitals lower there only. Known fault, not fixed yet: PostgreSQL needs a
fold of its own (or the FTS5 table) on its substring routes."""

from __future__ import annotations

import pytest
from semantics_helpers import Store

TEXTS = ["İzmir trip", "izmir trip", "ſtop sign", "stop sign", "λόγος end", "λόγοσ end"]
QUERIES = ["İz", "İzm", "sto", "ſto", "γος", "γοσ"]


@pytest.mark.xfail(strict=True, reason="PostgreSQL substring routes fold with lower(), not FTS5")
def test_substring_hits_fold_case_alike_on_both_backends(tmp_path, pg_store_url):
    stores = [Store(tmp_path / "lite"), Store(tmp_path / "pg", pg_store_url)]
    msgs = [{"role": "user", "content": t} for t in TEXTS]
    got = []
    try:
        for s in stores:
            s.apply("messages.append", {"session_id": "s", "messages": msgs})
            s.index()
            with s.reader() as r:
                got.append(
                    {q: sorted(h["snippet"] for h in r.search(q, substring=True)) for q in QUERIES}
                )
    finally:
        for s in stores:
            s.backend.close()
    assert got[0] == got[1]


WORD_TEXTS = ["λόγος end", "λόγοσ end", "µs unit", "μs unit"]
WORD_QUERIES = ["λογος", "λόγοσ", "µs", "μs"]


@pytest.mark.xfail(strict=True, reason="PostgreSQL's word index folds with lower()+unaccent")
def test_word_hits_fold_alike_on_both_backends(tmp_path, pg_store_url):
    """The word index too: FTS5's unicode61 folds ``ς`` to ``σ`` and ``µ`` (micro sign) to
    ``μ`` but keeps Greek accents; PostgreSQL's ``quill_words`` keeps the first two apart
    and strips the accents (``unaccent``)."""
    stores = [Store(tmp_path / "lite"), Store(tmp_path / "pg", pg_store_url)]
    msgs = [{"role": "user", "content": t} for t in WORD_TEXTS]
    got = []
    try:
        for s in stores:
            s.apply("messages.append", {"session_id": "s", "messages": msgs})
            s.index()
            with s.reader() as r:
                got.append({q: sorted(h["snippet"] for h in r.search(q)) for q in WORD_QUERIES})
    finally:
        for s in stores:
            s.backend.close()
    assert got[0] == got[1]

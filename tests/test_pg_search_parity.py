"""PostgreSQL and SQLite return the same hits, in the same order, for every query class, on
a sample of the real corpus drained into both stores from one spool; and through each of the
PostgreSQL index routes (index-first, id windows over the GIN and key bitmaps, the
backwards key walk: store/postgres/windows.py), which must change only the cost."""

from __future__ import annotations

import re
from collections import Counter

import pytest
from conftest import CORPUS
from semantics_helpers import Store

from quill.spool import Spool
from quill.store.factory import open_url
from quill.store.postgres import windows
from quill.store.search import candidates

pytestmark = pytest.mark.corpus

#: Messages of the corpus sample (every session of the first files, in file order).
SAMPLE_MESSAGES = 4000
_ALPHA = re.compile(r"\b[a-z]{4,}\b")
_CJK = re.compile(r"[\u4e00-\u9fff]{3,}")


def _sample() -> list[tuple[str, list[dict]]]:
    """``(session_id, messages)`` of the corpus sample: sessions holding CJK text first (the
    corpus has few), then the rest in file order, up to ``SAMPLE_MESSAGES`` messages."""
    from quill.ops.importers import iter_transcript_files, parse_file

    sessions = [
        (s.session["session_id"], s.messages)
        for p in iter_transcript_files([CORPUS])
        for s in parse_file(p).sessions
    ]
    sessions.sort(key=lambda s: not any(_CJK.search(str(m.get("content"))) for m in s[1]))
    out, n = [], 0
    for sid, msgs in sessions:
        if n >= SAMPLE_MESSAGES:
            break
        out.append((sid, msgs[: SAMPLE_MESSAGES - n]))
        n += len(out[-1][1])
    return out


def _queries(texts: list[str]) -> dict[str, dict]:
    """One query per class, picked from the sample's own text (deterministic)."""
    docs = [set(_ALPHA.findall(t.lower())) for t in texts]
    df = Counter(w for d in docs for w in d)
    common = [w for w, _ in df.most_common(40)]
    rare = sorted(w for w, n in df.items() if n == 2 and len(w) >= 7)[0]
    bigrams: Counter[str] = Counter()
    for t in texts:
        words = _ALPHA.findall(t.lower())
        bigrams.update({f"{a} {b}" for a, b in zip(words, words[1:]) if a != b})
    phrase = bigrams.most_common(1)[0][0]
    mid = sorted(w for w, n in df.items() if 20 <= n <= 60 and len(w) >= 8)[0]
    cjk = next(m.group(0)[:3] for t in texts for m in [_CJK.search(t)] if m)
    return {
        "common word": dict(text=common[0]),
        "rare word": dict(text=rare),
        "phrase": dict(text=f'"{phrase}"'),
        "phrase in text only": dict(text=f'"{phrase}"', kinds=["text"]),
        "two frequent words": dict(text=f"{common[1]} {common[2]}"),
        "OR": dict(text=f"{rare} OR {mid}"),
        "NOT": dict(text=f"{common[0]} NOT {common[3]}"),
        "prefix": dict(text=mid[:4] + "*"),
        "substring": dict(text=mid[2:7], substring=True),
        "CJK": dict(text=cjk),
        "short scan": dict(text=mid[1:3], substring=True),
        "audit projection": dict(text=common[5], projection="audit"),
        "role filter": dict(text=common[1], role="assistant"),
    }


def _key(hits: list[dict]) -> list[tuple]:
    """What a hit shows, without what each store assigns (message ids; the arrival time a
    message without a timestamp gets)."""

    def near(m: dict | None) -> tuple | None:
        return None if m is None else (m["role"], str(m.get("content")))

    return [
        (h["session_id"], h["role"], h["matched_in"], h["snippet"], near(h.get("before")))
        + (near(h.get("after")),)
        for h in hits
    ]


@pytest.fixture(scope="module")
def stores(tmp_path_factory, request):
    """A SQLite and a PostgreSQL store holding the corpus sample, and the queries."""
    import uuid

    import psycopg
    from run_resources import require

    pg_url = require(request, "postgres")["url"]

    name = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(pg_url, autocommit=True) as c:
        c.execute(f'CREATE SCHEMA "{name}"')
    sep = "&" if "?" in pg_url else "?"
    url = f"{pg_url}{sep}options=-csearch_path%3D{name},public"
    root = tmp_path_factory.mktemp("parity")
    lite, pg = Store(root / "sqlite"), Store(root / "pg", url)
    # The same messages stored plain: SQLite's trigram index holds a packed text whole, so
    # where the scan's bound binds, a packed store finds rows PostgreSQL's bounded scan (and
    # SQLite's over plain rows) never reaches; the bound's rule is compared over plain rows.
    plain = Store.__new__(Store)
    plain.root, plain.spool = root / "plain", Spool(root / "plain" / "spool")
    plain.backend = open_url(None, plain.root / "state.db", "test-spool", pack_min_bytes=10**9)
    plain.kind, plain.conn = plain.backend.kind, plain.backend.conn
    sample = _sample()  # parsed once: the three stores are given the same sessions
    for s in (lite, pg, plain):
        for sid, msgs in sample:
            s.spool.append("messages.append", {"session_id": sid, "messages": msgs})
        s.drain()
        s.index()
    pg.conn.execute("ANALYZE")
    texts = [
        r[0]
        for r in lite.conn.execute("SELECT quill_text(content) FROM messages WHERE content != ''")
    ]
    blobs = "SELECT count(*) FROM messages WHERE typeof(content) = 'blob'"
    assert plain.conn.execute(blobs).fetchone()[0] == 0 < lite.conn.execute(blobs).fetchone()[0]
    yield lite, pg, _queries(texts), plain
    lite.close()
    pg.close()
    plain.close()
    with psycopg.connect(pg_url, autocommit=True) as c:
        c.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


ROUTES = {
    "as configured": {},
    "every word query index-first": dict(INDEX_FIRST_MAX_ROWS=10**12),
    "windows over the bitmaps": dict(INDEX_FIRST_MAX_ROWS=0, WALK_MIN_DENSITY=2.0),
    "windows walking the key": dict(INDEX_FIRST_MAX_ROWS=0, WALK_MIN_DENSITY=0.0),
    "tiny windows": dict(INDEX_FIRST_MAX_ROWS=0, WINDOW_MATCHES=0, TRIGRAM_DENSITY=1.0),
    # The substring routes' scan bound (both backends): each scan match within 7 rows below
    # the previous one, so the scans of both stop at the same gap.
    "scan bound of 7 rows": dict(SCAN_MAX_ROWS=7),
}


@pytest.mark.parametrize("route", list(ROUTES))
def test_postgresql_returns_sqlites_hits_for_every_query_class(stores, route, monkeypatch):
    lite, pg, queries, plain = stores
    if "SCAN_MAX_ROWS" in ROUTES[route]:
        lite = plain
    for name, value in ROUTES[route].items():
        monkeypatch.setattr(candidates if name == "SCAN_MAX_ROWS" else windows, name, value)
    with lite.reader() as lr, pg.reader() as pr:
        for cls, kw in queries.items():
            for limit in (5, 40):
                want = lr.search(limit=limit, **kw)
                got = pr.search(limit=limit, **kw)
                diff = [(a, b) for a, b in zip(_key(got), _key(want)) if a != b][:1]
                assert _key(got) == _key(want), (cls, kw, limit, diff)
                # a class answers with a full small page (rare words and CJK: with something),
                # unless the route bounds the scan so tightly that a sparse term ends it
                full = 1 if cls in ("rare word", "CJK") else 5
                if "SCAN_MAX_ROWS" not in ROUTES[route]:
                    assert len(want) >= full, (cls, kw, len(want))

"""Random stored content through every search route and transcript read, on both backends
(property test; the served read paths — client, HTTP, dashboard, export — are in
``test_read_paths_property.py``, on SQLite).

The same random messages (lone surrogates, NULs, bidi and control characters, CJK and emoji,
70,000-character values, blobs, deep nesting, escaped lone surrogates in tool arguments) are
appended to a real SQLite file and a real PostgreSQL schema. Each message's marker word must
then be found, and nothing may fail, through every route a search can take: before the index
catches up (SQLite's scan of the unindexed tail) and after it, by word, by substring
(trigram), by a short substring (the bounded scan), ranked (``order="relevance"``), by kind;
on PostgreSQL each index route (``store/postgres/windows.py``: as configured, index-first,
windows over the bitmaps, windows walking the key). The transcript views (display, audit,
model), the listing and the context read must read every row back as the normaliser kept it.
``QUILL_FUZZ_N`` sets the examples (default 8)."""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, given, settings
from semantics_helpers import Store
from test_read_paths_property import N, _expected, _kept, messages

from quill.store.postgres import windows

ROUTES = {  # PostgreSQL's index routes; SQLite has one
    "as configured": {},
    "index-first": dict(INDEX_FIRST_MAX_ROWS=10**12),
    "windows over the bitmaps": dict(INDEX_FIRST_MAX_ROWS=0, WALK_MIN_DENSITY=2.0),
    "windows walking the key": dict(INDEX_FIRST_MAX_ROWS=0, WALK_MIN_DENSITY=0.0),
}
_SIDS = itertools.count()


def _kinds(m: dict) -> list[str]:
    if m.get("tool_calls") or m["role"] == "tool":
        return ["tool"]  # a result's marker is in its tool name
    return ["reasoning"] if m.get("reasoning") else ["text"]


def _search_every_way(r, sid: str, sent: list[dict]) -> None:
    for m in sent:
        marker = m["marker"]
        for kw in (
            {},
            {"substring": True},
            {"kinds": _kinds(m)},
            {"kinds": _kinds(m), "substring": True},
            {"order": "relevance"},
        ):
            hits = r.search(marker, session_id=sid, **kw)
            assert [h["session_id"] for h in hits] == [sid], (marker, kw, hits)
        # the short-term scan: every message of the session holds "zq"
        assert r.search("zq", session_id=sid, substring=True, limit=50)
        assert r.search_page(marker, per_session=1)["total"] == 1


def test_every_search_route_and_view_reads_random_content(tmp_path, backend, monkeypatch):
    store = Store(tmp_path, backend)
    routes = ROUTES if backend else {"as configured": {}}

    @settings(
        max_examples=N,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(messages())
    def check(msgs):
        sid = f"fuzz-{next(_SIDS)}"
        sent = []
        for m in msgs:
            extra = m.pop("extra_fields")
            sent.append({**m, **extra})
        assert store.apply("messages.append", {"session_id": sid, "messages": sent}) == []
        want = [_expected(m) for m in sent]
        if backend is None:  # SQLite: the unindexed tail is scanned
            with store.reader() as r:
                _search_every_way(r, sid, sent)
        store.index()
        for route in routes.values():
            with monkeypatch.context() as mp:
                for name, value in route.items():
                    mp.setattr(windows, name, value)
                with store.reader() as r:
                    _search_every_way(r, sid, sent)
        with store.reader() as r:
            assert [_kept(m) for m in r.get_messages(sid, "audit")] == want
            for view in ("display", "model"):
                r.get_messages(sid, view)
            (listed,) = [s for s in r.list_sessions(limit=1000) if s["id"] == sid]
            assert listed["message_count"] == len(sent)
            r.context(sid)

    try:
        check()
    finally:
        store.close()

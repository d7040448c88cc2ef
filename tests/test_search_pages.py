"""Search pages by cursor (``next`` → ``after``), on both backends with real stores: the pages
of a search are the hits of one big page, in the same order (every route, both orders, with
and without the per-session cap), rows stored while a reader pages neither repeat a hit nor
skip one, and a cursor of another query or listing is refused by type (``BadCursorError``)."""

from __future__ import annotations

import pytest
from harness import Home
from semantics_helpers import Store, assistant, user

import quill
from quill.store import paging
from quill.store.errors import BadCursorError


@pytest.fixture
def store(tmp_path, backend):
    s = Store(tmp_path, backend)
    yield s
    s.close()


def _seed(store: Store, word: str, sessions: int = 5, per: int = 7) -> None:
    """``sessions`` sessions with ``per`` matches each, interleaved (a session's matches are
    not contiguous in storage order), among messages that do not match."""
    for s in range(sessions):
        assert store.apply("session.create", {"session_id": f"s{s}", "title": f"S{s}"}) == []
    for i in range(per):
        for s in range(sessions):
            text = f"{word} note {i} of s{s} " + "filler " * (i * s % 5)
            msgs = [user(text), assistant(f"nothing here {i}")]
            assert store.apply("messages.append", {"session_id": f"s{s}", "messages": msgs}) == []


def _walk(reader, word: str, limit: int, between=None, **kw) -> tuple[list[int], int]:
    """Every hit's message id, following ``next`` from the first page; pages read.
    ``between(n)`` runs after page ``n``."""
    ids, after, pages = [], None, 0
    while True:
        got = reader().search_page(word, limit=limit, after=after, context=False, **kw)
        assert len(got["hits"]) <= limit
        ids += [h["message_id"] for h in got["hits"]]
        pages += 1
        if between is not None:
            between(pages)
        after = got["next"]
        if after is None:
            return ids, pages
        assert got["hits"] and pages < 200


@pytest.mark.parametrize(
    ("word", "order"),
    [("wombat", "newest"), ("wombat", "relevance"), ("袋熊类", "newest"), ("袋熊", "newest")],
)
@pytest.mark.parametrize("per_session", [3, None])
def test_pages_are_the_big_page_in_order(store, word, order, per_session):
    """Word (both orders), trigram and scan routes, capped and not: the pages joined are the
    hits of one page holding them all, in its order, and the last page says so."""
    _seed(store, word)
    store.index()
    with store.reader() as r:
        big = r.search_page(word, limit=1000, per_session=per_session, order=order, context=False)
        want = [h["message_id"] for h in big["hits"]]
        assert big["next"] is None
        assert len(want) == (15 if per_session else 35)
        for limit in (1, 4, 7):
            got, pages = _walk(lambda: r, word, limit, per_session=per_session, order=order)
            assert got == want, (limit, got, want)
            assert pages == -(-len(want) // limit)


def test_rows_stored_between_pages_neither_repeat_nor_skip(store):
    """Newest first with the cap: matches stored (and some left unindexed) while a reader
    pages are not in the pages of the search it started; every hit of the search as it was
    is on exactly one page, in order."""
    _seed(store, "wombat")
    store.index()
    with store.reader() as r:
        want = [
            h["message_id"]
            for h in r.search_page("wombat", limit=1000, per_session=3, context=False)["hits"]
        ]
    n = [0]

    def write(page: int) -> None:  # new matches in sessions already shown and a new one
        n[0] += 1
        for sid in ("s4", "s0", f"new{page}"):
            msgs = [user(f"wombat late {page} {sid}")]
            assert store.apply("messages.append", {"session_id": sid, "messages": msgs}) == []
        if page % 2:
            store.index()

    readers = []

    def reader():  # a fresh reader each page, as each CLI or HTTP call is
        if readers:
            readers.pop().__exit__(None, None, None)
        cm = store.reader()
        r = cm.__enter__()
        readers.append(cm)
        return r

    try:
        got, pages = _walk(reader, "wombat", 2, between=write, per_session=3)
    finally:
        for cm in readers:
            cm.__exit__(None, None, None)
    assert got == want and pages == 8 and n[0] == 8
    with store.reader() as r:  # a new search sees the new rows first
        fresh = r.search_page("wombat", limit=3, per_session=3, context=False)
        assert fresh["hits"][0]["message_id"] > max(want)


def test_a_cursor_of_another_query_or_listing_is_refused(store):
    _seed(store, "wombat", sessions=2, per=3)
    store.index()
    with store.reader() as r:
        first = r.search_page("wombat", limit=2, per_session=3, context=False)
        cursor = first["next"]
        assert cursor is not None
        # the same search with another limit or context continues
        more = r.search_page("wombat", limit=3, per_session=3, after=cursor, context=True)
        assert [h["message_id"] for h in more["hits"]]
        for other in (
            {"text": "koala"},
            {"text": "wombat", "role": "assistant"},
            {"text": "wombat", "order": "relevance"},
            {"text": "wombat", "per_session": 2},
            {"text": "wombat", "substring": True},
            {"text": "wombat", "session_id": "s0"},
            {"text": "wombat", "kinds": ["tool"]},
        ):
            kw = {"per_session": 3, **other}
            text = kw.pop("text")
            with pytest.raises(BadCursorError) as caught:
                r.search_page(text, limit=2, after=cursor, **kw)
            assert caught.value.foreign, other
        sessions_cursor = paging.encode("sessions", (1.0, "s0"))
        for bad in (sessions_cursor, "not a cursor", "bm9wZQ", cursor[:-4]):
            with pytest.raises(BadCursorError):
                r.search_page("wombat", limit=2, after=bad)


def test_client_pages_search_and_refuses_foreign_cursors(tmp_path, backend):
    home = Home(tmp_path / "h", backend, watch={"enabled": False})
    for i in range(9):
        home.say(f"c{i % 3}", f"platypus {i}")
    home.drain()
    q = quill.Client(home.root)
    big = q.search_results("platypus", limit=100, per_session=2)
    ids, after = [], None
    while True:
        page = q.search_results("platypus", limit=2, per_session=2, after=after)
        ids += [h["message_id"] for h in page["hits"]]
        after = page["next"]
        if after is None:
            break
    assert ids == [h["message_id"] for h in big["hits"]] and len(ids) == 6
    first = q.search_results("platypus", limit=2, per_session=2)
    with pytest.raises(quill.BadCursorError) as caught:
        q.search_results("echidna", limit=2, per_session=2, after=first["next"])
    assert isinstance(caught.value, quill.InvalidInputError) and caught.value.exit_code == 2
    with pytest.raises(quill.BadCursorError):
        q.search("platypus", limit=2, after="garbage", order="relevance")
    home.close()

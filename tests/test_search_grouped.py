"""One chatty session cannot fill the hit list: hits are capped per session, every session
with a match is listed with its count, and the result says how many matches there are (a
bounded count) — store (both backends), client, CLI and HTTP."""

from __future__ import annotations

import httpx
import pytest
from conftest import QuillCLI
from semantics_helpers import Store, assistant, user
from service_helpers import served

from quill.ops.client.client import Client


@pytest.fixture
def store(tmp_path, backend):
    s = Store(tmp_path, backend)
    yield s
    s.close()


def _chatty(store: Store, word: str = "wombat", n: int = 30) -> None:
    """An older quiet session with one match, then a chatty one with ``n`` newer matches."""
    assert store.apply("session.create", {"session_id": "quiet", "title": "Quiet one"}) == []
    quiet = user(f"{word} in a long note " + "about other things " * 20)  # ranks below
    assert store.apply("messages.append", {"session_id": "quiet", "messages": [quiet]}) == []
    assert store.apply("session.create", {"session_id": "chatty", "title": "Chatty one"}) == []
    msgs = [assistant(f"{word} number {i}") for i in range(n)]
    assert store.apply("messages.append", {"session_id": "chatty", "messages": msgs}) == []


@pytest.mark.parametrize(
    ("word", "order"),
    [("wombat", "newest"), ("wombat", "relevance"), ("袋熊类", "newest"), ("袋熊", "newest")],
)
def test_a_chatty_session_does_not_hide_the_others(store, word, order):
    """Word (both orders), trigram and scan routes: 3 hits of the chatty session, then the
    quiet session; both listed with their counts; the total is exact."""
    _chatty(store, word)
    store.index()
    with store.reader() as r:
        # Without a cap the newest 10 are all the chatty session's: the quiet one is hidden.
        plain = r.search(word, limit=10, order=order)
        assert {h["session_id"] for h in plain} == {"chatty"}
        got = r.search_page(word, limit=10, per_session=3, order=order, context=False)
    assert [h["session_id"] for h in got["hits"]] == ["chatty"] * 3 + ["quiet"]
    assert (got["total"], got["total_exact"], got["more"], got["per_session"]) == (
        31,
        True,
        True,
        3,
    )
    assert got["sessions"] == [
        {"session_id": "chatty", "title": "Chatty one", "shown": 3, "matches": 30},
        {"session_id": "quiet", "title": "Quiet one", "shown": 1, "matches": 1},
    ]
    with store.reader() as r:
        # One session asked for: no cap; everything shown: no more.
        one = r.search_page(word, limit=50, per_session=3, session_id="chatty", context=False)
        assert len(one["hits"]) == 30 and one["per_session"] is None and not one["more"]
        every = r.search_page(word, limit=50, per_session=3, context=False)
        assert len(every["hits"]) == 4 and every["more"]
        none = r.search_page("nothing-like-this", per_session=3)
        assert (none["hits"], none["total"], none["total_exact"], none["more"]) == (
            [],
            0,
            True,
            False,
        )


def test_the_count_is_bounded_and_says_so(store):
    from quill.store.search.group import COUNT_MAX

    _chatty(store, n=COUNT_MAX + 5)
    store.index()
    with store.reader() as r:
        full = r.search_page("wombat", limit=2, per_session=2, context=False)
        # A page that cannot fill reads every candidate: its count is exact past the bound.
        short = r.search_page("wombat", limit=5, per_session=2, context=False)
    assert full["total"] == COUNT_MAX and not full["total_exact"] and full["more"]
    assert full["sessions"][0] == {
        "session_id": "chatty",
        "title": "Chatty one",
        "shown": 2,
        "matches": COUNT_MAX,
    }
    assert [h["session_id"] for h in short["hits"]] == ["chatty", "chatty", "quiet"]
    assert (short["total"], short["total_exact"]) == (COUNT_MAX + 6, True)


def test_cli_client_and_http_carry_the_groups_and_the_total(tmp_path):
    home = tmp_path / "home"
    s = Store(home)
    _chatty(s, n=8)
    s.close()
    cli = QuillCLI(home)
    out = cli.json("search", "wombat")
    assert [h["session_id"] for h in out["hits"]] == ["chatty"] * 3 + ["quiet"]
    assert (out["total"], out["total_exact"], out["more"], out["per_session"]) == (9, True, True, 3)
    assert [(g["session_id"], g["shown"], g["matches"]) for g in out["sessions"]] == [
        ("chatty", 3, 8),
        ("quiet", 1, 1),
    ]
    assert len(cli.json("search", "wombat", "--per-session", "0")["hits"]) == 9
    human = cli.run("search", "wombat")
    assert "4 of 9 hit(s)" in human.stdout and "chatty: 3 of 8 hit(s) shown" in human.stdout
    assert "at most 3 per session" in human.stderr
    client = Client(home)
    assert client.search_results("wombat") == out
    assert len(client.search("wombat")) == 9  # the hit list keeps its old shape and meaning
    with served(cli) as base:
        got = httpx.get(f"{base}/api/v1/search", params={"q": "wombat", "context": "true"})
        assert got.status_code == 200, got.text
        body = got.json()
        assert body.pop("degraded") is False and body == out
        capped = httpx.get(f"{base}/api/v1/search", params={"q": "wombat", "per_session": 1})
        assert [h["session_id"] for h in capped.json()["hits"]] == ["chatty", "quiet"]
        bad = httpx.get(f"{base}/api/v1/search", params={"q": "wombat", "per_session": -1})
        assert bad.status_code == 422

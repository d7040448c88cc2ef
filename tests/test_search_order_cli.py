"""`quill search --order relevance` and `Client.search(order=)` reach the store's bounded
BM25 ranking (store/search/rank.py); an order the store cannot give is a usage error, not a
traceback."""

from __future__ import annotations

import json

from quill import Client, InvalidInputError


def test_relevance_order_through_the_cli_and_the_client(quill, home):
    msgs = [
        {"role": "user", "content": "zebra zebra zebra"},  # older, dense
        {"role": "user", "content": "a long note " + "about other things " * 30 + "and one zebra"},
    ]
    quill.run("push", "--session", "z", input="\n".join(json.dumps(m) for m in msgs))
    quill.drain()
    newest = [h["message_id"] for h in quill.json("search", "zebra")["hits"]]
    ranked = [
        h["message_id"] for h in quill.json("search", "zebra", "--order", "relevance")["hits"]
    ]
    assert newest == [2, 1] and ranked == [1, 2]
    assert [h["message_id"] for h in Client(home).search("zebra", order="relevance")] == ranked
    bad = quill.run("search", "zeb", "--substring", "--order", "relevance", check=False)
    assert bad.returncode == 2 and "quill: error:" in bad.stderr and "Traceback" not in bad.stderr
    try:
        Client(home).search("zebra", order="best")
    except InvalidInputError as exc:
        assert "order" in str(exc)
    else:
        raise AssertionError("an unknown order was accepted")
    # The human output says when more messages match than --limit shows (and not otherwise).
    one = quill.run("search", "zebra", "--limit", "1")
    assert (
        "more messages match; showing the 1 most recently stored" in one.stderr
        and "1 of 2 hit(s)" in one.stdout
    )
    two = quill.run("search", "zebra", "--limit", "2", "--order", "relevance")
    assert "more messages match" not in two.stderr and "2 of 2 hit(s)" in two.stdout
    assert len(quill.json("search", "zebra", "--limit", "1")["hits"]) == 1


def test_search_in_a_session_the_store_lacks_is_not_found(quill, home):
    quill.run("push", "--session", "z", input=json.dumps({"role": "user", "content": "zebra"}))
    quill.drain()
    assert (
        quill.json("search", "nothing-like-this", "--session", "z")["hits"] == []
    )  # exists: no hits
    missing = quill.run("search", "zebra", "--session", "nosuch", check=False)
    assert missing.returncode == 3 and "quill: error:" in missing.stderr, missing.stderr
    as_json = quill.run("search", "zebra", "--session", "nosuch", "--json", check=False)
    assert as_json.returncode == 3 and json.loads(as_json.stdout)["error"]["exit_code"] == 3


def test_search_says_it_orders_by_arrival_and_quotes_the_query_as_typed(quill, home):
    """The default order is the order messages reached the store, not their own timestamps
    (an import of last year's sessions lands on top): the help, the notes and the dashboard
    said "newest first". The title quotes the query as typed, not as a Python repr."""
    now = {"role": "user", "content": "it's a zebra today"}
    old = {"role": "user", "content": "it's a zebra of 2020", "timestamp": 1577836800}
    quill.run("push", "--session", "now", input=json.dumps(now))
    quill.run("push", "--session", "old", input=json.dumps(old))  # arrives last
    quill.drain()
    hits = quill.json("search", "zebra")["hits"]
    assert [h["session_id"] for h in hits] == ["old", "now"]  # arrival, not timestamp
    out = quill.run("search", "it's zebra", "--limit", "1")
    assert "hit(s) for \u201cit's zebra\u201d" in out.stdout, out.stdout
    assert "showing the 1 most recently stored" in out.stderr
    helptext = quill.run("search", "--help").stdout
    assert "most recently stored first" in helptext and "newest first" not in helptext
    assert "not their own timestamps" in " ".join(helptext.split())

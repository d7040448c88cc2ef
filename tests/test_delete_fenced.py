"""A ``sessions.delete`` decided on a view of the store older than another delete of the same
session must not remove the session made again since: host A looks at session S, host B
deletes S, host C appends to S (which makes it again, with new content), then A's delete of S
applies — it would remove C's new session. The delete now carries ``deletions_seen`` as a map
``{session id: deletions}`` (``ops.client.fence``), stamped through ``quill.Client``, ``quill
push`` and the HTTP API like a rename, and the applier skips each session deleted since."""

from __future__ import annotations

import json

import pytest
from conftest import QuillCLI
from harness import InProcessWriter

import quill as pkg
from quill.ops.client.errors import InvalidInputError
from quill.store import Reader


@pytest.fixture
def w(tmp_path):
    h = InProcessWriter(tmp_path / "home")
    yield h
    h.close()


def _deleted_then_made_again(w, sid: str) -> pkg.Client:
    """``sid`` applied (the stale view: deleted 0 times); another host's delete of it and a
    third host's append to it spooled after (not applied yet), so the store still shows the
    first ``sid`` when the caller decides."""
    client = pkg.Client(w.cfg.home)
    client.append(sid, [{"role": "user", "content": "first life"}])
    w.until_idle()
    client.delete_sessions([sid])  # host B
    client.append(sid, [{"role": "user", "content": "second life"}])  # host C
    return client


def _texts(w, sid: str) -> list[str]:
    with Reader(w.cfg.state_db) as r:
        if r.get_session(sid) is None:
            return []
        return [m["content"] for m in r.get_messages(sid)]


def test_a_delete_decided_before_another_delete_spares_the_session_made_since(w):
    sid = "raced"
    client = _deleted_then_made_again(w, sid)
    _, ack = client.delete_sessions([sid])  # host A, on its view: deleted 0 times
    w.until_idle()
    assert client.wait(ack, timeout=30).applied  # applied, as nothing for this session
    assert _texts(w, sid) == ["second life"]


def test_a_delete_skips_only_the_sessions_deleted_since(w):
    client = _deleted_then_made_again(w, "raced")
    client.append("plain", [{"role": "user", "content": "x"}])
    w.until_idle()
    # Made again after the first delete applied: A's view of "raced" is now stale again.
    client.delete_sessions(["raced"])
    client.append("raced", [{"role": "user", "content": "third life"}])
    _, ack = client.delete_sessions(["raced", "plain"])
    w.until_idle()
    assert client.wait(ack, timeout=30).applied
    assert _texts(w, "raced") == ["third life"]
    assert _texts(w, "plain") == []


def test_a_delete_from_a_view_that_saw_the_other_delete_removes_the_new_session(w):
    sid = "seen-again"
    client = _deleted_then_made_again(w, sid)
    w.until_idle()  # the view now holds the session made again (deleted once)
    _, ack = client.delete_sessions([sid])
    w.until_idle()
    assert client.wait(ack, timeout=30).applied
    assert _texts(w, sid) == []


def test_a_pushed_delete_decided_before_another_delete_spares_the_session_made_since(w):
    sid = "raced-push"
    _deleted_then_made_again(w, sid)
    op = {"op": "sessions.delete", "data": {"session_ids": [sid], "reason": "x"}}
    QuillCLI(w.cfg.home).run("push", input=json.dumps(op) + "\n")
    w.until_idle()
    assert _texts(w, sid) == ["second life"]


def test_an_http_delete_decided_before_another_delete_spares_the_session_made_since(w):
    import httpx
    from service_helpers import served

    from quill.ops.service.tokens import TokenStore

    sid = "raced-http"
    _deleted_then_made_again(w, sid)
    writer_token, _ = TokenStore(w.cfg.home / "tokens.db").create("t", ["write"])
    with served(QuillCLI(w.cfg.home)) as base:
        sent = httpx.post(
            f"{base}/api/v1/ops",
            json={"ops": [{"op": "sessions.delete", "data": {"session_ids": [sid]}}]},
            headers={"Authorization": f"Bearer {writer_token}"},
            timeout=60,
        )
    assert sent.status_code == 202, sent.text
    w.until_idle()
    assert _texts(w, sid) == ["second life"]


@pytest.mark.parametrize(
    "seen",
    [{"other": 0}, {"s": -1}, {"s": True}, {"s": "0"}, 3],
    ids=["unnamed-id", "negative", "bool", "text", "not-a-map"],
)
def test_a_malformed_deletions_seen_on_a_delete_is_refused_before_it_is_appended(w, seen):
    client = pkg.Client(w.cfg.home)
    with pytest.raises(InvalidInputError) as err:
        client.submit("sessions.delete", {"session_ids": ["s"], "deletions_seen": seen})
    assert err.value.reason == "invalid-field"

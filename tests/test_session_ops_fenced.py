"""A user's (or an agent's) operation on a session it sees — rename, flags, end, read mark —
decided before a delete of that session is applied, must not bring the session back: the
appliers of those ops create a missing session row, so a rename spooled right after a prune's
or a ``quill sessions delete``'s delete re-created the session as an empty fragment. They
now carry ``deletions_seen`` as imports do (``ops.client.fence``), through ``quill.Client``,
``quill push`` and the HTTP API, and are applied as nothing after such a delete."""

from __future__ import annotations

import json

import pytest
from conftest import QuillCLI
from harness import InProcessWriter

import quill as pkg
from quill.store import Reader

USER_OPS = [
    ("title", lambda c, sid: c.title(sid, "renamed")),
    ("flags", lambda c, sid: c.flags(sid, pinned=True)),
    ("end", lambda c, sid: c.end(sid)),
    ("mark_read", lambda c, sid: c.mark_read(sid)),
]


@pytest.fixture
def w(tmp_path):
    h = InProcessWriter(tmp_path / "home")
    yield h
    h.close()


def _seen_then_deleted(w, sid: str) -> pkg.Client:
    """``sid`` applied; a delete of it spooled (not applied yet): what a user's view holds
    while a prune's or another user's delete is on its way."""
    client = pkg.Client(w.cfg.home)
    client.append(sid, [{"role": "user", "content": "hello"}])
    w.until_idle()
    client.delete_sessions([sid])
    return client


@pytest.mark.parametrize("name,call", USER_OPS, ids=[n for n, _ in USER_OPS])
def test_a_client_op_decided_before_a_delete_does_not_bring_the_session_back(w, name, call):
    sid = f"gone-{name}"
    client = _seen_then_deleted(w, sid)
    ack = call(client, sid)
    w.until_idle()
    assert client.wait(ack, timeout=30).applied  # applied as nothing, not refused
    with Reader(w.cfg.state_db) as r:
        assert r.get_session(sid) is None, f"{name} re-created the deleted session"


def test_a_pushed_rename_decided_before_a_delete_does_not_bring_it_back(w):
    sid = "gone-push"
    _seen_then_deleted(w, sid)
    op = {"op": "session.title", "data": {"session_id": sid, "title": "renamed"}}
    QuillCLI(w.cfg.home).run("push", input=json.dumps(op) + "\n")
    w.until_idle()
    with Reader(w.cfg.state_db) as r:
        assert r.get_session(sid) is None


def test_an_op_on_a_session_the_store_does_not_hold_is_applied_as_before(w):
    client = pkg.Client(w.cfg.home)
    ack = client.title("brand-new", "first title")  # nothing to fence: the session is new
    w.until_idle()
    assert client.wait(ack, timeout=30).applied
    assert client.session("brand-new")["title"] == "first title"


def test_a_rename_after_the_delete_was_seen_renames_the_session_made_again(w):
    """The fence is about a view older than the delete: a user who sees the session again
    (re-created after the delete) renames it."""
    sid = "again"
    client = _seen_then_deleted(w, sid)
    w.until_idle()
    client.append(sid, [{"role": "user", "content": "back"}])
    w.until_idle()
    ack = client.title(sid, "second life")
    w.until_idle()
    assert client.wait(ack, timeout=30).applied
    assert client.session(sid)["title"] == "second life"


def test_an_http_rename_decided_before_a_delete_does_not_bring_it_back(w):
    import httpx
    from service_helpers import served

    from quill.ops.service.tokens import TokenStore

    sid = "gone-http"
    _seen_then_deleted(w, sid)
    writer_token, _ = TokenStore(w.cfg.home / "tokens.db").create("t", ["write"])
    with served(QuillCLI(w.cfg.home)) as base:
        sent = httpx.post(
            f"{base}/api/v1/ops",
            json={"ops": [{"op": "session.title", "data": {"session_id": sid, "title": "x"}}]},
            headers={"Authorization": f"Bearer {writer_token}"},
            timeout=60,
        )
    assert sent.status_code == 202, sent.text
    w.until_idle()
    with Reader(w.cfg.state_db) as r:
        assert r.get_session(sid) is None


def _unreadable_store(tmp_path):
    """A data dir whose store held session ``s`` and is no longer a database: nothing can be
    known of its deletions."""
    import os

    from harness import drain, make_home

    from quill.spool import Spool

    cfg = make_home(tmp_path / "home")
    with Spool(cfg.spool_dir) as sp:
        sp.append(
            "messages.append", {"session_id": "s", "messages": [{"role": "user", "content": "x"}]}
        )
    drain(cfg.home)
    for extra in ("-wal", "-shm"):
        cfg.state_db.with_name(cfg.state_db.name + extra).unlink(missing_ok=True)
    cfg.state_db.write_bytes(os.urandom(8192))
    return cfg


def test_a_client_op_the_store_could_not_fence_is_appended_and_said(tmp_path):
    """Never block an agent, never pretend: the rename is durable, and a ``FenceWarning``
    says it went without ``deletions_seen`` and why."""
    cfg = _unreadable_store(tmp_path)
    client = pkg.Client(cfg.home)
    with pytest.warns(pkg.FenceWarning, match="could not be read.*without deletions_seen"):
        ack = client.title("s", "renamed")
    assert ack.batch_id


def test_a_pushed_op_the_store_could_not_fence_is_appended_and_said(tmp_path):
    cfg = _unreadable_store(tmp_path)
    op = {"op": "session.end", "data": {"session_id": "s"}}
    out = QuillCLI(cfg.home).run("push", "--json", input=json.dumps(op) + "\n")
    (ack,) = json.loads(out.stdout)
    assert "without deletions_seen" in ack["unfenced"], ack
    assert "warning:" in out.stderr and "could not be read" in out.stderr


def test_an_http_op_the_store_could_not_fence_is_appended_and_said(tmp_path):
    import httpx
    from service_helpers import served

    from quill.ops.service.tokens import TokenStore

    cfg = _unreadable_store(tmp_path)
    writer_token, _ = TokenStore(cfg.home / "tokens.db").create("t", ["write"])
    with served(QuillCLI(cfg.home)) as base:
        sent = httpx.post(
            f"{base}/api/v1/ops",
            json={"ops": [{"op": "session.flags", "data": {"session_id": "s", "pinned": True}}]},
            headers={"Authorization": f"Bearer {writer_token}"},
            timeout=60,
        )
    assert sent.status_code == 202, sent.text
    (ack,) = sent.json()["acks"]
    assert "without deletions_seen" in (ack["unfenced"] or ""), ack


def test_an_op_with_no_store_yet_needs_no_fence_and_says_nothing(tmp_path):
    """No store: nothing was applied, so no session can have been deleted: exact, no warning."""
    import warnings

    from harness import make_home

    cfg = make_home(tmp_path / "home")
    with warnings.catch_warnings():
        warnings.simplefilter("error", pkg.FenceWarning)
        assert pkg.Client(cfg.home).title("s", "first").batch_id

"""A ``tokens.db`` copied with its data dir (``cp -a``) is not trusted by the copy: the copy's
server refuses the original's tokens (503 ``tokens-copied``, naming ``quill token rebind``),
its CLI says the same, and the original keeps working. ``quill token rebind`` accepts them on
the copy; ``--revoke-all`` gives the copy none of the original's. Real data dirs, real ``cp
-a``, a real ``quill serve`` and real HTTP."""

from __future__ import annotations

import subprocess

import httpx
from conftest import QuillCLI
from service_helpers import bearer, served, token


def test_a_copied_tokens_db_refuses_the_originals_tokens_until_rebound(tmp_path):
    from quill.ops.service.tokens import TokensCopiedError, TokenStore

    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    qa = QuillCLI(a)
    secret = token(qa, "read")
    assert TokenStore(a / "tokens.db").verify(secret) is not None
    subprocess.run(["cp", "-a", str(a), str(b)], check=True)
    qb = QuillCLI(b)

    store_b = TokenStore(b / "tokens.db")
    try:
        store_b.verify(secret)
        raise AssertionError("the copy accepted the original's token")
    except TokensCopiedError as exc:
        assert "quill token rebind" in str(exc) and str(a.resolve()) in str(exc)
    listed = qb.run("token", "list", check=False)
    assert listed.returncode != 0 and "quill token rebind" in listed.stderr, listed

    with served(qb) as base:
        r = httpx.get(f"{base}/api/v1/sessions", headers=bearer(secret), timeout=30)
        assert r.status_code == 503, r.text
        assert "tokens-copied" in r.text and "quill token rebind" in r.text
    with served(qa) as base:  # the original is untouched
        r = httpx.get(f"{base}/api/v1/sessions", headers=bearer(secret), timeout=30)
        assert r.status_code == 200, r.text

    assert qb.json("token", "rebind")["active_tokens"] == 1
    assert store_b.verify(secret) is not None  # accepted on the copy, by its owner's choice
    assert TokenStore(a / "tokens.db").verify(secret) is not None

    c = tmp_path / "c"
    subprocess.run(["cp", "-a", str(a), str(c)], check=True)
    assert QuillCLI(c).json("token", "rebind", "--revoke-all")["active_tokens"] == 0
    assert TokenStore(c / "tokens.db").verify(secret) is None  # re-keyed: none carried over
    assert TokenStore(a / "tokens.db").verify(secret) is not None


def test_a_tokens_db_from_before_bindings_is_bound_by_its_first_write(tmp_path):
    """A file written before bindings existed has no binding row: accepted as it is, and
    bound where it is by the next write (``quill serve`` binds it at start)."""
    import apsw

    from quill.ops.service.tokens import TokensCopiedError, TokenStore

    a = tmp_path / "a"
    a.mkdir()
    store = TokenStore(a / "tokens.db")
    secret, _ = store.create("t", ["read"])
    conn = apsw.Connection(str(a / "tokens.db"))
    conn.execute("DROP TABLE binding")  # as an older Quill left it
    conn.close()
    assert store.verify(secret) is not None
    store.bind()
    moved = tmp_path / "moved"
    subprocess.run(["cp", "-a", str(a), str(moved)], check=True)
    try:
        TokenStore(moved / "tokens.db").verify(secret)
        raise AssertionError("the copy of a bound file accepted its token")
    except TokensCopiedError:
        pass

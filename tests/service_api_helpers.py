"""Shared by the HTTP API tests (tests/test_service_api_*.py): the message they append, the
module-scoped `svc` fixture (one data dir and one `quill serve` with small limits and a token
per scope) and `_shaped`, the check every error response of the API must pass."""

from __future__ import annotations

import json

import httpx
import pytest
from conftest import QuillCLI
from service_helpers import served

from quill.ops.service.tokens import TokenStore

MSG = {"role": "user", "content": "hello from http"}


@pytest.fixture(scope="module")
def svc(tmp_path_factory):
    """One data dir and one `quill serve` on 0.0.0.0 (default anonymous policy: loopback)
    for the module: small body/batch limits, a token per scope and a revoked one."""
    home = tmp_path_factory.mktemp("svc") / "quill home"
    home.mkdir()
    (home / "config.toml").write_text("[http]\nmax_body_bytes = 20000\nmax_batch_messages = 10\n")
    q = QuillCLI(home)
    store = TokenStore(home / "tokens.db")  # the CLI path is covered by the token test
    toks = {s: store.create(s, [s])[0] for s in ("read", "write", "admin")}
    revoked, row = store.create("gone", ["admin"])
    store.revoke(row["id"])
    with served(q, host="0.0.0.0") as base:
        yield {"quill": q, "home": home, "base": base, "tokens": toks, "revoked": revoked}


def _shaped(resp: httpx.Response, status: int, reason: str | None = None) -> dict:
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert err["status"] == status and isinstance(err["detail"], str) and err["detail"]
    # one rendering for every error, the middleware's 413 included
    assert (
        resp.content == json.dumps(resp.json(), separators=(",", ":"), ensure_ascii=False).encode()
    )
    if reason:
        assert err["reason"] == reason, err
    return err

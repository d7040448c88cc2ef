"""Session ids on every way in follow one rule (store.op_common.session_id_problem): ids with
`/`, `%` or inner spaces are reachable over HTTP; ids with control characters or edge
whitespace are refused alike by `quill push`, the client and the HTTP API. And /api/docs
loads nothing from outside the service."""

from __future__ import annotations

import json
import re
from urllib.parse import quote

import httpx
import pytest
from conftest import QuillCLI
from service_helpers import served

import quill as pkg

ODD_BUT_VALID = ["a/b", "team/x/y", "100%", "two words", "ünï/cödé"]
INVALID = [" lead", "trail ", "a\x01b", "tab\there", "nl\n", "del\x7f", ""]


@pytest.fixture(scope="module")
def svc(tmp_path_factory):
    home = tmp_path_factory.mktemp("ids") / "home"
    home.mkdir()
    q = QuillCLI(home)
    with served(q) as base:
        yield q, base


def test_odd_but_valid_ids_are_reachable_over_http(svc):
    q, base = svc
    for sid in ODD_BUT_VALID:
        r = httpx.post(
            f"{base}/api/v1/sessions/{quote(sid, safe='')}/messages",
            json={"messages": [{"role": "user", "content": f"hi {sid}"}]},
        )
        assert r.status_code == 202, (sid, r.text)
    q.run("run", "--until-idle", "--timeout", "60")
    for sid in ODD_BUT_VALID:
        for enc in {quote(sid, safe=""), quote(sid, safe="/")}:
            got = httpx.get(f"{base}/api/v1/sessions/{enc}")
            assert got.status_code == 200 and got.json()["session"]["id"] == sid, (sid, got.text)
            msgs = httpx.get(f"{base}/api/v1/sessions/{enc}/messages").json()["messages"]
            assert [m["content"] for m in msgs] == [f"hi {sid}"]
            assert httpx.get(f"{base}/api/v1/sessions/{enc}/resume").status_code == 200
        assert httpx.get(f"{base}/sessions/{quote(sid, safe='/')}").status_code in (
            200,
            303,
        )  # dashboard (login)


@pytest.mark.parametrize("sid", INVALID, ids=repr)
def test_invalid_ids_are_refused_the_same_way_everywhere(svc, tmp_path, sid):
    q, base = svc
    if sid:  # an empty segment is another route (a newline reaches the route: the sid convertor)
        r = httpx.post(
            f"{base}/api/v1/sessions/{quote(sid, safe='')}/messages",
            json={"messages": [{"role": "user", "content": "x"}]},
        )
        assert r.status_code == 422 and r.json()["error"]["reason"] == "invalid-session-id", r.text
    r = httpx.post(
        f"{base}/api/v1/ops", json={"ops": [{"op": "session.create", "data": {"session_id": sid}}]}
    )
    assert r.status_code == 422 and r.json()["error"]["reason"] == "invalid-session-id", r.text
    proc = q.run(
        "push",
        "--json",
        check=False,
        input=json.dumps({"op": "session.create", "data": {"session_id": sid}}),
    )
    assert (
        proc.returncode == 2 and "invalid-session-id" in json.loads(proc.stdout)["error"]["message"]
    )
    with pytest.raises(pkg.InvalidInputError) as err:
        pkg.Client(tmp_path).append(sid, [{"role": "user", "content": "x"}])
    assert err.value.reason == "invalid-session-id"


def test_api_docs_load_nothing_from_outside(svc):
    _, base = svc
    page = httpx.get(f"{base}/api/docs")
    assert page.status_code == 200
    refs = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert refs and all(r.startswith("/") for r in refs), refs
    assert "cdn" not in page.text.lower() and "url: '/api/docs/openapi.json'" in page.text
    for ref in refs:
        assert httpx.get(base + ref).status_code == 200, ref

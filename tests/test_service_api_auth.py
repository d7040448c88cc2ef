"""Who may call the HTTP API of a real `quill serve` process: the auth matrix (every route ×
scope, its route list checked against the served OpenAPI document, which must equal the
checked-in one), the anonymous policy (loopback only by default; none for a web page rebound
to loopback), the dashboard's sign-in redirect, and tokens stored hashed, revocable and never
written to logs."""

from __future__ import annotations

import json
import os
import re
import stat

import httpx
from conftest import REPO
from service_api_helpers import MSG, _shaped, svc  # noqa: F401 (svc: a fixture, used by name)
from service_helpers import bearer, served, token

#: Every API route and the scope it needs (None: public). The matrix test checks this list
#: equals the served OpenAPI document's routes, so a new route cannot skip the matrix.
ROUTES = {
    ("POST", "/api/v1/ops"): "write",
    ("POST", "/api/v1/sessions/{session_id}/messages"): "write",
    ("GET", "/api/v1/sessions"): "read",
    ("GET", "/api/v1/sessions/{session_id}"): "read",
    ("GET", "/api/v1/sessions/{session_id}/messages"): "read",
    ("GET", "/api/v1/sessions/{session_id}/resume"): "read",
    ("GET", "/api/v1/resume"): "read",
    ("GET", "/api/v1/search"): "read",
    ("GET", "/api/v1/usage"): "read",
    ("GET", "/api/v1/status"): "read",
    ("GET", "/api/v1/jobs"): "read",
    ("GET", "/api/v1/jobs/history"): "read",
    ("POST", "/api/v1/jobs/{name}/run"): "admin",
    ("GET", "/metrics"): "read",
    ("GET", "/healthz"): None,
    ("POST", "/v1/traces"): "write",
}
BODIES = {
    "/api/v1/ops": {
        "ops": [{"op": "messages.append", "data": {"session_id": "m", "messages": [MSG]}}]
    },
    "/api/v1/sessions/{session_id}/messages": {"messages": [MSG]},
    "/v1/traces": {},  # an empty OTLP JSON export
}
PARAMS = {"/api/v1/search": {"q": "hello"}, "/api/v1/resume": {"key": "k1"}}


def _call(
    client: httpx.Client, base: str, method: str, route: str, headers: dict[str, str]
) -> httpx.Response:
    path = route.replace("{session_id}", "m").replace("{name}", "wal_checkpoint")
    return client.request(
        method, base + path, json=BODIES.get(route), params=PARAMS.get(route), headers=headers
    )


def test_auth_matrix_every_route_by_every_scope(svc):
    base, tokens = svc["base"], svc["tokens"]
    remote = _non_loopback_address()
    spec = httpx.get(f"{base}/openapi.json").json()
    served_routes = {(m.upper(), p) for p, ops in spec["paths"].items() for m in ops}
    assert served_routes == set(ROUTES)
    with httpx.Client(timeout=30) as client:
        for (method, route), need in ROUTES.items():
            for scope, tok in tokens.items():
                r = _call(client, base, method, route, bearer(tok))
                if need is None or scope in (need, "admin"):
                    assert r.status_code in (200, 202, 404), (method, route, scope, r.text)
                else:
                    _shaped(r, 403, "forbidden")
            for bad in (
                f"Bearer {svc['revoked']}",
                "Bearer quill_00000000_nope",
                "Bearer garbage",
                "Basic YTpi",
            ):
                r = _call(client, base, method, route, {"Authorization": bad})
                if need is None:
                    assert r.status_code == 200
                else:  # a presented bad token never falls back to anonymous
                    _shaped(r, 401, "unauthorized")
                    assert "WWW-Authenticate" in r.headers
            # Anonymous on loopback: read and write, never admin.
            r = _call(client, base, method, route, {})
            if need == "admin":
                _shaped(r, 403, "forbidden")
            else:
                assert r.status_code in (200, 202, 404), (method, route, r.text)
            # Anonymous from another address: refused (unless --anonymous any).
            if remote and need is not None:
                _shaped(
                    _call(client, base.replace("127.0.0.1", remote), method, route, {}),
                    401,
                    "unauthorized",
                )
    if remote:
        url = base.replace("127.0.0.1", remote)
        assert (
            httpx.get(f"{url}/api/v1/sessions", headers=bearer(tokens["read"])).status_code == 200
        )
    # OpenAPI document: served and checked in, identical.
    checked_in = json.loads((REPO / "docs" / "openapi.json").read_text())
    assert checked_in == spec, (
        "docs/openapi.json is stale: run `python -m quill.ops.service.openapi > docs/openapi.json`"
    )


def test_dashboard_sends_unauthenticated_browsers_to_sign_in(quill, home):
    with served(quill, "--anonymous", "none") as base:
        r = httpx.get(f"{base}/sessions", follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"].startswith("/login")
        _shaped(httpx.get(f"{base}/api/v1/sessions"), 401, "unauthorized")
        remote = _non_loopback_address()
    if remote is None:
        return
    with served(quill, "--anonymous", "any", host="0.0.0.0") as base:
        assert httpx.get(f"{base.replace('127.0.0.1', remote)}/api/v1/sessions").status_code == 200


def _non_loopback_address() -> str | None:
    import socket

    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))  # no packet is sent: this only picks the outgoing address
            addr = s.getsockname()[0]
    except OSError:
        return None
    return None if addr.startswith("127.") else addr


def test_tokens_stored_hashed_revocable_and_never_logged(svc):
    quill, home, base = svc["quill"], svc["home"], svc["base"]
    created = quill.json("token", "create", "ci", "--scope", "write")
    secret = created["token"]
    assert re.fullmatch(r"quill_[0-9a-f]{8}_[A-Za-z0-9-]{40,}", secret)
    db = home / "tokens.db"
    assert secret.split("_", 2)[2].encode() not in db.read_bytes()
    assert stat.S_IMODE(os.stat(db).st_mode) == 0o600
    listed = {t["id"]: t for t in quill.json("token", "list")["tokens"]}
    assert created["id"] in listed and "token" not in listed[created["id"]]
    h = bearer(secret)
    assert (
        httpx.post(
            f"{base}/api/v1/sessions/a/messages", json={"messages": [MSG]}, headers=h
        ).status_code
        == 202
    )
    # A token pasted into a query string or a path must not reach the log either.
    httpx.get(f"{base}/api/v1/sessions/{secret}", params={"token": secret}, headers=h)
    httpx.get(f"{base}/api/v1/search", params={"q": secret}, headers=h)
    dup = quill.run(
        "token", "create", "ci", "--scope", "read", check=False
    )  # names tell tokens apart
    assert dup.returncode == 2 and created["id"] in dup.stderr
    quill.run("token", "revoke", created["id"])
    _shaped(
        httpx.post(f"{base}/api/v1/sessions/a/messages", json={"messages": [MSG]}, headers=h), 401
    )
    reused = quill.json(
        "token", "create", "ci", "--scope", "read"
    )  # a revoked token's name is free again
    quill.run("token", "revoke", reused["id"])
    assert quill.run("token", "revoke", "ffffffff", check=False).returncode == 3
    log = (home / "logs" / "http.log").read_text()
    assert '"http.request"' in log and created["id"] in log
    assert secret not in log and secret.split("_", 2)[2] not in log
    assert str(home) not in log


def test_a_web_page_rebound_to_loopback_gets_no_anonymous_access(quill, home):
    """DNS rebinding: a page of another site whose name resolves to 127.0.0.1
    is same-origin with the service and its requests come from the loopback address, but its
    Host and Origin name that site. Anonymous access needs both to name a loopback host; a
    token holder is not affected; nothing the refused page sent is appended."""
    quill.run("push", "--session", "s1", input='{"role": "user", "content": "the config secret"}\n')
    delete = {
        "ops": [
            {
                "op": "sessions.delete",
                "data": {"session_ids": ["s1"], "reason": "x", "actor": "page"},
            }
        ]
    }
    with served(quill) as base:
        port = base.rsplit(":", 1)[1]
        evil = {"Host": f"evil.example:{port}", "Origin": f"http://evil.example:{port}"}
        for headers in (
            evil,
            {"Host": f"evil.example:{port}"},
            {"Origin": f"http://evil.example:{port}"},
            {"Origin": "null"},
            {"Host": "127.0.0.1.evil.example"},
        ):
            _shaped(
                httpx.get(f"{base}/api/v1/search", params={"q": "config"}, headers=headers),
                401,
                "unauthorized",
            )
            _shaped(
                httpx.post(f"{base}/api/v1/ops", json=delete, headers=headers), 401, "unauthorized"
            )
        for headers in (
            {},
            {"Host": f"localhost:{port}", "Origin": f"http://localhost:{port}"},
            {"Host": f"[::1]:{port}"},
            {"Origin": f"http://127.0.0.1:{port}"},
        ):
            assert (
                httpx.get(
                    f"{base}/api/v1/search", params={"q": "config"}, headers=headers
                ).status_code
                == 200
            )
        tok = token(quill, "read")
        r = httpx.get(
            f"{base}/api/v1/search", params={"q": "config"}, headers={**evil, **bearer(tok)}
        )
        assert (
            r.status_code == 200
        )  # a token is the caller's own credential, whatever the page's name
    quill.drain()
    assert quill.json("sessions", "show", "s1")["session"]["id"] == "s1"


#: A client run as another OS user (``runuser``): the system Python, which every account may
#: execute (the project's venv lives under /root). Prints the status code of one request.
_OTHER_USER_GET = (
    "import sys, urllib.request, urllib.error\n"
    "try:\n"
    "    print(urllib.request.urlopen(sys.argv[1], timeout=20).status)\n"
    "except urllib.error.HTTPError as e:\n"
    "    print(e.code)\n"
)


def _as_user(user: str, url: str) -> int:
    import subprocess

    out = subprocess.run(
        ["runuser", "-u", user, "--", "/usr/bin/python3", "-c", _OTHER_USER_GET, url],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return int(out.stdout.strip())


def test_anonymous_access_is_only_for_the_user_the_service_runs_as(quill, home):
    """Another local account reaches 127.0.0.1 too: it gets no anonymous access (the data dir
    is the owner's, 0700); the owner's own clients do; a token works for anyone."""
    import pwd

    if os.geteuid() != 0:
        import pytest

        pytest.skip("needs root to run a client as a second OS user (runuser)")
    pwd.getpwnam("nobody")
    quill.run("push", "--session", "s1", input='{"role": "user", "content": "a secret"}\n')
    with served(quill) as base:
        url = f"{base}/api/v1/sessions"
        assert _as_user("nobody", url) == 401
        assert _as_user("root", url) == 200 and httpx.get(url).status_code == 200
        secret = token(quill, "read")
        h = bearer(secret)
        assert httpx.get(url, headers=h).status_code == 200
        # over IPv6 loopback as well
        assert _as_user("nobody", f"{base}/healthz") == 200  # public: no data
        assert _as_user("nobody", f"{base}/api/v1/search?q=secret") == 401


def test_a_cookie_signed_state_change_from_another_origin_is_refused(quill, home):
    """SameSite=Strict does not separate ports of one host: a page on another local port
    POSTs with the admin's cookie. A cookie-authenticated state change must be same-origin;
    the job is not queued. The dashboard's own form (its Origin) still works."""
    admin = token(quill, "admin")
    with served(quill, "--anonymous", "none") as base:
        cookies = {"quill_token": admin}
        history = f"{base}/api/v1/jobs/history"
        before = httpx.get(history, headers=bearer(admin)).json()
        for headers in (
            {"Origin": "http://127.0.0.1:18769"},
            {"Referer": "http://127.0.0.1:18769/attack.html"},
            {"Origin": "null"},
            {},
        ):
            r = httpx.post(
                f"{base}/jobs/wal_checkpoint/run",
                cookies=cookies,
                headers=headers,
                follow_redirects=False,
            )
            assert r.status_code in (303, 403) and "queued=" not in r.headers.get("location", ""), (
                headers,
                r.status_code,
                r.headers,
            )
            r = httpx.post(
                f"{base}/api/v1/jobs/wal_checkpoint/run", cookies=cookies, headers=headers
            )
            _shaped(r, 403, "forbidden")
        r = httpx.post(
            f"{base}/login",
            data={"token": admin, "next": "/jobs"},
            headers={"Origin": "http://127.0.0.1:18769"},
            follow_redirects=False,
        )
        _shaped(r, 403, "forbidden")
        assert httpx.get(history, headers=bearer(admin)).json() == before
        own = httpx.post(
            f"{base}/jobs/wal_checkpoint/run",
            cookies=cookies,
            headers={"Origin": base},
            follow_redirects=False,
        )
        assert own.status_code == 303 and "queued=wal_checkpoint" in own.headers["location"]
        # a bearer token (API clients) needs no Origin
        api = httpx.post(f"{base}/api/v1/jobs/wal_checkpoint/run", headers=bearer(admin))
        assert api.status_code in (200, 202), api.text

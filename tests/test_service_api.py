"""The HTTP API against a real `quill serve` process, real spool and store: appends acked
after fsync and applied by a real fleet, precheck refusals with their reason codes, size
limits, the auth matrix (every route × scope), the anonymous policy, tokens stored hashed,
nothing secret in logs, the checked-in OpenAPI document, /metrics = `quill status --json`."""

from __future__ import annotations

import json
import os
import re
import stat

import httpx
import pytest
from conftest import REPO, QuillCLI
from service_helpers import bearer, served, token

from quill.ops.service.tokens import TokenStore
from quill.spool import Position
from quill.store.apply.precheck import precheck
from quill.store.errors import InvalidOpError

MSG = {"role": "user", "content": "hello from http"}

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
}
BODIES = {
    "/api/v1/ops": {
        "ops": [{"op": "messages.append", "data": {"session_id": "m", "messages": [MSG]}}]
    },
    "/api/v1/sessions/{session_id}/messages": {"messages": [MSG]},
}
PARAMS = {"/api/v1/search": {"q": "hello"}, "/api/v1/resume": {"key": "k1"}}


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


def _call(
    client: httpx.Client, base: str, method: str, route: str, headers: dict[str, str]
) -> httpx.Response:
    path = route.replace("{session_id}", "m").replace("{name}", "wal_checkpoint")
    return client.request(
        method, base + path, json=BODIES.get(route), params=PARAMS.get(route), headers=headers
    )


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


def test_append_is_acked_durable_then_applied_by_the_fleet(quill, home):
    with served(quill) as base:
        r = httpx.post(
            f"{base}/api/v1/sessions/h1/messages",
            json={"messages": [MSG, {**MSG, "content": "two"}]},
        )
        assert r.status_code == 202, r.text
        ack = r.json()["acks"][0]
        pos = Position.parse(ack["position"])
        # The ack names a record that is already in the spool file at that offset.
        seg = sorted((home / "spool").glob("*.jsonl"))[pos.segment - 1]
        line = seg.read_bytes()[pos.offset :].split(b"\n", 1)[0]
        assert ack["batch"].encode() in line
        again = httpx.post(
            f"{base}/api/v1/ops",
            json={
                "ops": [
                    {
                        "op": "messages.append",
                        "data": {"session_id": "h1", "messages": [{**MSG, "content": "three"}]},
                        "batch": "retry-1",
                    }
                ]
                * 2
            },
        )
        assert (
            again.status_code == 202
            and [a["batch"] for a in again.json()["acks"]] == ["retry-1"] * 2
        )
        keyed = httpx.post(
            f"{base}/api/v1/ops",
            json={
                "ops": [
                    {"op": "session.create", "data": {"session_id": "k-1", "key": "chat-42"}},
                    {
                        "op": "messages.append",
                        "data": {"session_id": "k-1", "messages": [{**MSG, "content": "keyed"}]},
                    },
                ]
            },
        )
        assert keyed.status_code == 202
        assert quill.run("run", "--until-idle", "--timeout", "120").returncode == 0
        got = httpx.get(f"{base}/api/v1/sessions/h1/messages").json()
        assert [m["content"] for m in got["messages"]] == ["hello from http", "two", "three"]
        by_key = httpx.get(f"{base}/api/v1/resume", params={"key": "chat-42"}).json()
        assert by_key["session_id"] == "k-1" and [m["content"] for m in by_key["messages"]] == [
            "keyed"
        ]
        _shaped(httpx.get(f"{base}/api/v1/resume", params={"key": "nope"}), 404, "not-found")
        _shaped(httpx.get(f"{base}/api/v1/resume"), 422, "invalid-request")
        resumed = httpx.get(f"{base}/api/v1/sessions/h1/resume").json()
        assert [m["content"] for m in resumed["messages"]] == ["hello from http", "two", "three"]
        hits = httpx.get(f"{base}/api/v1/search", params={"q": "three"}).json()["hits"]
        assert [h["session_id"] for h in hits] == ["h1"]
        ranked = httpx.get(
            f"{base}/api/v1/search",
            params={"q": "two OR three", "order": "relevance", "kind": "text", "context": "true"},
        )
        assert ranked.status_code == 200, ranked.text
        assert sorted(h["snippet"] for h in ranked.json()["hits"]) == ["three", "two"]
        assert all("before" in h and "after" in h for h in ranked.json()["hits"])
        _shaped(httpx.get(f"{base}/api/v1/search", params={"q": "two", "order": "oldest"}), 422)
        _shaped(httpx.get(f"{base}/api/v1/search", params={"q": "two", "kind": "images"}), 422)
        _shaped(httpx.get(f"{base}/api/v1/sessions/nope"), 404, "not-found")
        text = httpx.get(f"{base}/metrics").text
    # /metrics exports exactly the figures of `quill status --json` (one function computes both).
    status = quill.status()["metrics"]
    values = {
        m.group(1): float(m.group(2))
        for m in re.finditer(r"^(quill_\w+(?:\{[^}]*\})?) (\S+)$", text, re.M)
    }
    assert values["quill_rows_applied_total"] == status["rows_applied_total"] == 4
    assert values["quill_ops_applied_total"] == status["ops_applied_total"] == 4
    assert values["quill_ops_duplicate_total"] == status["ops_duplicate_total"] == 1
    assert (
        values["quill_chunk_commit_seconds_count"] == status["chunk_commit_seconds"]["count"] >= 1
    )
    assert values["quill_spool_pending_bytes"] == status["spool_pending_bytes"] == 0
    assert values["quill_writer_halted"] == status["writer_halted"] == 0
    assert values["quill_disk_free_bytes"] > 0 and status["disk_free_bytes"] > 0
    assert (
        values['quill_worker_restarts_total{role="writer"}']
        == status["worker_restarts"]["writer"]
        == 0
    )
    for name in (
        "quill_fts_pending_rows",
        "quill_quarantined_records",
        "quill_spool_lag_seconds",
        "quill_jobs_overdue",
    ):
        assert values[name] == status[name.removeprefix("quill_")]


REFUSED = [
    ("messages.append", {"session_id": "x", "messages": [{"role": "wizard", "content": "hi"}]}),
    ("messages.append", {"session_id": "x", "messages": "not a list"}),
    ("messages.append", {"messages": [MSG]}),
    ("no.such.op", {"session_id": "x"}),
    (
        "session.create",
        {"session_id": "x", "started_at": 10**400},
    ),  # a REAL column holds up to ~1.8e308
]


def test_refused_ops_carry_the_precheck_reason_and_append_nothing(svc):
    base, home = svc["base"], svc["home"]
    good = {"op": "messages.append", "data": {"session_id": "ok", "messages": [MSG]}}
    for op, data in REFUSED:
        with pytest.raises(InvalidOpError) as expected:
            precheck(op, data)
        before = sum(p.stat().st_size for p in (home / "spool").glob("*.jsonl"))
        r = httpx.post(f"{base}/api/v1/ops", json={"ops": [good, {"op": op, "data": data}]})
        err = _shaped(r, 422, expected.value.reason)
        assert err["op_index"] == 1
        assert sum(p.stat().st_size for p in (home / "spool").glob("*.jsonl")) == before


def test_body_and_batch_limits_and_bad_json(svc):
    base, home = svc["base"], svc["home"]
    if True:
        big = {"messages": [{"role": "user", "content": "x" * 30000}]}
        _shaped(httpx.post(f"{base}/api/v1/sessions/s/messages", json=big), 413, "body-too-large")
        many = {"messages": [MSG] * 11}
        _shaped(httpx.post(f"{base}/api/v1/sessions/s/messages", json=many), 413, "batch-too-large")
        _shaped(
            httpx.post(
                f"{base}/api/v1/ops",
                content=b'{"ops": [',
                headers={"content-type": "application/json"},
            ),
            422,
            "invalid-json",
        )
        _shaped(httpx.post(f"{base}/api/v1/ops", json={"ops": []}), 422, "invalid-request")
        # Streamed without a Content-Length: the limit still holds.
        chunks = (b"x" * 5000 for _ in range(10))
        _shaped(
            httpx.post(
                f"{base}/api/v1/ops", content=chunks, headers={"content-type": "application/json"}
            ),
            413,
            "body-too-large",
        )
        assert (
            httpx.post(
                f"{base}/api/v1/sessions/s/messages", json={"messages": [MSG] * 10}
            ).status_code
            == 202
        )
    assert not list((home / "spool").glob("quarantine/*"))


def test_job_run_refuses_internal_jobs_and_the_other_store_kind(svc):
    base, admin = svc["base"], {"Authorization": f"Bearer {svc['tokens']['admin']}"}
    # pg_analyze on this SQLite data dir used to be queued and fail with an AttributeError.
    err = _shaped(
        httpx.post(f"{base}/api/v1/jobs/pg_analyze/run", headers=admin), 409, "wrong-store"
    )
    assert "PostgreSQL" in err["detail"]
    # Internal jobs take arguments only Quill supplies: not offered over HTTP either.
    _shaped(httpx.post(f"{base}/api/v1/jobs/declare_corrupt/run", headers=admin), 404, "not-found")
    assert httpx.post(f"{base}/api/v1/jobs/wal_checkpoint/run", headers=admin).status_code == 202


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
    listed = {t["id"]: t for t in quill.json("token", "list")}
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


def test_fleet_runs_the_service_when_http_listen_is_set(quill, home):
    import time

    from conftest import stop_fleet
    from service_helpers import free_port

    home.mkdir(parents=True)
    port = free_port()
    (home / "config.toml").write_text(f'[http]\nlisten = "127.0.0.1:{port}"\n')
    fleet = quill.start_fleet()
    try:
        deadline, r = time.monotonic() + 60, None
        while time.monotonic() < deadline:
            try:
                r = httpx.post(
                    f"http://127.0.0.1:{port}/api/v1/sessions/f/messages", json={"messages": [MSG]}
                )
                break
            except httpx.TransportError:
                time.sleep(0.2)
        assert r is not None and r.status_code == 202
        applied = quill.json(
            "push",
            "--session",
            "f",
            "--wait",
            "60",
            input='{"role": "user", "content": "after http"}',
        )
        assert applied[0]["outcome"] == "applied"
        got = httpx.get(f"http://127.0.0.1:{port}/api/v1/sessions/f/messages").json()["messages"]
        assert [m["content"] for m in got] == ["hello from http", "after http"]
        st = quill.status()
        assert st["fleet"]["http"]["alive"] and st["fleet"]["http"]["listen"] == f"127.0.0.1:{port}"
        assert st["metrics"]["worker_restarts"]["http"] == 0
        assert f"serving http://127.0.0.1:{port}/" in quill.run("status").stdout
    finally:
        assert stop_fleet(fleet) == 0
    assert not _port_open(port)


def _port_open(port: int) -> bool:
    import socket

    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_serve_on_a_port_in_use_fails_clearly_before_saying_it_serves(quill, home):
    """Was: "quill: serving http://…" (or a --json success object), then exit 3 with nothing
    on stderr; the EADDRINUSE was only in logs/http.log."""
    import socket

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        for extra in ((), ("--json",)):
            proc = quill.run(
                "serve", "--listen", f"127.0.0.1:{port}", *extra, check=False, timeout=60
            )
            assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
            assert "serving" not in proc.stderr and '"url"' not in proc.stdout
            said = json.loads(proc.stdout)["error"]["message"] if extra else proc.stderr
            assert f"cannot listen on 127.0.0.1:{port}" in said and "in use" in said


def test_an_empty_search_query_is_an_empty_result_as_in_the_cli(svc):
    headers = {"Authorization": f"Bearer {svc['tokens']['read']}"}
    for q in ("", "   "):
        r = httpx.get(f"{svc['base']}/api/v1/search", params={"q": q}, headers=headers)
        assert r.status_code == 200 and r.json()["hits"] == [], r.text


#: Bodies whose nested fields have the wrong JSON type, or JSON's non-standard literals.
WRONG_TYPED = [
    {
        "ops": [
            {
                "op": "messages.append",
                "data": {"session_id": "w", "messages": [{"role": {"a": 1}, "content": "x"}]},
            }
        ]
    },
    {
        "ops": [
            {
                "op": "messages.append",
                "data": {
                    "session_id": "w",
                    "messages": [
                        {
                            "role": "assistant",
                            "content": [{"type": ["text"], "text": None}],
                            "usage": "lots",
                        }
                    ],
                },
            }
        ]
    },
    {
        "ops": [
            {"op": "usage.record", "data": {"session_id": "w", "usage": {"input_tokens": {"n": 1}}}}
        ]
    },
    {
        "ops": [
            {"op": "session.create", "data": {"session_id": "w", "tools": {"a": 1}, "owner": [1]}}
        ]
    },
    {"ops": [{"op": "sessions.delete", "data": {"session_ids": [{"x": 1}], "only_if": [1]}}]},
    {
        "ops": [
            {
                "op": "messages.restore",
                "data": {"session_id": "w", "offset": 0, "rows": [{"state": {}}]},
            }
        ]
    },
    {"ops": [{"op": "usage.reprice", "data": {"price_version": 1, "rows": [["x", {}, None]]}}]},
    {"ops": [{"op": "session.end", "data": {"session_id": ["w"]}}]},
]
#: Raw bodies: Python's JSON reader takes NaN/Infinity, which the spool cannot hold.
WRONG_RAW = [
    b'{"ops": [{"op": "messages.append", "data": {"session_id": "w", "messages": '
    b'[{"role": "user", "content": "x", "timestamp": NaN}]}}]}',
    b'{"ops": [{"op": "session.create", "data": {"session_id": "w", "meta": {"x": Infinity}}}]}',
    b'{"messages": [{"role": "user", "content": "x", "k": -Infinity}]}',
]


def test_wrong_typed_nested_fields_are_4xx_not_5xx(svc):
    base, home = svc["base"], svc["home"]
    before = sum(p.stat().st_size for p in (home / "spool").glob("*.jsonl"))
    for body in WRONG_TYPED:
        r = httpx.post(f"{base}/api/v1/ops", json=body)
        assert r.status_code == 422, (body, r.status_code, r.text)
        _shaped(r, 422)
    for raw in WRONG_RAW:
        route = "/api/v1/ops" if raw.startswith(b'{"ops"') else "/api/v1/sessions/w/messages"
        r = httpx.post(f"{base}{route}", content=raw, headers={"content-type": "application/json"})
        assert r.status_code == 422, (raw, r.status_code, r.text)
        _shaped(r, 422)
    assert sum(p.stat().st_size for p in (home / "spool").glob("*.jsonl")) == before


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

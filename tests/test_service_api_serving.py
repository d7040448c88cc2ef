"""Running the HTTP service: the fleet serves it when `[http] listen` is set (and stops it),
`quill serve` on a port in use fails clearly, and two endpoint edge cases of a real `quill
serve`: job runs refused for internal jobs and for the other store kind, and an empty search
query answered with no hits, as in the CLI."""

from __future__ import annotations

import json

import httpx
from service_api_helpers import MSG, _shaped, svc  # noqa: F401 (svc: a fixture, used by name)


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

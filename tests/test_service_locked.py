"""The HTTP service's own SQLite files locked by another process (a ``sqlite3`` shell, a
``quill token`` command, a backup in a transaction past the busy timeout): ``quill serve``
starts anyway, a request whose token cannot be checked now is answered 503 with
``Retry-After`` (never a 500), and an OTLP export whose delegate links cannot be written is
answered 503 with ``Retry-After`` (an exporter retries that; a 500 it drops) and stored when
retried. Real ``quill serve`` process, real lock holder process, real OTLP spans."""

from __future__ import annotations

import json

import httpx
from conftest import QuillCLI
from otlp_helpers import post_json, run_agent
from service_helpers import served
from test_schedule_locked import held_lock

from quill.home import OTLP_LINKS_DB
from quill.ops.cli import cli
from quill.ops.cli.base import run
from quill.ops.client.client import Client
from quill.ops.service.tokens import TokenStore


def test_the_service_starts_and_answers_503_while_tokens_db_is_locked(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    token = TokenStore(home / "tokens.db").create("w", ["read", "write"])[0]
    auth = {"Authorization": f"Bearer {token}"}
    lock = held_lock(home / "tokens.db", "python")
    lock.__enter__()  # held as the server starts (it binds tokens.db then) and after
    try:
        with served(QuillCLI(home)) as base:
            answer = httpx.get(f"{base}/api/v1/status", headers=auth, timeout=60)
            assert answer.status_code == 503, answer.text
            assert answer.json()["error"]["reason"] == "tokens-unavailable", answer.text
            assert int(answer.headers["Retry-After"]) >= 1
            lock.__exit__(None, None, None)
            lock = None
            answer = httpx.get(f"{base}/api/v1/status", headers=auth, timeout=60)
            assert answer.status_code == 200, answer.text
    finally:
        if lock is not None:
            lock.__exit__(None, None, None)


def test_an_otlp_export_meeting_locked_links_is_retryable_and_stored_on_retry(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    token = TokenStore(home / "tokens.db").create("w", ["read", "write"])[0]
    quill = QuillCLI(home)
    _history, spans = run_agent(["please delegate this"])
    with served(quill) as base:
        assert (
            httpx.get(
                f"{base}/api/v1/status", timeout=60, headers={"Authorization": f"Bearer {token}"}
            ).status_code
            == 200
        )
        with held_lock(home / OTLP_LINKS_DB, "python"):
            answer = post_json(base, token, spans)
            assert answer.status_code == 503, answer.text  # OTLP: retryable
            assert int(answer.headers["Retry-After"]) >= 1
        answer = post_json(base, token, spans)  # the exporter's retry
        assert answer.status_code == 200, answer.text
    quill.drain()
    sessions = Client(home=str(home)).sessions()
    assert any(s["id"].startswith("otlp:") for s in sessions), sessions


def test_token_commands_say_tokens_db_is_locked(tmp_path, capsys):
    home = tmp_path / "home"
    home.mkdir()
    TokenStore(home / "tokens.db").create("w", ["read"])
    commands = [
        ["token", "create", "x", "--scope", "read"],
        ["token", "list"],
        ["token", "revoke", "deadbeef"],
        ["token", "rebind"],
    ]
    with held_lock(home / "tokens.db", "python"):
        for argv in commands:
            code = run(cli, ["--home", str(home), *argv, "--json"])
            out = capsys.readouterr()
            assert code != 0 and "Traceback" not in out.err + out.out, (argv, out)
            error = json.loads(out.out)["error"]
            assert error["kind"] == "busy" and "tokens.db" in error["message"], (argv, error)

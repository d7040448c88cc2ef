"""One record-size limit (``[spool] max_record_bytes``), refused before the ack by every producer.

A record the writer would refuse for its size must never be acknowledged: ``quill.Client``,
``quill push`` and the HTTP API each refuse it with Quill's error format (``InvalidInputError``
reason ``record-too-large``, exit code 2; HTTP ``413 record-too-large``) and append nothing —
in a multi-op request, none of the ops. The limit is read from ``config.toml``.
"""

from __future__ import annotations

import json

import httpx
import pytest
from service_helpers import served

from quill.home import DEFAULTS, ConfigError, load
from quill.ops.client.client import Client
from quill.ops.client.errors import Exit, InvalidInputError
from quill.spool.segments import list_segments

LIMIT = 64 * 1024


def _home(home):
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(
        f"[spool]\nmax_record_bytes = {LIMIT}\n[http]\nmax_body_bytes = {4 * LIMIT}\n"
    )
    return home


def _msg(size: int) -> dict:
    return {"role": "user", "content": "x" * size}


def _spool_bytes(home) -> int:
    spool = home / "spool"
    return sum((spool / f"{n:08d}.jsonl").stat().st_size for n in list_segments(spool))


def test_the_limit_is_one_setting_with_a_bounded_range(tmp_path):
    assert DEFAULTS.max_record_bytes == 64 * 1024 * 1024
    assert load(_home(tmp_path / "h")).max_record_bytes == LIMIT
    (tmp_path / "h" / "config.toml").write_text("[spool]\nmax_record_bytes = 2000000000\n")
    with pytest.raises(ConfigError, match="max_record_bytes"):
        load(tmp_path / "h")


def test_client_refuses_a_record_over_the_limit_before_appending(home):
    client = Client(_home(home))
    client.append("s", [_msg(1000)])
    before = _spool_bytes(home)
    with pytest.raises(InvalidInputError) as info:
        client.append("s", [_msg(LIMIT)])
    assert info.value.reason == "record-too-large" and info.value.exit_code == Exit.USAGE
    assert "max_record_bytes" in info.value.message
    assert _spool_bytes(home) == before  # nothing appended, so nothing acknowledged
    client.append("s", [_msg(1000)])  # the handle still works


def test_cli_push_refuses_a_record_over_the_limit(quill, home):
    _home(home)
    proc = quill.run("push", "--session", "s", input=json.dumps(_msg(LIMIT)), check=False)
    assert proc.returncode == Exit.USAGE, proc.stderr
    assert proc.stderr.startswith("quill: error: ") and "max_record_bytes" in proc.stderr
    err = json.loads(
        quill.run(
            "push", "--session", "s", "--json", input=json.dumps(_msg(LIMIT)), check=False
        ).stdout
    )["error"]
    assert err["kind"] == "usage" and err["exit_code"] == Exit.USAGE
    # A batch whose second record is too large appends neither.
    ops = [
        {"op": "session.create", "data": {"session_id": "t"}},
        {"op": "messages.append", "data": {"session_id": "t", "messages": [_msg(LIMIT)]}},
    ]
    proc = quill.run("push", input=json.dumps(ops), check=False)
    assert proc.returncode == Exit.USAGE, proc.stderr
    assert _spool_bytes(home) == 0


def test_http_refuses_a_record_over_the_limit_with_413(quill, home):
    _home(home)
    with served(quill) as base:
        resp = httpx.post(
            f"{base}/api/v1/sessions/s/messages", json={"messages": [_msg(LIMIT)]}, timeout=30
        )
        assert resp.status_code == 413, resp.text
        assert resp.json()["error"]["reason"] == "record-too-large"
        ops = {
            "ops": [
                {"op": "session.create", "data": {"session_id": "t"}},
                {"op": "messages.append", "data": {"session_id": "t", "messages": [_msg(LIMIT)]}},
            ]
        }
        resp = httpx.post(f"{base}/api/v1/ops", json=ops, timeout=30)
        assert resp.status_code == 413, resp.text
        assert resp.json()["error"]["op_index"] == 1
        assert _spool_bytes(home) == 0  # neither op appended
        ok = httpx.post(
            f"{base}/api/v1/sessions/s/messages", json={"messages": [_msg(1000)]}, timeout=30
        )
        assert ok.status_code == 202, ok.text


def test_the_default_limit_refuses_what_main_acknowledged(home):
    """No config: a message past the default 64 MiB is refused, not acknowledged and left for
    the writer to choke on."""
    home.mkdir(parents=True)
    client = Client(home)
    with pytest.raises(InvalidInputError) as info:
        client.append("s", [_msg(64 * 1024 * 1024)])  # the default limit
    assert info.value.reason == "record-too-large"
    assert list_segments(home / "spool") == [] or _spool_bytes(home) == 0

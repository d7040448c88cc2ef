"""``quill usage`` and ``GET /api/v1/usage`` page like every listing (docs/operations.md,
"Pages"), in SQL on both backends: ``{"usage": [...], "next"}``, groups ordered by their
values with NULL first, keyset on the group's values. A NULL group value (a call with no
model, no provider) travels in the cursor as JSON null, never as "" or 0, and no group is
repeated or skipped across pages, a NULL leading column included. Before, both returned
every group at once."""

from __future__ import annotations

import base64
import csv
import io
import json

import httpx
import pytest
from conftest import QuillCLI
from harness import Home
from service_helpers import served

from quill.ops.cli.base import run
from quill.ops.cli.root import cli

CALL = {"input_tokens": 100, "output_tokens": 10}
#: (session, model, source): None is no model / no source (no call names a provider).
CALLS = [
    ("s1", None, "cli"),
    ("s1", "m-a", "cli"),
    ("s2", "m-a", None),
    ("s2", "m-b", "cron"),
    ("s2", None, "cron"),
    ("s3", "m-c", "cli"),
    ("s3", "m-d", None),
]


@pytest.fixture
def home(tmp_path, backend):
    h = Home(tmp_path / "h", backend, watch={"enabled": False})
    for n, (sid, model, source) in enumerate(CALLS):
        data = {"session_id": sid, "usage": CALL, "ts": 1_760_000_000 + n, "task": "turn"}
        data.update({"model": model} if model is not None else {})
        data.update({"source": source} if source is not None else {})
        h.append("usage.record", data)
    h.drain()
    yield h
    h.close()


def _quill(capsys, home, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = run(cli, ["--home", str(home.root), *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def _walk(get) -> tuple[list[dict], list[str]]:
    rows, cursors, after = [], [], None
    while True:
        page, after = get(after)
        rows += page
        if after is None:
            return rows, cursors
        cursors.append(after)
        assert page and len(cursors) < 50


@pytest.mark.parametrize(
    "by", [["model"], ["source", "model"], ["provider", "model"]], ids=lambda b: "+".join(b)
)
def test_usage_pages_carry_null_groups_on_the_cli(capsys, home, by):
    argv = ["usage", *(a for b in by for a in ("--by", b))]
    code, out, err = _quill(capsys, home, *argv, "--json")
    assert code == 0, err
    whole = json.loads(out)
    assert whole["next"] is None
    keys = [tuple(r[b] for b in by) for r in whole["usage"]]
    # NULL first, on both backends (an empty model is stored as none: NULL)
    assert keys == sorted(keys, key=lambda k: [(v is not None, v or "") for v in k])
    assert len(set(keys)) == len(keys) > 3 and None in {k[-1] for k in keys}

    def get(after):
        more = ["--after", after] if after else []
        code, out, err = _quill(capsys, home, *argv, "--limit", "1", "--json", *more)
        assert code == 0, err
        doc = json.loads(out)
        return doc["usage"], doc["next"]

    rows, cursors = _walk(get)
    assert [tuple(r[b] for b in by) for r in rows] == keys  # none repeated, none skipped
    assert rows == whole["usage"]
    # a page ending on a NULL group (one group a page): its cursor holds JSON null
    decoded = [json.loads(base64.urlsafe_b64decode(c + "=" * (-len(c) % 4))) for c in cursors]
    assert any(None in d[2:] for d in decoded), decoded

    # the table and --csv name the next page on stderr
    code, out, err = _quill(capsys, home, *argv, "--limit", "1", "--csv")
    assert code == 0 and f"--after {cursors[0]} " in err
    assert len(list(csv.DictReader(io.StringIO(out)))) == 1
    code, out, err = _quill(capsys, home, *argv, "--limit", "1")
    assert code == 0 and f"--after {cursors[0]} " in err
    # another grouping's, filter's or listing's cursor is a usage error (exit 2)
    for other in (["usage", "--by", "task"], [*argv, "--model", "m-a"], ["sessions", "list"]):
        code, out, _ = _quill(capsys, home, *other, "--json", "--after", cursors[0])
        assert code == 2 and json.loads(out)["error"]["kind"] == "usage", other


def test_the_usage_endpoint_pages_with_next_and_its_headers(home):
    with served(QuillCLI(home.root)) as base:

        def get(after):
            params = {"by": ["model", "source"], "limit": 3, **({"after": after} if after else {})}
            r = httpx.get(f"{base}/api/v1/usage", params=params, timeout=60)
            assert r.status_code == 200, r.text
            assert r.headers.get("X-Next-Cursor") == r.json()["next"]
            return r.json()["usage"], r.json()["next"]

        rows, cursors = _walk(get)
        whole = httpx.get(f"{base}/api/v1/usage", params={"by": ["model", "source"]}).json()
        total = httpx.get(f"{base}/api/v1/usage").json()
        bad = httpx.get(f"{base}/api/v1/usage", params={"by": "day", "after": cursors[0]})
    assert whole["next"] is None and rows == whole["usage"] and len(cursors) >= 2
    assert total["next"] is None and total["usage"][0]["calls"] == len(CALLS)
    assert bad.status_code == 422 and bad.json()["error"]["reason"] == "bad-cursor", bad.text

"""Every listing pages one way, on both backends with real stores: sessions, search hits, a
session's messages and job runs, through the HTTP API (``next`` in the JSON, the same as the
``X-Next-Cursor`` header; ``?after=``) and the CLI (``next`` in ``--json``, ``--after``),
with rows written between pages (none repeated, none that was there skipped), and a cursor
of another listing, query, filter or session refused as ``bad-cursor`` (HTTP 422, exit 2)."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from conftest import QuillCLI
from harness import Home
from service_helpers import served

from quill.jobs import catalog
from quill.jobs.queues import build_for
from quill.ops.cli.base import run
from quill.ops.cli.root import cli

WORD = "kumquat"


@pytest.fixture
def seeded(tmp_path, backend):
    """A data dir on ``backend``: sessions s0..s5 (three matches each, s5 newest), session
    ``long`` (7 messages), 5 snapshot job runs."""
    home = Home(tmp_path / "h", backend, watch={"enabled": False})
    t = time.time() - 10_000
    for i in range(6):
        msgs = [
            {"role": "user", "content": f"{WORD} {i}.{n}", "timestamp": t + i * 10 + n}
            for n in range(3)
        ]
        home.append("messages.append", {"session_id": f"s{i}", "messages": msgs})
    home.append(
        "messages.append",
        {
            "session_id": "long",
            "messages": [
                {"role": "user", "content": f"line {n}", "timestamp": t - 100 + n} for n in range(7)
            ],
        },
    )
    record = build_for(home.cfg).tasks[catalog.RECORD_RUN]
    for i in range(5):
        record(job="snapshot", started_at=t + i, ended_at=t + i + 1, outcome="ok", figures={"n": i})
    home.drain()
    yield home
    home.close()


def _walk(get, between) -> tuple[list, int]:
    """Follow ``next`` from the first page: ``get(after)`` → (rows, next); ``between(page)``
    writes after each page. Returns every row and the pages read."""
    rows, after, pages = [], None, 0
    while True:
        got, after = get(after)
        rows += got
        pages += 1
        between(pages)
        if after is None:
            return rows, pages
        assert got and pages < 50


def test_http_listings_page_under_writes(seeded):
    home = seeded
    say = 0

    def write(sid: str, text: str) -> None:
        nonlocal say
        say += 1
        home.append(
            "messages.append",
            {
                "session_id": sid,
                "messages": [{"role": "user", "content": text, "timestamp": time.time()}],
            },
        )
        home.drain()

    with served(QuillCLI(home.root)) as base:

        def get(path: str, key: str, **params):
            def page(after):
                r = httpx.get(
                    f"{base}{path}",
                    params={**params, **({"after": after} if after else {})},
                    timeout=60,
                )
                assert r.status_code == 200, r.text
                body = r.json()
                assert r.headers.get("X-Next-Cursor") == body["next"]
                return body[key], body["next"]

            return page

        # sessions: a listed session moves ahead and a new one arrives between pages
        rows, pages = _walk(
            get("/api/v1/sessions", "sessions", limit=2),
            lambda p: p == 1 and (write("s5", f"{WORD} again"), write("late", f"{WORD} late")),
        )
        ids = [r["id"] for r in rows]
        assert len(ids) == len(set(ids)) and set(ids) >= {f"s{i}" for i in range(5)} | {"long"}
        assert ids[:2] == ["s5", "s4"]

        # a session's messages: more appended while paging; every message once, in order
        rows, pages = _walk(
            get("/api/v1/sessions/long/messages", "messages", limit=3),
            lambda p: p == 1 and (write("long", "line 7"), write("long", "line 8")),
        )
        assert [m["content"] for m in rows] == [f"line {n}" for n in range(9)] and pages == 3

        # search: the pages are the big page as it was when the first page was read
        big = httpx.get(
            f"{base}/api/v1/search", params={"q": WORD, "limit": 100, "per_session": 2}
        ).json()
        rows, pages = _walk(
            get("/api/v1/search", "hits", q=WORD, limit=3, per_session=2),
            lambda p: write(f"s{p % 6}", f"{WORD} while paging {p}"),
        )
        assert [h["message_id"] for h in rows] == [h["message_id"] for h in big["hits"]]
        assert big["next"] is None and len(rows) == 13 and pages == 5  # 6 x 2 + late

        # job runs: runs recorded meanwhile are newer than the cursor: not on later pages
        record = build_for(home.cfg).tasks[catalog.RECORD_RUN]

        def more_runs(p: int) -> None:
            t = time.time()
            record(job="snapshot", started_at=t, ended_at=t, outcome="ok", figures={"n": 100 + p})
            home.drain()

        rows, pages = _walk(get("/api/v1/jobs/history", "runs", job="snapshot", limit=2), more_runs)
        assert [r["figures"]["n"] for r in rows] == [4, 3, 2, 1, 0] and pages == 3

        # a cursor of another listing, query, filter or session is refused by type
        first = {
            "sessions": httpx.get(f"{base}/api/v1/sessions", params={"limit": 1}).json()["next"],
            "search": httpx.get(f"{base}/api/v1/search", params={"q": WORD, "limit": 1}).json()[
                "next"
            ],
            "messages": httpx.get(
                f"{base}/api/v1/sessions/long/messages", params={"limit": 1}
            ).json()["next"],
            "runs": httpx.get(f"{base}/api/v1/jobs/history", params={"limit": 1}).json()["next"],
        }
        assert all(first.values()), first
        refused = [
            ("/api/v1/jobs/history", {}, first["sessions"]),
            ("/api/v1/sessions", {"source": "codex"}, first["sessions"]),
            ("/api/v1/search", {"q": "other"}, first["search"]),
            ("/api/v1/search", {"q": WORD, "role": "assistant"}, first["search"]),
            ("/api/v1/sessions/s1/messages", {}, first["messages"]),
            ("/api/v1/sessions/long/messages", {"view": "audit"}, first["messages"]),
            ("/api/v1/jobs/history", {"job": "vacuum"}, first["runs"]),
            ("/api/v1/sessions", {}, first["runs"]),
            ("/api/v1/search", {"q": WORD}, "garbage"),
        ]
        for path, params, cursor in refused:
            r = httpx.get(f"{base}{path}", params={**params, "after": cursor})
            assert r.status_code == 422, (path, params, r.text)
            assert r.json()["error"]["reason"] == "bad-cursor", (path, r.text)


def _quill(capsys, home, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = run(cli, ["--home", str(home.root), *args])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize(
    ("args", "key", "want"),
    [
        (["sessions", "list", "--limit", "4"], "sessions", 7),
        (["search", WORD, "--limit", "4", "--per-session", "2"], "hits", 12),
        (["jobs", "history", "--job", "snapshot", "--limit", "2"], "runs", 5),
    ],
    ids=lambda v: v[0] if isinstance(v, list) else str(v),
)
def test_cli_json_carries_the_next_cursor(capsys, seeded, args, key, want):
    """``--json`` pages by its ``next``; the human page's note gives the same cursor; a
    cursor of another listing is exit 2 with the JSON error."""
    rows, after, pages = [], [], 0
    while True:
        code, out, err = _quill(capsys, seeded, *args, "--json", *after)
        assert code == 0, err
        page = json.loads(out)
        rows += page[key]
        pages += 1
        code, _, human = _quill(capsys, seeded, *args, *after)
        assert code == 0
        if page["next"] is None:
            assert "--after" not in human
            break
        assert f"--after {page['next']} " in human
        after = ["--after", page["next"]]
    limit = int(args[args.index("--limit") + 1])
    assert len(rows) == want and pages == -(-want // limit)
    first = json.loads(_quill(capsys, seeded, *args, "--json")[1])["next"]
    other = ["jobs", "history", "--json"] if args[0] != "jobs" else ["sessions", "list", "--json"]
    code, out, _ = _quill(capsys, seeded, *other, "--after", first)
    assert code == 2 and json.loads(out)["error"]["kind"] == "usage"

"""``quill jobs list`` and ``GET /api/v1/jobs``, ``quill schedule list`` and ``quill token
list`` page like every other listing (docs/operations.md,
"Pages"): ``--limit``/``limit`` rows a page, by job name, ``next`` in the document (and the
``X-Next-Cursor``/``Link`` headers over HTTP), a cursor of another listing refused (exit 2,
422 ``bad-cursor``). Before, each returned a bare list of every row: no ``next`` to rely on."""

from __future__ import annotations

import httpx
from conftest import QuillCLI
from service_helpers import served

from quill.ops.service.tokens import TokenStore
from quill.store import paging


def _walk(fetch) -> list[str]:
    names, after, pages = [], None, 0
    while True:
        doc = fetch(after)
        names += [j["name"] for j in doc["jobs"]]
        pages += 1
        after = doc["next"]
        if after is None:
            return names
        assert pages < 100


def test_jobs_list_pages_by_name_and_refuses_another_listings_cursor(quill: QuillCLI):
    whole = quill.json("jobs", "list")
    assert whole["next"] is None
    every = [j["name"] for j in whole["jobs"]]
    assert every == sorted(every) and len(every) > 3
    limited = ["jobs", "list", "--limit", "3"]
    walked = _walk(lambda after: quill.json(*limited, *(["--after", after] if after else [])))
    assert walked == every  # nothing repeated, nothing skipped
    first = quill.run(*limited)
    assert "--after" in first.stderr  # without --json the next page is named on stderr
    foreign = paging.encode("job_runs", (1,), paging.scope_of(None))
    refused = quill.run("jobs", "list", "--after", foreign, check=False)
    assert refused.returncode == 2, refused.stderr


def test_the_jobs_endpoint_pages_with_next_and_its_headers(quill: QuillCLI):
    token, _ = TokenStore(quill.home / "tokens.db").create("t", ["read"])
    auth = {"Authorization": f"Bearer {token}"}
    with served(quill) as base:

        def fetch(after):
            params = {"limit": 4, **({"after": after} if after else {})}
            got = httpx.get(f"{base}/api/v1/jobs", params=params, headers=auth, timeout=60)
            assert got.status_code == 200, got.text
            assert got.headers.get("X-Next-Cursor") == got.json()["next"]
            return got.json()

        walked = _walk(fetch)
        whole = httpx.get(f"{base}/api/v1/jobs", headers=auth, timeout=60).json()
        bad = httpx.get(f"{base}/api/v1/jobs", params={"after": "nope"}, headers=auth, timeout=60)
    assert whole["next"] is None and walked == [j["name"] for j in whole["jobs"]]
    assert bad.status_code == 422 and bad.json()["error"]["reason"] == "bad-cursor", bad.text


def test_schedule_and_token_lists_page_by_id(quill: QuillCLI):
    for n in range(5):
        TokenStore(quill.home / "tokens.db").create(f"t{n}", ["read"])
    for argv, member in ((["schedule", "list"], "schedules"), (["token", "list"], "tokens")):
        whole = quill.json(*argv)
        assert whole["next"] is None
        every = [r["id"] for r in whole[member]]
        assert every == sorted(every) and len(every) >= 5, (argv, every)
        limited = [*argv, "--limit", "2"]

        def fetch(after, limited=limited, member=member):
            doc = quill.json(*limited, *(["--after", after] if after else []))
            return {"jobs": [{"name": r["id"]} for r in doc[member]], "next": doc["next"]}

        assert _walk(fetch) == every
        foreign = paging.encode("jobs", ("x",))
        assert quill.run(*argv, "--after", foreign, check=False).returncode == 2

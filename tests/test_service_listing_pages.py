"""Listings say when there is more and page by keyset, through a real `quill serve`: the API
gives a next cursor, the dashboard honours `?limit=` and links the next page, and a page
walk under concurrent writes never repeats a session nor skips one that did not move."""

from __future__ import annotations

import re
import time

import httpx
from service_helpers import served


def _append(base: str, sid: str, ts: float) -> None:
    r = httpx.post(
        f"{base}/api/v1/sessions/{sid}/messages",
        json={"messages": [{"role": "user", "content": f"hello {sid}", "ts": ts}]},
    )
    assert r.status_code == 202, r.text


def test_api_pages_by_cursor_without_repeats_under_concurrent_writes(quill):
    now = time.time() - 1000
    with served(quill) as base:
        for n in range(7):
            _append(base, f"p{n}", now + n)
        quill.drain()
        seen, after, pages = [], None, 0
        while True:
            params = {"limit": 3, **({"after": after} if after else {})}
            r = httpx.get(f"{base}/api/v1/sessions", params=params)
            assert r.status_code == 200
            seen += [row["id"] for row in r.json()["sessions"]]
            pages += 1
            if pages == 1:  # writes between pages: a listed session moves ahead, one arrives
                _append(base, "p6", now + 100)
                _append(base, "new", now + 101)
                quill.drain()
            after = r.json()["next"]
            assert r.headers.get("X-Next-Cursor") == after
            if after is None:
                assert "Link" not in r.headers
                break
            assert 'rel="next"' in r.headers["Link"]
        assert len(seen) == len(set(seen)), seen
        assert set(seen) >= {f"p{n}" for n in range(7)}
        assert seen[:3] == ["p6", "p5", "p4"]
        bad = httpx.get(f"{base}/api/v1/sessions", params={"after": "nonsense!"})
        assert bad.status_code == 422
        assert bad.json()["error"]["reason"] == "bad-cursor"


def test_dashboard_honours_limit_and_links_the_next_page(quill):
    now = time.time() - 1000
    with served(quill) as base:
        for n in range(5):
            _append(base, f"d{n}", now + n)
        quill.drain()
        url, seen = f"{base}/sessions?limit=2", []
        while url:
            page = httpx.get(url).text
            rows = re.findall(r'<tr class="session"><td><a href="/sessions/(\w+)"', page)
            assert len(rows) <= 2
            seen += rows
            found = re.search(r'<a id="next-page" href="([^"]+)"', page)
            url = base + found.group(1).replace("&amp;", "&") if found else None
            if url is None:
                assert "that is all" in page
        assert seen == ["d4", "d3", "d2", "d1", "d0"]


def test_dashboard_search_and_job_history_link_their_next_pages(quill):
    """The dashboard's search pages by the API's cursor (the same hits as one big page) and
    its jobs page pages the run history (newest first, each run once)."""
    from harness import make_home

    from quill.jobs import catalog
    from quill.jobs.queues import build_for

    cfg = make_home(quill.home, watch={"enabled": False})
    record = build_for(cfg).tasks[catalog.RECORD_RUN]
    t = time.time() - 500
    for i in range(35):
        record(job="snapshot", started_at=t + i, ended_at=t + i, outcome="ok", figures={"n": i})
    now = time.time() - 1000
    with served(quill) as base:
        for n in range(4):
            for k in range(2):
                _append(base, f"w{n}", now + n * 10 + k)
        quill.drain()
        big = httpx.get(f"{base}/api/v1/search", params={"q": "hello", "limit": 100}).json()
        url, seen = f"{base}/sessions?q=hello&limit=3", []
        while url:
            page = httpx.get(url).text
            seen += [
                int(m) for m in re.findall(r'<tr class="hit"><td><a href="[^"#]+#m(\d+)"', page)
            ]
            found = re.search(r'<a id="next-page" href="([^"]+)"', page)
            url = base + found.group(1).replace("&amp;", "&") if found else None
        assert seen == [h["message_id"] for h in big["hits"]] and len(seen) == 8
        url, runs = f"{base}/jobs", []
        while url:
            page = httpx.get(url).text
            runs += re.findall(r'<tr class="run"><td>snapshot</td>', page)
            found = re.search(r'<a id="next-page" href="([^"]+)"', page)
            url = base + found.group(1).replace("&amp;", "&") if found else None
        assert len(runs) == 35

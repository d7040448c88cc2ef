"""The dashboard tells the truth at a glance, against a real `quill serve` with the fleet
stopped: pages say when accepted messages are not in the store yet."""

from __future__ import annotations

import datetime as dt
import re
import time

import httpx
from service_helpers import served, token

from quill.ops.service.auth import COOKIE


def _append(base: str, sid: str, text: str) -> None:
    r = httpx.post(
        f"{base}/api/v1/sessions/{sid}/messages",
        json={"messages": [{"role": "user", "content": text}]},
    )
    assert r.status_code == 202, r.text


def test_pages_say_the_store_is_behind_while_messages_are_pending(quill):
    with served(quill) as base:
        _append(base, "seen", "applied zebra words")
        quill.drain()
        pages = ["/sessions", "/sessions?q=zebra", "/sessions/seen"]
        for path in pages:
            page = httpx.get(base + path)
            assert page.status_code == 200
            assert 'id="behind"' not in page.text, path
        _append(base, "pending", "not applied zebra words")  # no fleet: stays in the spool
        for path in pages:
            page = httpx.get(base + path)
            assert page.status_code == 200
            assert 'id="behind"' in page.text, path
            assert "not applied yet" in page.text and "quill run" in page.text
        quill.drain()
        assert 'id="behind"' not in httpx.get(f"{base}/sessions").text


def test_usage_charts_have_a_time_axis_and_costs_that_do_not_round_to_zero(quill):
    from quill.ops.service.formats import human_number, usd

    day = 86400
    start = (int(time.time()) // day - 10) * day + 3600  # ten days ago, 01:00 UTC
    ops = [
        {
            "op": "usage.record",
            "data": {
                "session_id": "u1",
                "model": "gpt-4o-mini",
                "provider": "openai",
                "response_id": f"r{i}",
                "ts": start + offset * day,
                "usage": {"prompt_tokens": 27_946_415 if i == 0 else 812, "completion_tokens": 9},
            },
        }
        for i, offset in enumerate((0, 3))
    ]
    with served(quill) as base:
        assert httpx.post(f"{base}/api/v1/ops", json={"ops": ops}).status_code == 202
        quill.drain()
        page = httpx.get(f"{base}/usage").text
        per_day = httpx.get(f"{base}/api/v1/usage", params={"by": "day"}).json()["usage"]
    days = re.findall(r'<g class="day" data-day="([0-9-]+)"( data-tokens)?', page)
    assert [d for d, _ in days] == [
        dt.datetime.fromtimestamp(start + i * day, dt.UTC).date().isoformat() for i in range(4)
    ]
    assert [bool(t) for _, t in days] == [True, False, False, True]  # two gap days between
    small = min(r["cost_usd"] for r in _rows(per_day))
    assert 0 < small < 0.01
    assert usd(small) in page and usd(small) != "$0.00"
    assert "27946415" not in page.split("</table>")[0]  # the totals row is formatted
    assert human_number(27_946_424) in page


def _rows(body):
    return body if isinstance(body, list) else body["rows"]


def test_jobs_page_offers_run_now_only_for_jobs_that_can_run(quill):
    admin = token(quill, "admin", name="ops")
    with served(quill) as base:
        page = httpx.get(f"{base}/jobs", cookies={COOKIE: admin}).text
    rows = dict(re.findall(r'<tr class="job" data-job="(\w+)">(.*?)</tr>', page, re.S))
    assert "Run now" in rows["vacuum"]  # a SQLite job on a SQLite store
    for name in ("pg_analyze", "pg_integrity_check"):  # PostgreSQL jobs: cannot run here
        assert "Run now" not in rows[name]
        assert "PostgreSQL" in rows[name]

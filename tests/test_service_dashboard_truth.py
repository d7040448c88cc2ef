"""The dashboard tells the truth at a glance, against a real `quill serve` with the fleet
stopped: pages say when accepted messages are not in the store yet."""

from __future__ import annotations

import httpx
from service_helpers import served


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

"""The dashboard's fleet page says what live capture follows, how far behind it is and which
files it could not read (with the reason), from the same read as ``quill status``
(``ops.status.health.watch_state``), rendered in a real headless Chromium.

The watcher follows temp folders only (``[watch] default_roots = false``); no fleet runs:
``quill watch --once`` takes the marks, then the session grows, so the page has something
pending to show."""

from __future__ import annotations

import json

import pytest
from conftest import CORPUS
from service_helpers import served
from watch_helpers import watch_config

pytestmark = [pytest.mark.corpus, pytest.mark.usefixtures("chromium_path")]

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
CLAUDE = sorted((CORPUS / "claude-code").glob("*.jsonl"))


def _panel(page, shot) -> dict:
    """The watch panel of the fleet page as the browser renders it: summary line, roots
    rows and unreadable rows (``[[cell, …], …]``)."""
    page.goto(page.base + "/fleet")
    page.locator("#watch").scroll_into_view_if_needed()
    page.screenshot(path=str(shot), full_page=True)

    def rows(selector: str) -> list[list[str]]:
        return [
            [c.strip() for c in r.locator("td").all_inner_texts()]
            for r in page.locator(selector).all()
        ]

    return {
        "summary": page.locator("#watch-summary").inner_text(),
        "roots": rows("#watch-roots tr.root"),
        "unreadable": rows("#watch-unreadable tr.unreadable"),
    }


def test_fleet_page_shows_watched_folders_lag_and_unreadable_files(tmp_path, quill, chromium_path):
    root = tmp_path / "agents"
    root.mkdir()
    session = root / "s.jsonl"
    lines = CLAUDE[1].read_bytes().splitlines(keepends=True)
    session.write_bytes(b"".join(lines[:10]))
    (root / "notes.json").write_text('{"not": "a transcript"}')
    later = tmp_path / "not-yet"
    watch_config(quill.home, [root, later])
    quill.run("watch", "--once")
    extra = b"".join(lines[10:20])
    with open(session, "ab") as f:
        f.write(extra)
    status = json.loads(quill.run("status", "--json").stdout)["watch"]

    from playwright.sync_api import sync_playwright

    with served(quill) as base, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(chromium_path), args=ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 1400})
        page.set_default_timeout(20_000)
        page.base = base
        shown = _panel(page, tmp_path / "fleet-watch.png")
        quill.run("watch", "--once")
        caught_up = _panel(page, tmp_path / "fleet-watch-caught-up.png")
        browser.close()
    assert shown["roots"] == [[str(root), "yes"], [str(later), "not yet (followed once created)"]]
    assert shown["summary"].startswith("1 file(s) followed; ")
    assert f"1 file(s) pending, {len(extra)} bytes behind" in shown["summary"]
    assert "watcher not running" in shown["summary"]
    assert [row[:2] for row in shown["unreadable"]] == [
        [str(root / "notes.json"), "format not recognised"]
    ]
    assert shown["unreadable"][0][2]  # when it failed, never blank
    # The page and `quill status` read the same state.
    assert [r["path"] for r in status["roots"]] == [r[0] for r in shown["roots"]]
    assert [[u["path"], u["reason"]] for u in status["unreadable"]] == [
        row[:2] for row in shown["unreadable"]
    ]

    assert "up to date" in caught_up["summary"] and "pending" not in caught_up["summary"]
    assert caught_up["unreadable"] == shown["unreadable"]  # kept until the file changes

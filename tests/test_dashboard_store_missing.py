"""A lost store (``state.db`` gone while a snapshot exists, so the spool alone no longer holds
its history): ``quill status`` says "store MISSING … quill recover"; the dashboard says the
same — the same verdict (``ops.status.health.store_missing``) — on the sessions page and every
other page, instead of an empty listing or "no store yet". In a real headless Chromium."""

from __future__ import annotations

import json

import pytest
from service_helpers import served

pytestmark = pytest.mark.usefixtures("chromium_path")

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]


def test_every_page_says_the_store_is_missing_and_names_quill_recover(
    tmp_path, quill, home, chromium_path
):
    from playwright.sync_api import sync_playwright

    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text("[watch]\nenabled = false\n")
    quill.run("push", "--session", "kept", input='{"role": "user", "content": "hello"}\n')
    quill.run("run", "--until-idle")
    quill.run("snapshot")
    for db in home.glob("state.db*"):
        db.unlink()  # the store is lost; the snapshot and the spool remain
    status = json.loads(quill.run("status", "--json", check=False).stdout)["store"]
    assert status["state"] == "missing" and status["next"] == "quill recover"

    with served(quill) as base, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(chromium_path), args=ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.set_default_timeout(20_000)
        shown = {}
        for path in ("/sessions", "/sessions/kept", "/fleet", "/jobs", "/usage"):
            page.goto(f"{base}{path}")
            banner = page.locator("#store-missing")
            shown[path] = banner.inner_text() if banner.count() else None
            page.screenshot(path=str(tmp_path / f"{path.strip('/').replace('/', '-')}.png"))
        no_store_yet = page.goto(f"{base}/sessions") and page.locator("text=No store yet").count()
        browser.close()
    for path, text in shown.items():
        assert text is not None, f"{path} says nothing about the lost store"
        assert text.startswith("Store MISSING: "), text
        assert status["error"] in text and "quill recover" in text, (path, text)
    assert no_store_yet == 0  # a lost store is not a store "not created yet"

"""The dashboard's fleet page says what ``quill status`` says about an unfinished purge (the
deleted content may still be on disk) and the command that finishes it, from the same
status document (``ops.status.health.collect``), rendered in a real headless Chromium."""

from __future__ import annotations

import json

import pytest
from service_helpers import served

pytestmark = pytest.mark.usefixtures("chromium_path")

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]


def test_fleet_page_names_an_interrupted_purge_and_its_next_command(
    tmp_path, quill, home, chromium_path
):
    from playwright.sync_api import sync_playwright

    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text("[watch]\nenabled = false\n")
    spool = home / "spool"
    spool.mkdir(parents=True)
    # The plan a purge records before it rewrites anything; left behind, it was killed.
    plan = {"bounds": {"secret-session": ["1:0", "b1"]}}
    (spool / ".purge-plan.json").write_text(json.dumps(plan))
    want = json.loads(quill.run("status", "--json", check=False).stdout)["spool"]
    assert want["interrupted_purge"]["sessions"] == ["secret-session"]

    with served(quill) as base, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(chromium_path), args=ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.set_default_timeout(20_000)
        page.goto(f"{base}/fleet")
        banner = page.locator("#purge-interrupted").inner_text()
        page.screenshot(path=str(tmp_path / "fleet-purge.png"))
        browser.close()
    assert "Purge interrupted of secret-session" in banner
    assert banner.endswith(want["interrupted_purge"]["next"])

"""`/api/docs` renders the service's operations in a real headless Chromium, offline (every
file served by the service itself): the list of operations on the page, not the status code."""

from __future__ import annotations

import json

import pytest
from conftest import REPO
from service_helpers import served

pytestmark = pytest.mark.usefixtures("chromium_path")

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]


def test_api_docs_render_every_operation_offline(quill, chromium_path, tmp_path):
    from playwright.sync_api import sync_playwright

    spec = json.loads((REPO / "docs" / "openapi.json").read_text())
    expected = {
        (method.upper(), path)
        for path, ops in spec["paths"].items()
        for method in ops
        if method in ("get", "post", "put", "patch", "delete")
    }
    with served(quill) as base, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(chromium_path), args=ARGS)
        page = browser.new_page()
        outside: list[str] = []
        page.on(
            "request",
            lambda r: r.url.startswith(base) or r.url.startswith("data:") or outside.append(r.url),
        )
        page.goto(f"{base}/api/docs")
        page.wait_for_selector(".opblock, .errors-wrapper", timeout=20_000)
        page.screenshot(path=str(tmp_path / "api-docs.png"), full_page=True)
        errors = page.locator(".errors-wrapper").all_inner_texts()
        rendered = {
            (
                block.locator(".opblock-summary-method").inner_text().strip(),
                block.locator(".opblock-summary-path").get_attribute("data-path"),
            )
            for block in page.locator(".opblock").all()
        }
        browser.close()
    assert not errors, errors
    assert rendered == expected
    assert not outside, f"the docs page fetched from elsewhere: {outside}"

"""The dashboard end to end in a real headless Chromium (Debian's `chromium`, driven by
Playwright) against a real fleet — its `http` child serves the app — with the corpus imported
plus one synthetic session carrying a tool call, a rewind, a compaction and a delegate child.
Screenshots go under each test's tmp dir."""

from __future__ import annotations

import os
import time
from pathlib import Path

import httpx
import pytest
from conftest import CORPUS, QuillCLI, stop_fleet
from service_helpers import free_port

from quill.ops.service.tokens import TokenStore

ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

# chromium_path first: without a browser the module's fleet is never started.
pytestmark = [pytest.mark.corpus, pytest.mark.usefixtures("chromium_path")]

TOOL_CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "run_shell", "arguments": '{"cmd": "pytest -q"}'},
}
DEMO_OPS = [
    {
        "op": "session.create",
        "data": {"session_id": "demo-parent", "source": "api", "title": "Refactor demo"},
    },
    {
        "op": "messages.append",
        "data": {
            "session_id": "demo-parent",
            "messages": [
                {"role": "user", "content": "plan the refactor"},
                {
                    "role": "assistant",
                    "content": "running the tests first",
                    "tool_calls": [TOOL_CALL],
                },
                {"role": "tool", "tool_call_id": "call_1", "content": "3 passed in 0.4s"},
                {"role": "assistant", "content": "all green"},
                {"role": "user", "content": "try the zebra idea"},
                {"role": "assistant", "content": "zebra answer"},
            ],
        },
    },
    {"op": "messages.rewind", "data": {"session_id": "demo-parent", "user_turn": -1}},
    {
        "op": "messages.compact",
        "data": {
            "session_id": "demo-parent",
            "messages": [{"role": "user", "content": "[summary] we ran the tests: all green"}],
        },
    },
    {
        "op": "session.create",
        "data": {
            "session_id": "demo-child",
            "source": "subagent",
            "title": "Child task",
            "parent_id": "demo-parent",
            "parent_kind": "delegate",
        },
    },
    {
        "op": "messages.append",
        "data": {
            "session_id": "demo-child",
            "messages": [{"role": "user", "content": "check the lint"}],
        },
    },
    {
        "op": "messages.append",
        "data": {
            "session_id": "demo-think",
            "messages": [
                {"role": "user", "content": "which route is shorter?"},
                {"role": "assistant", "content": None, "reasoning": "weigh the kangaroo route"},
            ],
        },
    },
    # One older match in a quiet session, then a chatty session with many newer ones.
    {"op": "session.create", "data": {"session_id": "demo-quiet", "title": "Quiet wombat"}},
    {
        "op": "messages.append",
        "data": {"session_id": "demo-quiet", "messages": [{"role": "user", "content": "wombat"}]},
    },
    {"op": "session.create", "data": {"session_id": "demo-chatty", "title": "Chatty wombats"}},
    {
        "op": "messages.append",
        "data": {
            "session_id": "demo-chatty",
            "messages": [{"role": "assistant", "content": f"wombat {i}"} for i in range(60)],
        },
    },
]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A fleet (with its http child) over the imported corpus; yields
    (base URL, admin token, quill)."""
    home = tmp_path_factory.mktemp("dash") / "quill home"
    home.mkdir()
    port = free_port()
    (home / "config.toml").write_text(f'[http]\nlisten = "127.0.0.1:{port}"\n')
    quill = QuillCLI(home)
    # Exit 1 names the corpus files in formats Quill does not import; the rest is spooled.
    assert "spooled" in quill.run("import", str(CORPUS), check=False).stdout
    admin, _ = TokenStore(home / "tokens.db").create("browser", ["admin"])
    fleet = quill.start_fleet()
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"{base}/healthz", timeout=1)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the fleet's http child did not start"
                time.sleep(0.2)
        r = httpx.post(f"{base}/api/v1/ops", json={"ops": DEMO_OPS})
        assert r.status_code == 202, r.text
        quill.wait_idle()
        yield base, admin, quill
    finally:
        assert stop_fleet(fleet) == 0


@pytest.fixture(scope="module")
def browser(chromium_path):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(chromium_path), args=ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser, tmp_path):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    pg = context.new_page()
    pg.set_default_timeout(20_000)
    pg.shots = tmp_path  # screenshots of this test go under its tmp dir
    yield pg
    context.close()


def _shot(page, name: str) -> Path:
    path = page.shots / f"{name}.png"
    page.screenshot(path=str(path), full_page=False)
    assert path.stat().st_size > 5000  # a rendered page, not a blank frame
    return path


def test_sessions_list_filters_and_search_with_highlighted_snippets(site, page):
    base, _, _ = site
    page.goto(f"{base}/sessions")
    assert page.locator("tr.session").count() >= 20  # the corpus's sessions (chain tips)
    _shot(page, "sessions")
    page.select_option("select[name=source]", "codex")
    page.click("button[type=submit]")
    sources = page.locator("tr.session td:nth-child(2)").all_inner_texts()
    assert sources and set(sources) == {"codex"}
    page.goto(f"{base}/sessions")
    page.fill("input[name=q]", "pytest")
    page.press("input[name=q]", "Enter")
    page.wait_for_selector("#hits")
    hits = page.locator("tr.hit")
    assert hits.count() > 0
    marks = page.locator("td.snippet mark").all_inner_texts()
    assert marks and all(m.lower() == "pytest" for m in marks)
    _shot(page, "search")
    first = hits.first.locator("a")
    target = first.get_attribute("href").split("#")[0]
    first.click()
    page.wait_for_url(f"**{target}**")
    assert page.locator(".msg").count() > 0


def test_search_shows_every_matching_session_and_counts_the_rest(site, page):
    """A chatty session shows at most 3 hits and a link to its other matches; the older
    quiet session is still on the page; the count line gives the total."""
    base, _, _ = site
    page.goto(f"{base}/sessions")
    page.fill("input[name=q]", "wombat")
    page.press("input[name=q]", "Enter")
    page.wait_for_selector("#hits")
    sessions = page.locator("tr.hit td:first-child a").all_inner_texts()
    assert sessions == ["Chatty wombats"] * 3 + ["Quiet wombat"]
    assert page.locator("#hit-count").inner_text().startswith("4 of 61 hit(s)")
    more = page.locator("tr.more a")
    assert more.all_inner_texts() == ["57 more in Chatty wombats"]
    _shot(page, "search-grouped")
    more.click()
    page.wait_for_selector("#hits")
    assert page.locator("tr.hit").count() == 50  # the page size, all from the one session
    assert "in session demo-chatty" in page.locator("#hit-count").inner_text()
    assert set(page.locator("tr.hit td:first-child a").all_inner_texts()) == {"Chatty wombats"}


def test_transcript_views_folded_tool_calls_markers_and_lineage(site, page):
    base, _, _ = site
    page.goto(f"{base}/sessions/demo-parent")
    assert page.locator("#count").inner_text().startswith("5 message(s) in the display view")
    assert page.locator(".marker-line.compacted").count() == 1
    details = page.locator("details.tool").first
    assert "run_shell" in details.locator("summary").inner_text()
    result = details.locator("pre", has_text="3 passed")
    assert not result.is_visible()  # folded until opened
    details.locator("summary").click()
    assert result.is_visible()
    assert page.locator(".msg.tool").count() == 0  # the result is folded into its call
    assert "zebra" not in page.locator("main").inner_text()  # rewound: audit only
    _shot(page, "transcript-display")
    page.click("#views a[data-view=audit]")
    page.wait_for_url("**view=audit")
    assert page.locator(".marker-line.rewound").count() == 1
    assert (
        page.locator(".msg.rewound").count() == 2
        and "zebra answer" in page.locator("main").inner_text()
    )
    _shot(page, "transcript-audit")
    page.click("#views a[data-view=model]")
    page.wait_for_url("**view=model")
    assert page.locator("#count").inner_text().startswith("1 message(s) in the model view")
    assert "[summary]" in page.locator(".msg").inner_text()
    page.click("#lineage a[href='/sessions/demo-child']")
    page.wait_for_url("**/sessions/demo-child")
    assert "delegate of" in page.locator("#lineage").inner_text()
    page.click("#lineage a[href='/sessions/demo-parent']")
    page.wait_for_url("**/sessions/demo-parent")
    page.goto(f"{base}/sessions/no-such-session")  # a browser gets a page, not JSON
    assert (
        "not-found" in page.locator("h1").inner_text()
        and "no-such-session" in page.locator("#error").inner_text()
    )


def test_reasoning_is_folded_on_its_card_and_a_reasoning_hit_opens_it(site, page):
    base, _, _ = site
    page.goto(f"{base}/sessions?q=kangaroo")
    page.wait_for_selector("#hits")
    hit = page.locator("tr.hit a").first
    hit.click()
    page.wait_for_url("**/sessions/demo-think**")
    card = page.locator(".msg.assistant")
    assert card.count() == 1
    folded = card.locator("details.reasoning")
    text = folded.locator("pre", has_text="kangaroo route")
    assert "reasoning" in folded.locator("summary").inner_text()
    assert not text.is_visible()  # folded until opened
    folded.locator("summary").click()
    assert text.is_visible()
    _shot(page, "transcript-reasoning")


def test_fleet_page_shows_workers_lag_and_quarantine(site, page):
    base, _, _ = site
    page.goto(f"{base}/fleet")
    assert "Fleet running" in page.locator("#fleet-state").inner_text()
    rows = {
        r.locator("td").first.inner_text(): r.locator("td").nth(2).inner_text()
        for r in page.locator("#workers tr").all()[1:]
    }
    assert rows == {"writer": "yes", "scheduler": "yes", "consumer": "yes", "http": "yes"}
    assert "0 bytes" in page.locator("#spool").inner_text()
    assert page.locator("#halt").count() == 0
    _shot(page, "fleet")


def test_jobs_run_now_needs_admin_and_records_a_run(site, page):
    base, admin, _ = site
    page.goto(f"{base}/jobs")
    assert page.locator("tr.job").count() >= 10
    assert page.locator("tr.job button").count() == 0  # anonymous loopback: no admin scope
    page.click("text=sign in")
    page.fill("input[name=token]", admin)
    page.click("button[type=submit]")
    page.wait_for_url("**/jobs")
    page.click("tr.job[data-job=wal_checkpoint] button")
    page.wait_for_url("**/jobs?queued=wal_checkpoint")
    assert "Queued" in page.locator("#queued").inner_text()
    # The history shows a run from its start ("running") to its end; wait for the end.
    deadline = time.monotonic() + 60
    row = page.locator("#history tr.run", has_text="wal_checkpoint").first
    while row.count() == 0 or "\trunning\t" in row.inner_text():
        assert time.monotonic() < deadline, "the queued run never finished in the history"
        time.sleep(0.5)
        page.reload()
        row = page.locator("#history tr.run", has_text="wal_checkpoint").first
    assert "\tok\t" in row.inner_text()
    _shot(page, "jobs")


def test_usage_page_charts_what_the_store_records(site, page):
    base, _, _ = site
    total = httpx.get(f"{base}/api/v1/usage").json()["usage"][0]
    per_day = httpx.get(f"{base}/api/v1/usage", params={"by": "day"}).json()["usage"]
    per_model = httpx.get(f"{base}/api/v1/usage", params={"by": "model"}).json()["usage"]
    assert total["calls"] > 0 and per_day and per_model  # the corpus carries provider usage
    page.goto(f"{base}/usage")
    from quill.ops.service.formats import human_number, usd

    # A time axis: one slot per calendar day, a bar only on the days with usage.
    assert page.locator("#chart-day g.day").count() >= len(per_day)
    assert page.locator("#chart-day rect").count() == len(per_day)
    assert page.locator("#chart-model g.model").count() == len(per_model)
    assert page.locator("#chart-cost rect").count() == len(per_day)
    row = page.locator("#usage-total tr").nth(1).locator("td")
    cells = row.all_inner_texts()
    assert cells[0] == human_number(total["calls"])
    assert row.nth(1).get_attribute("title") == str(total["input_tokens"])
    assert cells[6] == usd(total["cost_usd"])
    _shot(page, "usage")
    if os.environ.get(
        "QUILL_README_SHOT"
    ):  # refresh docs/dashboard.png: QUILL_README_SHOT=1 pytest -k usage
        page.goto(f"{base}/sessions/demo-parent")
        page.locator("details.tool").first.locator("summary").click()
        page.screenshot(path=os.environ["QUILL_README_SHOT"])

"""A session's preview (the listing's "title / preview" when the agent gave no title) is the
first prompt the user typed, never context the agent injected as a user message: Codex's
AGENTS.md and ``<environment_context>``, Claude Code's slash-command wrappers, caveats and
hook feedback (``isMeta``), or any user message that is only tag blocks. Real rollouts from
the corpus, imported with ``quill import`` and drained by the production writer."""

from __future__ import annotations

import json

import pytest
from conftest import CORPUS
from harness import drain, make_home

from quill.ops.client.client import Client

CASES = {
    # file → the first prompt its user typed
    "codex/agentv__rollout-019eef3d-abd1-72e1-ab99-dcdb259027c5.jsonl": "please switch to main",
    "codex/agentv__rollout-019f36b8-7808-7b53-b256-85144c802798.jsonl": "create orphan dogfood",
    "claude-code/context-evaluator__51723c80-7be9-4bc5-9795-7bd86f32165d.jsonl": None,
}


@pytest.mark.corpus
def test_preview_is_the_first_typed_prompt_not_injected_context(tmp_path, quill):
    cfg = make_home(quill.home)
    for name in CASES:
        quill.run("import", str(CORPUS / name))
    # Any format: a user message that is only tag blocks (an OpenAI-chat transcript file).
    plain = tmp_path / "plain.json"
    plain.write_text(
        json.dumps(
            [
                {"role": "user", "content": "<system-reminder>be brief</system-reminder>\n"},
                {"role": "user", "content": "what is <b>bold</b>?"},
            ]
        )
    )
    quill.run("import", str(plain))
    drain(cfg.home)
    rows = {r["id"]: r for r in Client(config_=cfg).sessions(limit=100)}
    previews = {sid: (r.get("title"), r.get("preview") or "") for sid, r in rows.items()}
    text = json.dumps(previews, indent=1)[:3000]
    [plain_id] = [s for s in previews if "plain" in s]
    assert previews[plain_id][1] == "what is <b>bold</b>?", text
    for name, typed in CASES.items():
        sid = next((s for s in previews if s.split(":")[-1] in name), None)
        assert sid is not None, (name, text)
        title, preview = previews[sid]
        assert not preview.startswith(("# AGENTS.md", "<")), (name, preview[:200])
        if typed:
            assert preview.startswith(typed), (name, preview[:200])


def test_the_preview_skips_injected_messages_on_postgresql_too(tmp_path, pg_store_url):
    from conftest import pg_data_dir

    from quill import home as config
    from quill.ops import logs
    from quill.ops.recover.postgres import drain as pg_drain

    home = tmp_path / "h"
    pg_data_dir(home, pg_store_url, 0)
    client = Client(str(home))
    client.append(
        "pg-injected",
        [
            {"role": "user", "content": "# AGENTS.md instructions …", "extra": {"injected": True}},
            {"role": "user", "content": '100% typed, with a "quote"'},
        ],
    )
    pg_drain(config.load(home), logs.configure(None, "test"))
    [row] = [r for r in client.sessions() if r["id"] == "pg-injected"]
    assert row["preview"] == '100% typed, with a "quote"', row

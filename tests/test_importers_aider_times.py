"""An imported aider history is dated by its runs, not by the import: aider writes a start
time per run and none per message, so every message of a run carries the run's start, and
the run's session is as old as the run in listings and search hits. And a run's model is the
model's id, without the mark aider prints after it when prompt caching is on."""

from __future__ import annotations

from test_importers_agents_synthetic import AIDER

from quill.ops.importers import parse_file

RUN_1 = 1722886382.0  # 2024-08-05 19:33:02, aider's local time read as UTC
RUN_2 = 1722938400.0  # 2024-08-06 10:00:00


def test_each_aider_message_carries_its_runs_start(tmp_path):
    path = tmp_path / ".aider.chat.history.md"
    path.write_text(AIDER)
    first, second = parse_file(path).sessions
    assert {m["timestamp"] for m in first.messages} == {RUN_1}
    assert {m["timestamp"] for m in second.messages} == {RUN_2}


def test_an_imported_aider_run_is_listed_and_found_as_old_as_it_is(quill, home, tmp_path):
    path = tmp_path / "project" / ".aider.chat.history.md"
    path.parent.mkdir()
    path.write_text(AIDER)
    quill.run("import", str(path))
    quill.run("run", "--until-idle", "--timeout", "120")
    listed = {
        s["started_at"]: s for s in quill.json("sessions", "list", "--source", "aider")["sessions"]
    }
    assert set(listed) == {RUN_1, RUN_2}
    assert [listed[t]["last_active"] for t in (RUN_1, RUN_2)] == [RUN_1, RUN_2]
    hits = quill.json("search", "utils.py")["hits"]
    assert hits and {h["ts"] for h in hits} == {RUN_1}


def test_the_prompt_cache_mark_is_not_part_of_the_model(tmp_path):
    path = tmp_path / ".aider.chat.history.md"
    path.write_text(
        "\n# aider chat started at 2024-08-19 10:00:00\n\n"
        "> Model: anthropic/claude-3-haiku-20240307⚡ with ♾️ whole edit format  \n"
        "\n#### hi  \n\nhello\n\n"
        "> Tokens: 1,000 sent, 20 received. Cost: $0.0003 message, $0.0003 session.  \n"
        "\n# aider chat started at 2024-08-19 11:00:00\n\n"
        "> Main model: claude-3-5-sonnet-20240620 with diff edit format, prompt cache  \n"
        "\n#### hi  \n"
    )
    first, second = parse_file(path).sessions
    assert first.session["model"] == "anthropic/claude-3-haiku-20240307"
    assert [u["model"] for u in first.usage] == ["anthropic/claude-3-haiku-20240307"]
    assert second.session["model"] == "claude-3-5-sonnet-20240620"

"""Importers given a transcript with one field of one record replaced by an arbitrary JSON
value (property test): parsing never raises — a record it cannot use is a problem of that
line — and what it emits passes ``precheck`` or is refused with an op rule's reason.

Bases: the head of one corpus file per format (claude-code, codex, sharegpt, the openai-chat
trajectory, Copilot CLI events, an OpenHands trajectory, a SWE-agent .traj), the synthetic
Gemini CLI session of tests/test_importers_structure_records.py and log of
tests/gemini_log_helpers.py, and a real opencode export (tests/samples/opencode).
``QUILL_FUZZ_N`` sets the examples per base (default 30).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import CORPUS, REPO
from fuzz_helpers import JSON_VALUES, RAW_ERROR, paths, replaced
from gemini_log_helpers import MAIN as GEMINI_LOG
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from importers_helpers import GEMINI_SESSION

from quill.ops.importers import parse_file
from quill.store.apply.precheck import precheck
from quill.store.errors import InvalidOpError

N = int(os.environ.get("QUILL_FUZZ_N", "30"))

#: The Gemini session of tests/test_importers_structure_records.py, its last user turn with an
#: inline image.
GEMINI = json.loads(json.dumps(GEMINI_SESSION))
GEMINI["messages"][-1]["content"] = [
    {"text": "thanks"},
    {"inlineData": {"mimeType": "image/png", "data": "aGk="}},
]

#: name -> (corpus file, records to keep) for JSON-lines bases.
JSONL = {
    "claude-code": ("claude-code/agentv__acc53d32-5580-4747-9273-e2acff2ba566.jsonl", 30),
    "codex": ("codex/agentv__rollout-019ed836-b1da-78f1-8a0c-e598363d10f4.jsonl", 40),
    "sharegpt": ("sharegpt/hermeswith__trajectory_samples.jsonl", 2),
    "copilot-cli": (
        "other/agentv__copilot-cli-events-10fb4666-56f0-4352-90fc-715caf95b418.jsonl",
        40,
    ),
}
OPENCODE = (
    REPO / "tests/samples/opencode/dark-factory__jolly-eagle__ses_39b5d713cffeRgAoxPIwS3Plus.json"
)
#: base name -> the format it is read as
FORMAT_OF = {"gemini-cli-log": "gemini-cli"}


OPENHANDS = "other/openhands__trajs__basic_gui_mode.json"
SWE_AGENT = "other/swe-agent__gpt4__pydicom__pydicom-1458.traj"


def _base(name: str) -> tuple[str, object]:
    """``(file suffix, document)``: a list of records for JSON lines, else one JSON value."""
    if name == "gemini-cli":
        return ".json", GEMINI
    if name == "gemini-cli-log":
        return ".jsonl", GEMINI_LOG
    if name == "opencode":
        if not OPENCODE.is_file():
            pytest.skip(f"sample absent: {OPENCODE}")
        return ".json", json.loads(OPENCODE.read_text())
    if not CORPUS.is_dir():
        pytest.skip(f"corpus absent: no transcripts at {CORPUS}")
    if name == "openhands":
        return ".json", json.loads((CORPUS / OPENHANDS).read_text())[:10]
    if name == "swe-agent":
        doc = json.loads((CORPUS / SWE_AGENT).read_text())
        return ".json", {**doc, "history": doc["history"][:8], "trajectory": doc["trajectory"][:3]}
    if name == "openai-chat":
        doc = json.loads(
            (CORPUS / "openai-chat/mini-swe-agent__github_issue.traj.json").read_text()
        )
        return ".json", doc[:6]
    rel, keep = JSONL[name]
    lines = (CORPUS / rel).read_text().splitlines()[:keep]
    return ".jsonl", [json.loads(line) for line in lines if line.strip()]


def _write(path: Path, suffix: str, doc: object) -> None:
    if suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in doc))
    else:
        path.write_text(json.dumps(doc))


@pytest.mark.parametrize(
    "name",
    [
        "claude-code",
        "codex",
        "sharegpt",
        "openai-chat",
        "gemini-cli",
        "gemini-cli-log",
        "copilot-cli",
        "opencode",
        "openhands",
        "swe-agent",
    ],
)
def test_one_bad_field_never_crashes_an_import(name, tmp_path_factory):
    suffix, doc = _base(name)
    base_dir = tmp_path_factory.mktemp("base")
    _write(base_dir / f"t{suffix}", suffix, doc)
    # the base itself is recognised
    assert parse_file(base_dir / f"t{suffix}").format == FORMAT_OF.get(name, name)

    @settings(
        max_examples=N,
        deadline=None,
        derandomize=True,
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
        ],
    )
    @given(st.sampled_from(paths(doc)), JSON_VALUES)
    def run(path, value):
        note(f"path={path!r} value={json.dumps(value)[:300]}")
        target = tmp_path_factory.mktemp("fuzz") / f"t{suffix}"
        _write(target, suffix, replaced(doc, path, value))
        parsed = parse_file(target)
        for problem in parsed.problems:
            assert not RAW_ERROR.search(problem.reason), problem
        for session in parsed.sessions:
            for op, data in [
                ("session.create", session.session),
                (
                    "messages.append",
                    {"session_id": session.session.get("session_id"), "messages": session.messages},
                ),
            ]:
                try:
                    precheck(op, data)
                except InvalidOpError as exc:
                    assert not RAW_ERROR.search(f"{exc.reason} {exc.detail}"), exc

    run()


def test_gemini_entry_with_wrong_typed_fields_is_a_problem_of_that_entry(tmp_path):
    doc = json.loads(json.dumps(GEMINI))
    doc["messages"][1]["toolCalls"] = True
    doc["messages"][3]["content"][1]["inlineData"]["mimeType"] = {"x": 1}
    path = tmp_path / "g.json"
    path.write_text(json.dumps(doc))
    parsed = parse_file(path)
    (problem,) = parsed.problems
    assert (
        problem.kind == "skipped"
        and problem.reason == "messages[1] (gemini): toolCalls must be a list, got bool"
    )
    msgs = parsed.sessions[0].messages
    assert [m["id"] for m in msgs] == ["m1", "m4"]  # the other entries are imported
    assert msgs[1]["content"][1]["file"]["file_data"].startswith(
        "data:application/octet-stream;base64,"
    )


def test_codex_reasoning_summary_of_any_json_type_is_read_not_a_crash(tmp_path):
    from importers_helpers import codex_line, codex_user

    recs = [
        codex_line("session_meta", {"id": "cz"}),
        codex_user("q"),
        codex_line("response_item", {"type": "reasoning", "summary": True, "content": "thinking"}),
        codex_line(
            "response_item",
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "a"}],
            },
        ),
    ]
    path = tmp_path / "rollout.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    parsed = parse_file(path)
    assert parsed.format == "codex" and parsed.problems == []
    answer = parsed.sessions[0].messages[-1]
    assert answer["content"] == "a" and answer["reasoning"] == "thinking"

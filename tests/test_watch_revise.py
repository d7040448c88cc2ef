"""Live capture of records an agent writes again: the last copy wins.

Agents rewrite records after they first wrote them: Gemini CLI appends a message record again,
whole, when its tool calls run and its tokens arrive (a tool result is first ``executing``
with no output), a Gemini ``.json`` session and an opencode export are rewritten in place
as the turn grows, an Aider reply grows in its Markdown file. The watcher imports a file at
any point, so it reads records before their last copy. Each case here writes the versions
an agent writes, runs one round of the real watcher (``workers.watch.Watcher`` with the
spool import of ``ops.transfer.watch_ingest``) after each, on a real spool and SQLite
store, and compares every stored column, the sessions and the usage rows with an import of
the final files alone. ``drained``: the writer applies each round before the next (the
store holds the first copy); not drained: every round is spooled before any applies (the
later copy reaches a writer that has not applied the first yet).
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import harness
import pytest
from conftest import CORPUS
from gemini_log_helpers import MAIN, PROJECT, SID, SUB, gem, tokens
from watch_helpers import (
    gemini_json_rewrites,
    interleave,
    same_stores,
    stored_full,
    watch_config,
)

from quill import home as config
from quill.ops import logs
from quill.ops.transfer.import_spool import import_file, open_store_view
from quill.ops.transfer.watch_ingest import ingest_session
from quill.spool import Spool
from quill.workers.watch import Watcher

pytestmark = pytest.mark.corpus

SAMPLES = Path(__file__).parent / "samples"
GEMINI_JSON = (
    CORPUS / "other" / "entireio-cli__gemini-cli-session-f7633853-6663-4dbb-bbf4-6159afa29df8.json"
)
OPENCODE = SAMPLES / "opencode" / "dark-factory__jolly-eagle__ses_39b5d713cffeRgAoxPIwS3Plus.json"


def direct_import(tmp: Path, files: list[Path]) -> Path:
    """A data dir holding an import of ``files`` (their final versions) alone."""
    home = tmp / "reference"
    cfg = config.load(home)
    cfg.ensure_dirs()
    with Spool(cfg.spool_dir) as spool:
        for f in files:
            import_file(spool, f, None)
    harness.drain(home)
    return home


def capture(
    tmp: Path,
    root: Path,
    versions: list[tuple[str, Path, bytes]],
    drained: bool,
    watch: bool = True,
) -> Path:
    """A data dir whose watcher (one round after each version) followed ``root`` while the
    ``versions`` were written: ``("append", path, bytes)`` appended, ``("rewrite", path,
    bytes)`` truncated and written in place, ``("replace", path, bytes)`` renamed over it.
    The writer applies after every round (``drained``) or only at the end. ``watch`` False:
    each round is a ``quill import`` of the file written instead (a file the watcher does
    not follow)."""
    home = tmp / "capture"
    watch_config(home, [root])
    cfg = config.load(home)
    cfg.ensure_dirs()
    log = logs.configure(None, "test")
    watcher = Watcher(cfg, log, ingest_session(cfg, log))
    for how, path, data in versions:
        path.parent.mkdir(parents=True, exist_ok=True)
        if how == "append":
            with open(path, "ab") as f:
                f.write(data)
        elif how == "rewrite":
            path.write_bytes(data)
        else:
            path.with_name(".tmp").write_bytes(data)
            os.replace(path.with_name(".tmp"), path)
        if watch:
            watcher.round()
        else:
            with Spool(cfg.spool_dir) as spool:
                import_file(spool, path, open_store_view(cfg))
        if drained:
            harness.drain(home)
    harness.drain(home)
    assert not list((cfg.spool_dir / "quarantine").glob("*")), "a record was quarantined"
    return home


def _jsonl(recs: list[dict]) -> list[bytes]:
    return [(json.dumps(r) + "\n").encode() for r in recs]


@pytest.mark.parametrize("drained", [True, False], ids=["drained", "lagging"])
def test_gemini_log_re_appended_records_last_copy_wins(tmp_path, drained):
    """A Gemini CLI log and its subagent log written line by line: a tool result first
    ``executing`` with no output (stored empty before the fix), then re-appended with its
    output, a new time and status; tokens arriving in a later copy; a title set later."""
    chats = tmp_path / "agents" / PROJECT / "chats"
    main, sub = chats / f"session-2026-05-03T16-00-{SID[:8]}.jsonl", chats / SID / "sub-1.jsonl"
    steps = interleave(
        [("append", main, line) for line in _jsonl(MAIN)],
        [("append", sub, line) for line in _jsonl(SUB)],
    )
    home = capture(tmp_path, tmp_path / "agents", steps, drained)
    want = stored_full(direct_import(tmp_path, [main]))
    assert ("a\nb",) in {(r[3],) for r in want["messages"] if r[1] == "g1:run_shell_command_1"}
    same_stores(stored_full(home), want)


def test_gemini_tokens_grown_in_a_later_copy_are_counted_at_the_final_count(tmp_path):
    """A model call's record re-appended with larger token counts after the first copy was
    stored: its one usage row ends with the last copy's counts (never counted twice)."""
    chats = tmp_path / "agents" / PROJECT / "chats"
    main = chats / f"session-2026-05-03T16-00-{SID[:8]}.jsonl"
    g2 = next(i for i, r in enumerate(MAIN) if r.get("id") == "g2")
    grown = gem("g2", 7, "There are two files.", tokens=tokens(130, 21, cached=8))
    recs = [*MAIN[: g2 + 1], grown, *MAIN[g2 + 1 :]]
    home = capture(tmp_path, tmp_path / "agents", [("append", main, b) for b in _jsonl(recs)], True)
    want = stored_full(direct_import(tmp_path, [main]))
    assert (f"gemini-cli:{SID}", f"gemini-cli:{SID}:g2", 130, 21) in want["usage"]
    same_stores(stored_full(home), want)


@pytest.mark.parametrize("drained", [True, False], ids=["drained", "lagging"])
def test_gemini_json_rewritten_in_place_last_copy_wins(tmp_path, drained):
    path = tmp_path / "agents" / "chats" / "session-2026-01-15T20-51-f7633853.json"
    home = capture(tmp_path, tmp_path / "agents", gemini_json_rewrites(GEMINI_JSON, path), drained)
    same_stores(stored_full(home), stored_full(direct_import(tmp_path, [path])))


def _opencode_versions(path: Path) -> list[tuple[str, Path, bytes]]:
    """An opencode export rewritten as the session runs: each assistant message growing part
    by part, a tool part ``running`` (no output) before it completes."""
    doc = json.loads(OPENCODE.read_text())
    out = []
    for i, msg in enumerate(doc["messages"]):
        before = doc["messages"][:i]
        for k in range(1, len(msg["parts"]) + 1):
            parts = copy.deepcopy(msg["parts"][:k])
            last = parts[-1]
            if last.get("type") == "tool" and isinstance(last.get("state"), dict):
                running = copy.deepcopy(parts)
                running[-1]["state"] = {"status": "running", "input": last["state"].get("input")}
                grown = {**msg, "parts": running}
                out.append(("rewrite", path, json.dumps({**doc, "messages": [*before, grown]})))
            out.append(
                (
                    "rewrite",
                    path,
                    json.dumps({**doc, "messages": [*before, {**msg, "parts": parts}]}),
                )
            )
    return [(how, p, data.encode()) for how, p, data in out]


@pytest.mark.parametrize("drained", [True, False], ids=["drained", "lagging"])
def test_opencode_export_rewritten_as_it_grows_last_copy_wins(tmp_path, drained):
    path = tmp_path / "agents" / "opencode" / OPENCODE.name
    home = capture(tmp_path, tmp_path / "agents", _opencode_versions(path), drained)
    same_stores(stored_full(home), stored_full(direct_import(tmp_path, [path])))


def test_aider_reply_growing_in_its_history_last_copy_wins(tmp_path):
    """An Aider chat history (a hidden name in the project folder) appended a few lines at
    a time, the watcher following the project folder: a reply read while it was written is
    stored whole once the rest arrives."""
    lines = (CORPUS / "other" / "aider__chat-history.md").read_bytes().splitlines(keepends=True)
    lines = lines[:240]
    path = tmp_path / "agents" / "aider" / ".aider.chat.history.md"
    steps = [("append", path, b"".join(lines[i : i + 9])) for i in range(0, len(lines), 9)]
    home = capture(tmp_path, tmp_path / "agents", steps, drained=True)
    reference = stored_full(direct_import(tmp_path, [path]), ts=False)
    assert reference["messages"], "the reference import stored nothing"
    same_stores(stored_full(home, ts=False), reference)


def _swe_agent_versions(dst: Path) -> list[tuple[str, Path, bytes]]:
    """A SWE-agent ``.traj`` as the agent saves it after each step: the whole JSON document
    rewritten, its ``trajectory`` and ``history`` one step longer each time."""
    src = CORPUS / "other" / "swe-agent__gpt4__pydicom__pydicom-1458.traj"
    doc = json.loads(src.read_text(encoding="utf-8"))
    steps, out = len(doc["trajectory"]), []
    for n in (1, steps // 3, steps * 2 // 3, steps):
        part = copy.deepcopy(doc)
        part["trajectory"] = doc["trajectory"][:n]
        # history: the system/demo prefix plus the step pairs of the first n steps
        head = len(doc["history"]) - 2 * steps
        part["history"] = doc["history"][: max(head, 0) + 2 * n]
        out.append(("replace", dst, json.dumps(part).encode()))
    return out


def test_swe_agent_trajectory_saved_after_each_step_is_captured(tmp_path):
    """A SWE-agent ``.traj`` under a watched folder, saved whole after each step: the
    watcher follows it (before: ``.traj`` was not a watched name) and stores what an import
    of the final file stores (a ``.traj`` carries no message times: they are arrival times,
    which differ between the two stores)."""
    path = tmp_path / "agents" / "trajectories" / "u" / "run" / "pydicom-1458.traj"
    steps = _swe_agent_versions(path)
    home = capture(tmp_path, tmp_path / "agents", steps, drained=True)
    reference = stored_full(direct_import(tmp_path, [path]), ts=False)
    assert reference["messages"], "the reference import stored nothing"
    same_stores(stored_full(home, ts=False), reference)


def _slices(src: Path, dst: Path, rounds: int) -> list[tuple[str, Path, bytes]]:
    """``src`` appended to ``dst`` in about ``rounds`` slices of whole lines."""
    lines = src.read_bytes().splitlines(keepends=True)
    n = max(1, -(-len(lines) // rounds))
    return [("append", dst, b"".join(lines[i : i + n])) for i in range(0, len(lines), n)]


def _claude_resumed(dst: Path) -> list[tuple[str, Path, bytes]]:
    """A Claude Code session appended, then resumed (a rewrite renamed over the file holding
    more of it), then appended to."""
    src = sorted((CORPUS / "claude-code").glob("*.jsonl"))[2]
    lines = src.read_bytes().splitlines(keepends=True)
    half, more = len(lines) // 2, len(lines) * 3 // 4
    return [
        *[("append", dst, line) for line in lines[:half]],
        ("replace", dst, b"".join(lines[:more])),
        *[("append", dst, line) for line in lines[more:]],
    ]


APPENDED = {
    "claude-code": lambda root: _claude_resumed(root / "claude" / "proj" / "s.jsonl"),
    "codex": lambda root: _slices(
        sorted((CORPUS / "codex").glob("*.jsonl"))[0], root / "codex" / "rollout.jsonl", 15
    ),
    "copilot-cli": lambda root: _slices(
        next((CORPUS / "other").glob("agentv__copilot-cli-events-*.jsonl")),
        root / "copilot" / "session-state" / "s1" / "events.jsonl",
        15,
    ),
}


@pytest.mark.parametrize("fmt", sorted(APPENDED))
def test_appended_sessions_fill_in_what_a_first_read_lacked(tmp_path, fmt):
    """Claude Code (resumed: rewritten and renamed over), Codex and Copilot CLI files
    followed as they grow. Their records are written once each, but the watcher reads a
    session before the lines that give its model: a session read again fills what it
    lacked (before: the model stayed empty for good)."""
    steps = APPENDED[fmt](tmp_path / "agents")
    home = capture(tmp_path, tmp_path / "agents", steps, drained=True)
    same_stores(stored_full(home), stored_full(direct_import(tmp_path, [steps[-1][1]])))

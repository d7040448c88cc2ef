"""A file replaced while Quill reads it (an agent writes a new file and renames it over the
path: Claude Code rewrites a session file on resume) is read as one version, never a mix:
every read of an import comes from the one descriptor opened first (ops/importers/source.py).

The replacement is made at a fixed point between two reads (right after the format was
sniffed, or between an importer's structure and content passes), so each case is
deterministic. Versions are real corpus files (a prefix, then the whole file: the resume
rewrite), and what is expected is the parse of the opened version alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path

import pytest
from conftest import CORPUS, QuillCLI
from gemini_log_helpers import write_logs
from watch_helpers import row_diff, stored_rows, watch_config

from quill.ops.importers import parse_file, stream_file
from quill.ops.importers.events import collect

pytestmark = pytest.mark.corpus

CLAUDE = sorted((CORPUS / "claude-code").glob("*.jsonl"))
OTHER = CORPUS / "other"


def _gemini_lines(tmp: Path) -> list[bytes]:
    main, _sub = write_logs(tmp / "gemini-src")
    return main.read_bytes().splitlines(keepends=True)


#: format -> (lines of the real file, lines in the first version); the second version is
#: every line (the same prefix plus more, as a resumed session is rewritten).
CASES = {
    "claude-code": (lambda _t: CLAUDE[0].read_bytes().splitlines(keepends=True), 60),
    "codex": (
        lambda _t: (
            sorted((CORPUS / "codex").glob("*.jsonl"))[0].read_bytes().splitlines(keepends=True)
        ),
        80,
    ),
    "copilot-cli": (
        lambda _t: (
            next(OTHER.glob("agentv__copilot-cli-events-*.jsonl"))
            .read_bytes()
            .splitlines(keepends=True)
        ),
        150,
    ),
    "gemini-cli": (_gemini_lines, 6),
    "openhands": (
        lambda _t: (
            (OTHER / "openhands__multi_swe_bench__output.jsonl")
            .read_bytes()
            .splitlines(keepends=True)
        ),
        2,
    ),
    "sharegpt": (
        lambda _t: (
            (CORPUS / "sharegpt" / "hermeswith__trajectory_samples.jsonl")
            .read_bytes()
            .splitlines(keepends=True)
        ),
        5,
    ),
    "aider": (
        lambda _t: (OTHER / "aider__chat-history.md").read_bytes().splitlines(keepends=True)[:4000],
        2000,
    ),
}


def _replace(path: Path, data: bytes) -> None:
    """What an agent's atomic rewrite does: a new file renamed over the path."""
    tmp = path.with_name(f".{path.name}.new")
    tmp.write_bytes(data)
    os.replace(tmp, path)


@pytest.mark.parametrize("at", ["after-sniff", "after-first-event"])
@pytest.mark.parametrize("fmt", sorted(CASES))
def test_a_file_replaced_between_two_reads_is_read_as_the_opened_version(tmp_path, fmt, at):
    lines_of, cut = CASES[fmt]
    lines = lines_of(tmp_path)
    first, second = b"".join(lines[:cut]), b"".join(lines)
    assert first != second
    name = "session-2026-05-03T16-00-a1b2c3d4.jsonl" if fmt == "gemini-cli" else "t.jsonl"
    if fmt == "aider":
        name = ".aider.chat.history.md"
    (tmp_path / "ref").mkdir()
    ref = tmp_path / "ref" / name
    ref.write_bytes(first)
    expected = parse_file(ref)
    assert expected.format == fmt and expected.sessions

    (tmp_path / "live").mkdir()
    path = tmp_path / "live" / name
    path.write_bytes(first)
    problems: list = []
    got_fmt, events = stream_file(path, problems)
    assert got_fmt == fmt
    head = []
    if at == "after-first-event":
        head.append(next(events))
    _replace(path, second)
    got = collect([*head, *events])
    # the first version parsed alone: sessions, messages, rewinds, compactions, usage
    assert got == expected.sessions
    assert parse_file(path).sessions != expected.sessions  # the path now holds another version


def test_watcher_imports_the_opened_version_then_the_replacement_exactly_once(tmp_path, quill):
    """The watcher opens a file, and before its import reads anything the agent renames
    another session over the path. That round stores exactly the opened version and records
    its inode; the next round finds another inode, imports the new version as rewritten; both
    sessions are stored once each and a third round has nothing to do."""
    from quill.home.settings import load
    from quill.ops import logs
    from quill.ops.transfer.watch_ingest import ingest_session
    from quill.workers.watch import Watcher

    old, new = sorted(CLAUDE, key=lambda f: f.stat().st_size)[:2]  # the two smallest sessions
    root = tmp_path / "agents"
    root.mkdir()
    path = root / "session.jsonl"
    shutil.copyfile(old, path)
    old_ino = path.stat().st_ino
    watch_config(quill.home, [root])
    cfg = load(quill.home)
    cfg.ensure_dirs()
    real = ingest_session(cfg)
    swapped: list[Path] = []

    @contextlib.contextmanager
    def session():
        with real() as ingest:

            def hooked(p, *rest):
                if not swapped:  # between the watcher's open and the importer's reads
                    _replace(p, new.read_bytes())
                    swapped.append(p)
                return ingest(p, *rest)

            yield hooked

    watcher = Watcher(cfg, logs.configure(cfg.logs_dir, "watch", stderr=False), session)

    def round_() -> dict:
        counts = watcher.round()
        quill.run("run", "--until-idle", "--timeout", "120")
        return counts

    assert round_()["imported"] == 1 and swapped
    ref = QuillCLI(tmp_path / "reference")  # plain imports of the versions, one after another
    only_old = _direct(ref, old)
    assert stored_rows(quill.home) == only_old, row_diff(stored_rows(quill.home), only_old)
    saved = json.loads(cfg.watch_state.read_text())["files"][str(path)]
    assert saved[1] == old_ino  # the mark names the version read, not the one now there
    assert saved[2] == old.stat().st_size

    counts = round_()
    assert counts["imported"] == 1 and counts["rewritten"] == 1
    both = _direct(ref, new)
    assert stored_rows(quill.home) == both, row_diff(stored_rows(quill.home), both)
    assert json.loads(cfg.watch_state.read_text())["files"][str(path)][1] == path.stat().st_ino
    assert round_()["imported"] == 0
    assert stored_rows(quill.home) == both


def _direct(ref, file: Path) -> list[tuple]:
    """The rows of ``ref``'s store once a plain ``quill import`` of ``file`` is applied."""
    ref.run("import", str(file))
    ref.run("run", "--until-idle", "--timeout", "120")
    return stored_rows(ref.home)

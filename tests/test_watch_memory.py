"""A transcript line too large for the watcher's memory (a 40 MB tool result under a 200 MB
address-space limit) is that file's problem: it is kept as unreadable, with the reason, and
tried again once it changes, while every other file is imported. Before, the MemoryError
stopped the watcher at the same file on every start, and the files after it in the scan were
never imported. ``quill import`` of such a file ends with the CLI's error format and exit
code 2 (bad input), not a traceback. Real ``quill`` processes under a real ``RLIMIT_AS``."""

from __future__ import annotations

import json
import resource
import subprocess

from conftest import REPO, QuillCLI, quill_env
from test_import_record_limit import SID, _claude_lines
from watch_helpers import watch_config

LIMIT = 200 << 20  # bytes of address space: the CLI starts in about half of it


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))


def test_a_line_too_large_for_memory_does_not_stop_the_other_files(tmp_path):
    root = tmp_path / "agent"
    root.mkdir()
    big = root / "a-big.jsonl"  # scanned first
    big.write_text("".join(_claude_lines(4, big=1, big_bytes=40_000_000, each=10)))
    small_id = "0000aaaa-0000-4000-8000-00000000000a"  # another session than the big file's
    small = root / f"{small_id}.jsonl"
    small.write_text("".join(line.replace(SID, small_id) for line in _claude_lines(6, -1, 0, 10)))
    home = tmp_path / "home"
    watch_config(home, [root])
    quill = QuillCLI(home)
    proc = subprocess.run(
        quill.argv("watch", "--once", "--json"),
        env=quill_env(home),
        cwd=REPO,
        capture_output=True,
        text=True,
        preexec_fn=_limited,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["imported"] == 1
    state = json.loads((home / "watch-state.json").read_text())
    assert list(state["files"]) == [str(small)]
    assert "out of memory" in state["unreadable"][str(big)]["reason"]
    quill.drain()
    counts = {s["id"]: s["message_count"] for s in quill.json("sessions", "list")["sessions"]}
    assert counts[f"claude-code:{small_id}"] == 6


def test_quill_import_says_which_file_was_too_large_for_memory(tmp_path):
    big = tmp_path / "big.jsonl"
    big.write_text("".join(_claude_lines(4, big=1, big_bytes=40_000_000, each=10)))
    home = tmp_path / "home"
    home.mkdir()
    proc = subprocess.run(
        QuillCLI(home).argv("import", str(big)),
        env=quill_env(home),
        cwd=REPO,
        capture_output=True,
        text=True,
        preexec_fn=_limited,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert f"quill: error: {big}: out of memory" in proc.stderr
    assert "Traceback" not in proc.stderr

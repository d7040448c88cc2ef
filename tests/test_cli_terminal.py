"""The CLI on a real terminal (a pty): progress bars for long work, ids never split on a narrow
screen; and none of it when output goes to a pipe."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import time

import pytest
from conftest import CORPUS, QuillCLI, quill_env

LONG_ID = "agent-run-" + "0123456789abcdef" * 5 + "-tail"


def _on_tty(cli: QuillCLI, *args: str, columns: int = 100, timeout: float = 240) -> tuple[int, str]:
    """Run ``quill args`` with stdout and stderr on a pty of ``columns`` columns; (code, output)."""
    master, slave = pty.openpty()
    env = {**quill_env(cli.home), "COLUMNS": str(columns), "LINES": "40", "TERM": "xterm"}
    proc = subprocess.Popen(
        cli.argv(*args), stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=env
    )
    os.close(slave)
    chunks, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:  # the child closed the pty
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    os.close(master)
    return proc.wait(timeout=30), b"".join(chunks).decode("utf-8", "replace")


def _seed(quill: QuillCLI, n: int = 400) -> None:
    lines = [
        json.dumps(
            {
                "session_id": LONG_ID if i == 0 else f"s{i}",
                "messages": [{"role": "user", "content": f"needle {i} " + "x" * 2000}],
            }
        )
        for i in range(n)
    ]
    quill.run("push", input="\n".join(lines))


@pytest.mark.corpus
def test_import_shows_a_progress_bar_on_a_terminal_only(quill, home):
    folder = CORPUS / "claude-code"
    code, out = _on_tty(quill, "import", str(folder))
    assert code == 0 and "importing" in out and "━" in out, out[-2000:]
    piped = quill.run("import", str(folder))
    assert "importing" not in piped.stderr and "━" not in piped.stderr


def test_replay_and_recover_show_progress_bars_on_a_terminal(quill, home, tmp_path):
    _seed(quill)
    code, out = _on_tty(quill, "spool", "replay", "--into", str(tmp_path / "copy.db"))
    assert code == 0 and "replaying" in out and "━" in out, out[-2000:]
    code, out = _on_tty(quill, "recover")
    assert code == 0 and "replaying into the rebuilt store" in out, out[-2000:]
    piped = quill.run("recover")
    assert "replaying" not in piped.stderr
    out = tmp_path / "export.jsonl"
    code, shown = _on_tty(quill, "export", "-o", str(out))
    assert code == 0 and "exporting" in shown and "━" in shown, shown[-2000:]
    assert len(out.read_text().splitlines()) > 400
    piped = quill.run("export", "-o", str(tmp_path / "again.jsonl"))
    assert "exporting" not in piped.stderr


def test_ids_are_never_split_on_a_narrow_terminal(quill, home):
    _seed(quill, 3)
    quill.run("spool", "replay")
    for columns in (60, 100, 200):
        code, out = _on_tty(quill, "sessions", "list", columns=columns)
        lines = out.replace("\r", "").splitlines()
        assert code == 0 and any(LONG_ID in line for line in lines), (columns, out)
        code, out = _on_tty(quill, "search", "needle", columns=columns)
        lines = out.replace("\r", "").splitlines()
        assert code == 0 and any(LONG_ID in line for line in lines), (columns, out)
    code, out = _on_tty(quill, "sessions", "list", columns=200)
    assert "┃" in out  # wide enough: still a table


def test_a_list_cut_at_its_limit_says_more_match(quill, home):
    _seed(quill, 3)
    quill.run("spool", "replay")
    cut = quill.run("sessions", "list", "--limit", "2")
    assert "3 session(s)" not in cut.stdout and "more sessions match" in cut.stderr
    assert "2 session(s)" in cut.stdout
    whole = quill.run("sessions", "list", "--limit", "3")
    assert "more sessions match" not in whole.stderr and "3 session(s)" in whole.stdout
    as_json = quill.run("sessions", "list", "--limit", "2", "--json")
    assert len(json.loads(as_json.stdout)["sessions"]) == 2

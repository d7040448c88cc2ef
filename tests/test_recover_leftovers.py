"""``quill recover`` killed mid-way (``kill -9``) leaves its store-sized work file; the next
recover and ``quill doctor`` remove those of recovers no longer running, and say so.

Found by the attack helper: every ``kill -9`` of ``quill recover`` left a
``state.db.recovering-<time>`` copy (and its ``-wal``/``-shm``) for good, and the next recover
made a new one beside it: repeated tries fill the disk. The name now carries the recovering
process's pid and the time it was made (``ops.recover.leftovers``); a file whose recover is
still running is kept (a halted writer lets recover run without the writer lease, so another
may be at work). Real recovers, real ``kill -9``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from conftest import quill_env

from quill.spool import Spool

PATTERN = "state.db.recovering-*"


def _fill(home: Path, n: int = 20000) -> None:
    with Spool(home / "spool") as sp:
        for i in range(0, n, 20):
            sp.append(
                "messages.append",
                {
                    "session_id": f"s{i % 7}",
                    "messages": [
                        {"role": "user", "content": f"message {j} " + "words " * 40}
                        for j in range(i, i + 20)
                    ],
                },
            )


def _start_recover(quill, home: Path) -> tuple[subprocess.Popen, list[str]]:
    """A real ``quill recover`` process, returned once its work file exists, with its names."""
    proc = subprocess.Popen(
        quill.argv("recover"),
        env=quill_env(home),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        names = sorted(p.name for p in home.glob(PATTERN))
        if names:
            return proc, names
        assert proc.poll() is None, "recover ended before its work file was seen"
        time.sleep(0.005)
    raise AssertionError("no work file within 120 s")


def _doctor(quill) -> dict:
    return {c["check"]: c for c in quill.json("doctor", check=False)}["recover leftovers"]


def test_a_killed_recover_s_work_file_is_removed_a_running_one_kept(quill, home):
    quill.run("status")
    _fill(home)
    # A recover at work (stopped, so it stays at work): its file is kept, and said to be.
    running, names = _start_recover(quill, home)
    os.kill(running.pid, signal.SIGSTOP)
    try:
        said = _doctor(quill)
        assert "still running" in said["detail"] and names[0] in said["detail"], said
        assert (home / names[0]).exists()
    finally:
        os.kill(running.pid, signal.SIGKILL)
        running.wait()
    assert (home / names[0]).exists()  # kill -9: nothing of it ran to clean up
    # Its process gone, doctor removes the file (and any side file) and says so.
    said = _doctor(quill)
    assert said["status"] == "ok" and "removed" in said["detail"], said
    assert names[0] in said["detail"] and not list(home.glob(PATTERN))

    # Killed again mid-way: the next recover removes the copy and says so, then rebuilds.
    killed, names = _start_recover(quill, home)
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait()
    assert (home / names[0]).exists()
    proc = quill.run("recover", check=False)
    assert proc.returncode == 0, proc.stderr
    assert "removed" in proc.stderr and names[0] in proc.stderr, proc.stderr
    assert not list(home.glob(PATTERN))
    figures = quill.json("status")["store"]
    assert figures["messages"] == 20000, figures

"""The tests' CLI fork server (``cli_forkserver``) answers as a cold ``quill`` process does."""

from __future__ import annotations

import subprocess
import time

import pytest
from conftest import _FORK_SERVER, QuillCLI, quill_env

CALLS = [
    (["--version"], None),
    (["nosuchcommand"], None),  # a usage error: exit 2 and the error format on stderr
    (["push", "--session", "s", "--json"], '{"role": "user", "content": "h\\u00e9"}\n'),
    (["push", "--session", "s"], "not json"),  # refused: nothing pushed, exit 1
    (["sessions", "show", "s", "--json"], None),
    (["sessions", "show", "nosuch", "--json"], None),  # not found: exit 3
]


def _cold(quill: QuillCLI, args: list[str], input: str | None) -> subprocess.CompletedProcess:
    return subprocess.run(
        quill.argv(*args), input=input, capture_output=True, text=True, env=quill_env(quill.home)
    )


def _same_shape(text: str) -> str:
    """``text`` without what differs between two calls (batch ids, pids, times)."""
    import re

    return re.sub(r'"(batch|pid|[a-z_]*_at|[a-z_]*age[a-z_]*|[a-z_]*seconds)": [^,\n]*', "", text)


def test_forked_calls_answer_as_cold_processes(tmp_path):
    forked, cold = QuillCLI(tmp_path / "forked"), QuillCLI(tmp_path / "cold")
    assert _FORK_SERVER.usable(quill_env(forked.home))
    for args, input in CALLS:
        got = forked.run(*args, input=input, check=False)
        want = _cold(cold, args, input)
        got_out, got_err = (t.replace(str(forked.home), "HOME") for t in (got.stdout, got.stderr))
        want_out, want_err = (t.replace(str(cold.home), "HOME") for t in (want.stdout, want.stderr))
        assert got.returncode == want.returncode, args
        assert _same_shape(got_out) == _same_shape(want_out), args
        assert got_err == want_err, args
    assert forked.run("--version").returncode == 0


def test_a_call_that_outlives_its_timeout_is_killed(tmp_path):
    quill = QuillCLI(tmp_path / "h")
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        quill.run("run", timeout=5)  # a fleet runs until stopped
    assert time.monotonic() - started < 120
    from quill.home import RunDir

    rd = RunDir(quill.home.resolve())
    deadline = time.monotonic() + 30
    while rd.fleet_running() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not rd.fleet_running()  # the supervisor was killed; its lease is free again

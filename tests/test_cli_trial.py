"""Defects a trial user found in the CLI (issue 13), one test per kind of mistake: a command
that did nothing must say so with the shared not-found / usage exit code, a prompt is never
skipped silently, messages say what each figure is."""
from __future__ import annotations

import json
import os
import pty
import subprocess
import time

import pytest

from conftest import QuillCLI, quill_env


def _seed(quill: QuillCLI) -> None:
    ops = [{"op": "session.create", "data": {"session_id": "a", "key": "chat:1"}},
           {"op": "messages.append", "data": {"session_id": "a", "messages": [{"role": "user", "content": "one"}]}},
           {"op": "session.create", "data": {"session_id": "b"}}]
    quill.run("push", input="\n".join(json.dumps(o) for o in ops))
    quill.run("run", "--until-idle", "--timeout", "60")


def _answer_on_tty(cli: QuillCLI, answer: bytes, *args: str) -> tuple[int, str]:
    """Run ``quill args`` on a pty, type ``answer`` at the prompt; (exit code, output)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(cli.argv(*args), stdin=slave, stdout=slave, stderr=slave, env=quill_env(cli.home))
    os.close(slave)
    out = b""
    deadline = time.monotonic() + 120
    while b"?" not in out and time.monotonic() < deadline and proc.poll() is None:
        out += os.read(master, 4096)
    os.write(master, answer)
    code = proc.wait(timeout=120)
    try:
        while chunk := os.read(master, 4096):
            out += chunk
    except OSError:
        pass
    os.close(master)
    return code, out.decode("utf-8", "replace")


def test_delete_of_an_unknown_session_is_not_found_and_deletes_nothing(quill):
    _seed(quill)
    for args in (("nosuch",), ("b", "nosuch")):
        proc = quill.run("sessions", "delete", *args, "--yes", check=False)
        assert proc.returncode == 3 and "nosuch" in proc.stderr and "quill: hint:" in proc.stderr
        error = json.loads(quill.run("sessions", "delete", *args, "--yes", "--json", check=False).stdout)["error"]
        assert error["kind"] == "not_found" and error["exit_code"] == 3
    quill.run("run", "--until-idle", "--timeout", "60")
    assert {s["id"] for s in quill.json("sessions", "list", "--all")} == {"a", "b"}


def test_delete_without_ids_says_what_to_give(quill):
    proc = quill.run("sessions", "delete", "--yes", check=False)
    assert proc.returncode == 2 and "give the session ids to delete, or --key" in proc.stderr
    both = quill.run("sessions", "delete", "a", "--key", "k", "--yes", check=False)
    assert both.returncode == 2 and "not both" in both.stderr


def test_delete_never_skips_the_prompt_silently(quill):
    """--json or a stdin that is not a terminal cannot answer a prompt: --yes is required."""
    _seed(quill)
    as_json = quill.run("sessions", "delete", "b", "--json", check=False)
    assert as_json.returncode == 2 and "--yes" in json.loads(as_json.stdout)["error"]["hint"]
    piped = quill.run("sessions", "delete", "b", check=False, input="y\n")
    assert piped.returncode == 2 and "stdin is not a terminal" in piped.stderr and "--yes" in piped.stderr
    quill.run("run", "--until-idle", "--timeout", "60")
    assert {s["id"] for s in quill.json("sessions", "list", "--all")} == {"a", "b"}


def test_declining_the_prompt_is_a_clean_abort_with_its_own_exit_code(quill):
    _seed(quill)
    code, out = _answer_on_tty(quill, b"n\n", "sessions", "delete", "b")
    assert code == 7 and "quill: error: aborted: nothing was changed" in out and "Traceback" not in out, out
    code, out = _answer_on_tty(quill, b"y\n", "sessions", "delete", "b")
    assert code == 0 and "spooled" in out, out
    quill.run("run", "--until-idle", "--timeout", "60")
    assert [s["id"] for s in quill.json("sessions", "list", "--all")] == ["a"]


def test_export_of_an_unknown_key_is_not_found(quill, tmp_path):
    proc = quill.run("export", "--key", "nokey", check=False)  # no store yet
    assert proc.returncode == 3 and "nokey" in proc.stderr
    _seed(quill)
    proc = quill.run("export", "--key", "nokey", check=False)
    assert proc.returncode == 3 and "no session has key 'nokey'" in proc.stderr and "quill: hint:" in proc.stderr
    assert quill.run("export", "--key", "chat:1").stdout.count("\n") >= 2

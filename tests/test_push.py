"""`quill push`: refuse what can never be applied before acknowledging it; with --wait, tell
applied from quarantined; on a timeout still print the acks so a producer can retry."""

from __future__ import annotations

import json

from quill.spool import START, SpoolReader


def _spooled(home) -> int:
    return (
        len(list(SpoolReader(home / "spool").read(START, max_bytes=1 << 30)))
        if (home / "spool").exists()
        else 0
    )


def test_a_batch_with_an_invalid_message_is_refused_before_the_ack(quill, home):
    proc = quill.run(
        "push",
        "--session",
        "m",
        check=False,
        input='{"role":"user","content":"good"}\n{"role":"wizard","content":"bad"}',
    )
    assert proc.returncode == 2 and "invalid-role" in proc.stderr and "message 1" in proc.stderr
    assert "nothing was pushed" in proc.stderr and _spooled(home) == 0


def test_values_no_column_can_hold_are_refused(quill, home):
    for data in (
        '{"session_id":"p","started_at":1' + "0" * 400 + "}",
        '{"session_id": 5}',
        '{"session_id":"p","messages":"not a list"}',
    ):
        op = "messages.append" if "messages" in data else "session.create"
        proc = quill.run("push", check=False, input=f'{{"op":"{op}","data":{data}}}')
        assert proc.returncode == 2, data
    assert _spooled(home) == 0


def test_wait_reports_quarantined_batches_and_exits_1(quill, home, writer):
    quill.run(
        "push", "--session", "w", "--wait", "30", input='{"role":"user","content":"one turn"}'
    )
    out = quill.run(
        "push",
        "--wait",
        "30",
        "--json",
        check=False,
        input='{"op":"messages.rewind","data":{"session_id":"w","user_turn":7}}',
    )
    assert out.returncode == 1
    [result] = json.loads(out.stdout)
    assert result["outcome"] == "quarantined" and result["reason"] == "no-such-turn"
    ok = quill.json(
        "push",
        "--wait",
        "30",
        input='{"op":"messages.rewind","data":{"session_id":"w","user_turn":1}}',
    )
    assert ok[0]["outcome"] == "applied"


def test_wait_timeout_still_prints_the_acks(quill, home):
    out = quill.run(
        "push",
        "--session",
        "t",
        "--wait",
        "0.5",
        "--json",
        check=False,
        input='{"role":"user","content":"x","id":"m1"}',
    )
    assert out.returncode == 4
    [ack] = json.loads(out.stdout)
    assert ack["outcome"] == "pending" and ack["batch"] and ack["position"] == "1:0"
    # the one error format on stderr: what ran out, and that the records are durable
    assert out.stderr.startswith("quill: error: ") and "quill: hint: " in out.stderr
    # retrying with the same batch id is safe: it is applied once
    retry = json.dumps(
        {
            "op": "messages.append",
            "batch": ack["batch"],
            "data": {"session_id": "t", "messages": [{"role": "user", "content": "x", "id": "m1"}]},
        }
    )
    quill.run("push", input=retry)
    quill.drain()
    assert [s["message_count"] for s in quill.json("sessions", "list")["sessions"]] == [1]


def test_a_role_or_part_type_of_the_wrong_json_type_is_a_clear_refusal(quill, home):
    # An object or list where a string is expected is unhashable: a set-membership check on it
    # raised TypeError (a traceback) instead of the op rule's error.
    for msg in (
        '{"role":{"a":1},"content":"x"}',
        '{"role":["user"],"content":"x"}',
        '[{"content":"x"}]',
    ):
        proc = quill.run("push", "--session", "m", "--json", check=False, input=msg)
        error = json.loads(proc.stdout)["error"]
        assert proc.returncode == 2 and "invalid-role" in error["message"], msg
        assert "Traceback" not in proc.stderr and "None" not in error["message"]
    proc = quill.run("push", "--session", "m", "--json", check=False, input='{"content":"x"}')
    error = json.loads(proc.stdout)["error"]
    assert (
        proc.returncode == 2
        and 'needs a "role"' in error["message"]
        and '{"content": "x"}' in error["message"]
    )
    proc = quill.run(
        "push",
        "--session",
        "m",
        check=False,
        input='{"role":"user","content":[{"type":{"x":1},"text":"hi"},'
        '{"type":"text","text":"ok"}]}',
    )
    assert proc.returncode == 0 and _spooled(home) == 1


def test_malformed_json_names_the_line_and_column_and_gives_a_hint(quill, home):
    proc = quill.run("push", "--session", "m", "--json", check=False, input='{"role":"user"}\n{bad')
    error = json.loads(proc.stdout)["error"]
    assert proc.returncode == 2 and "<stdin>:2" in error["message"] and "column" in error["message"]
    assert error["hint"] and _spooled(home) == 0


def test_ctrl_c_during_wait_says_interrupted_and_exits_130_without_a_traceback(quill, home):
    """Ctrl-C on `quill push --wait` (no fleet, so it waits): the same one line and exit code
    130 as every click command, not a Python traceback; the batch stays spooled."""
    import signal
    import subprocess
    import time

    from conftest import REPO, quill_env

    proc = subprocess.Popen(
        quill.argv("push", "--session", "ci", "--wait", "60"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=quill_env(home),
        cwd=REPO,
    )
    proc.stdin.write('{"role":"user","content":"interrupted wait"}\n')
    proc.stdin.close()
    deadline = time.monotonic() + 60
    while _spooled(home) == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)  # now inside the wait
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=30)
    err = proc.stderr.read()
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "quill: interrupted" in err
    assert _spooled(home) == 1


def test_a_push_to_a_running_fleet_has_no_note(quill, home, fleet):
    line = '{"role":"user","content":"x"}'
    quill.wait_idle()
    assert "no fleet is running" not in quill.run("push", "--session", "f", input=line).stderr


def test_a_push_with_no_fleet_notes_that_quill_run_applies_it(quill, home):
    """A new user pushed with no fleet running and read the bare ack as "stored": nothing
    applies it until `quill run`. A note on stderr says so (stdout stays the acks)."""
    proc = quill.run("push", "--session", "n", "--json", input='{"role":"user","content":"x"}')
    assert json.loads(proc.stdout)[0]["position"] == "1:0"
    assert "no fleet is running on this data dir: `quill run` applies" in proc.stderr


def test_tool_calls_that_are_not_calls_are_refused_before_the_ack(quill, home):
    """A ``tool_calls`` value Quill cannot read as calls (text that is not JSON, a list of
    numbers) is refused with its field named, not acknowledged and then stored as none."""
    for calls in ('"notalist"', "[1, 2]"):
        proc = quill.run(
            "push",
            "--session",
            "m",
            check=False,
            input='{"role":"user","content":"good"}\n'
            f'{{"role":"assistant","content":"x","tool_calls":{calls}}}',
        )
        assert proc.returncode == 2 and "invalid-field" in proc.stderr, proc.stderr
        assert "tool_calls" in proc.stderr and "message 1" in proc.stderr
        assert "nothing was pushed" in proc.stderr and _spooled(home) == 0

"""What every `quill` command shares: one --json option, one error format (usage errors too),
one exit-code table, ranged numbers, --version, output never hard-wrapped off a terminal.

The structural tests walk the whole command tree, so a command added later is checked too.
"""

from __future__ import annotations

import json
import tomllib

import click
import pytest
from conftest import REPO

#: Commands without --json, and why.
NO_JSON = {
    "quill run": "runs the fleet in the foreground; its output is the log",
    "quill sessions export": "prints Quill op JSON lines always",
    "quill export": "writes the chosen --format (quill, openai and sharegpt are JSON lines)",
}


def _leaves() -> dict[str, click.Command]:
    from quill.ops.cli import cli

    out: dict[str, click.Command] = {}

    def walk(cmd: click.Command, path: str) -> None:
        if isinstance(cmd, click.Group):
            ctx = click.Context(cmd, info_name=path.rsplit(" ", 1)[-1])
            for name in cmd.list_commands(ctx):
                walk(cmd.get_command(ctx, name), f"{path} {name}")
        else:
            out[path] = cmd

    walk(cli, "quill")
    return out


def test_every_command_takes_the_one_json_option():
    from quill.ops.cli.base import json_option

    @json_option
    def probe(as_json: bool) -> None: ...

    shared = click.command()(probe).params[0]
    leaves = _leaves()
    assert len(leaves) >= 20
    missing = []
    for path, cmd in leaves.items():
        opts = [p for p in cmd.params if "--json" in getattr(p, "opts", [])]
        if path in NO_JSON:
            assert not opts, f"{path} now has --json: drop it from NO_JSON"
            continue
        if not opts or opts[0].name != "as_json" or opts[0].help != shared.help:
            missing.append(path)
    assert not missing, f"commands without the shared --json option: {missing}"


def test_no_number_option_accepts_any_number():
    """Every numeric option has a range, so `--latest -1` is a usage error, never a traceback
    or a silent misuse."""
    unbounded = []
    for path, cmd in _leaves().items():
        for p in cmd.params:
            if p.type in (click.INT, click.FLOAT):
                unbounded.append(f"{path} {p.opts[0]}")
            elif isinstance(p.type, click.types._NumberRangeBase) and p.type.min is None:
                unbounded.append(f"{path} {p.opts[0]}")
    assert not unbounded, f"numbers without a range: {unbounded}"


BAD_NUMBERS = [
    ("sessions", "show", "x", "--latest", "-1"),
    ("sessions", "show", "x", "--latest", "abc"),
    ("sessions", "list", "--limit", "0"),
    ("sessions", "list", "--since", "inf"),
    ("search", "q", "--limit", "-5"),
    ("search", "q", "--since", "nan"),
    ("search", "q", "--until", "yesterday-ish"),
    ("jobs", "history", "--limit", "-1"),
    ("jobs", "run", "snapshot", "--wait", "-2"),
    ("push", "--wait", "-1"),
    ("run", "--until-idle", "--timeout", "-1"),
    ("spool", "replay", "--from", "-1:0"),
    ("spool", "replay", "--from", "1:x"),
    ("schedule", "add", "snapshot", "--every", "-5m"),
    ("schedule", "add", "snapshot", "--cron", "99 * * * *"),
]


@pytest.mark.parametrize("args", BAD_NUMBERS, ids=" ".join)
def test_bad_numbers_are_usage_errors_in_the_one_format(quill, home, args):
    human = quill.run(*args, check=False, input="")
    assert human.returncode == 2, human.stderr
    assert human.stderr.startswith("quill: error: ") and "Traceback" not in human.stderr
    assert "quill: hint: " in human.stderr
    as_json = quill.run(*args, "--json", check=False, input="")
    assert as_json.returncode == 2
    error = json.loads(as_json.stdout)["error"]
    assert (
        error["kind"] == "usage" and error["exit_code"] == 2 and error["message"] and error["hint"]
    )
    assert not (home / "spool").exists() or not any((home / "spool").glob("*.jsonl"))


@pytest.mark.parametrize(
    "args", [("nosuch",), ("sessions", "show"), ("search", "q", "--bogus")], ids=" ".join
)
def test_parse_errors_follow_the_format_too(quill, args):
    proc = quill.run(*args, "--json", check=False)
    assert proc.returncode == 2
    assert json.loads(proc.stdout)["error"]["kind"] == "usage"


@pytest.mark.parametrize(
    "args",
    [("sessions", "show", "nope"), ("schedule", "pause", "nope"), ("schedule", "resume", "nope")],
    ids=" ".join,
)
def test_not_found_is_exit_3_in_both_formats(quill, args):
    human = quill.run(*args, check=False)
    assert human.returncode == 3 and human.stderr.startswith("quill: error: no ")
    error = json.loads(quill.run(*args, "--json", check=False).stdout)["error"]
    assert error == {**error, "kind": "not_found", "exit_code": 3}


def test_refused_input_is_a_usage_error_and_nothing_is_pushed(quill, home):
    proc = quill.run(
        "push", "--session", "s", "--json", check=False, input='{"role":"wizard","content":"x"}'
    )
    assert proc.returncode == 2
    error = json.loads(proc.stdout)["error"]
    assert "invalid-role" in error["message"] and "nothing was pushed" in error["message"]


def test_version_matches_the_package():
    import quill

    with open(REPO / "pyproject.toml", "rb") as f:
        version = tomllib.load(f)["project"]["version"]
    assert quill.__version__ == version


def test_version_option(quill):
    import quill as pkg

    assert quill.run("--version").stdout.strip() == f"quill {pkg.__version__}"


def test_jobs_list_json_has_json_values(quill):
    doc = quill.json("jobs", "list")
    rows = doc["jobs"]
    assert doc["next"] is None  # every job on one page by default
    by_name = {r["name"]: r for r in rows}
    assert by_name["wal_checkpoint"]["default"] == {"trigger": "interval", "minutes": 5}
    assert by_name["fts_rebuild"]["default"] is None
    for r in rows:
        assert r["default"] is None or isinstance(r["default"], dict)


def test_schedule_add_of_a_default_job_says_it_replaces_the_default(quill):
    proc = quill.run("schedule", "add", "snapshot", "--every", "2h")
    assert "replaces the default schedule of snapshot" in proc.stderr
    result = quill.json("schedule", "add", "snapshot", "--every", "3h")
    assert result["replaces_default"] is True and result["replaced"] == "every 2 hours"
    other = quill.run("schedule", "add", "snapshot", "--every", "1d", "--id", "daily-snapshot")
    assert "replaces" not in other.stderr


LONG_ID = "session-" + "x" * 150 + "-end"
LONG_TEXT = "word " * 80 + "tail-marker"


def test_output_is_never_hard_wrapped_when_piped(quill, home):
    ops = [
        {
            "op": "session.create",
            "data": {"session_id": LONG_ID, "source": "cli", "title": "t " * 60},
        },
        {"session_id": LONG_ID, "messages": [{"role": "user", "content": LONG_TEXT}]},
    ]
    quill.run("push", input="\n".join(json.dumps(o) for o in ops))
    quill.run("spool", "replay")
    listing = quill.run("sessions", "list").stdout
    assert any(LONG_ID in line for line in listing.splitlines()), listing
    shown = quill.run("sessions", "show", LONG_ID).stdout
    assert any(LONG_ID in line for line in shown.splitlines())
    assert any(LONG_TEXT in line for line in shown.splitlines()), shown
    hits = quill.run("search", "tail-marker").stdout
    assert any(LONG_ID in line for line in hits.splitlines()), hits
    status = quill.run("status").stdout
    assert any(str(home) in line for line in status.splitlines())
    help_lines = quill.run("-h").stdout.splitlines()
    assert any("Check SQLite version" in line and "spool lag" in line for line in help_lines)


#: What `quill push` must never import (bench/cli.py measures the process; these dominate it).
HEAVY = (
    "sqlalchemy",
    "apscheduler",
    "rich",
    "psutil",
    "huey",
    "structlog",
    "quill.store.read.reader",
    "quill.store.apply.chunk",
    "quill.store.sqlite.connection",
    "quill.store.sqlite.indexer",
    "quill.workers",
    "quill.jobs",
    "importlib.metadata",
    "tomllib",
    "socket",
)


def _modules_loaded_by(home, argv: list[str], stdin: str = "") -> tuple[list[str], str]:
    """The modules a `quill ARGV` process had imported when it exited, and its stdout."""
    import subprocess
    import sys

    from conftest import quill_env

    code = (
        "import atexit, sys, json\n"
        "atexit.register(lambda: print(json.dumps(sorted(sys.modules)), file=sys.stderr))\n"
        f"sys.argv = ['quill', *{argv!r}]\n"
        "from quill.ops.cli import main\nmain()\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        input=stdin,
        capture_output=True,
        text=True,
        env=quill_env(home),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stderr.strip().splitlines()[-1]), proc.stdout


def test_version_is_answered_without_building_the_command_tree(home):
    import quill as pkg

    loaded, out = _modules_loaded_by(home, ["--version"])
    assert out.strip() == f"quill {pkg.__version__}"
    assert not [
        m
        for m in loaded
        if m == "click" or m.startswith(("click.", "quill.ops.cli.root", "quill.store"))
    ]


def test_push_imports_only_the_producer_side(home):
    loaded, _ = _modules_loaded_by(
        home, ["push", "--session", "s"], '{"role": "user", "content": "hi"}'
    )
    heavy = sorted(
        m for m in loaded for h in (*HEAVY, *FAST_PUSH_SKIPS) if m == h or m.startswith(h + ".")
    )
    assert not heavy, f"quill push imported {heavy}"
    assert "quill.ops.cli.push_fast" in loaded and "quill.store.apply.precheck" in loaded


#: The common `quill push` argv skips these too (ops/cli/push_fast.py; bench/RESULTS.md has the
#: cost).
FAST_PUSH_SKIPS = ("click", "msgspec", "dataclasses", "uuid", "hashlib", "shutil")


def _normalised(proc) -> tuple[int, str, str]:
    import re

    ids = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|\b\d+:\d+\b")
    return proc.returncode, ids.sub("X", proc.stdout), ids.sub("X", proc.stderr)


PUSH_CASES = [
    (("push", "--session", "s"), '{"role": "user", "content": "hi"}'),
    (
        ("push", "--session=s", "--json"),
        '{"role": "user", "content": "hi"}\n{"role": "assistant", "content": "yo"}',
    ),
    (("push", "--json"), '{"session_id": "s2", "messages": [{"role": "user", "content": "x"}]}'),
    (("push", "--session", "s"), '{"role": "wizard", "content": "x"}'),
    (("push", "--json"), "[]"),
    (("push",), "   "),
    (("push", "--json"), "{not json"),
    (("push", "--session", "b", "--json"), '{"op": "session.create", "data": {"session_id": "a"}}'),
    (("push", "--session", "s", "--wait", "0"), '{"role": "user", "content": "hi"}'),
]


@pytest.mark.parametrize("args,stdin", PUSH_CASES, ids=[" ".join(a) for a, _ in PUSH_CASES])
def test_push_fast_path_and_click_path_print_the_same(tmp_path, args, stdin):
    """`quill push` with a common argv runs without click (ops/cli/push_fast.py); the click command
    must behave identically: same exit code, stdout and stderr (ids and positions aside)."""
    import subprocess
    import sys

    from conftest import quill_env

    via_click = (
        "from quill.ops.cli import cli; from quill.ops.cli.base import run; import sys; "
        "sys.exit(run(cli))"
    )
    out = []
    for code in ("from quill.ops.cli import main; main()", via_click):
        home = tmp_path / str(len(out))
        out.append(
            _normalised(
                subprocess.run(
                    [sys.executable, "-c", code, *args],
                    input=stdin,
                    capture_output=True,
                    text=True,
                    env=quill_env(home),
                    timeout=120,
                )
            )
        )
    assert out[0] == out[1]
    assert "Traceback" not in out[0][2]


def test_push_of_nothing_is_refused_and_says_so(quill, home):
    for stdin in ("[]", "[]\n[]"):
        proc = quill.run("push", "--session", "s", check=False, input=stdin)
        assert proc.returncode == 2 and "nothing was pushed" in proc.stderr, proc.stderr
    assert not any((home / "spool").glob("*.jsonl"))


def test_push_session_option_is_never_ignored(quill):
    """--session fills in a full op's missing session id and refuses one naming another."""
    proc = quill.run(
        "push",
        "--session",
        "b",
        check=False,
        input='{"op": "session.create", "data": {"session_id": "a"}}',
    )
    assert proc.returncode == 2 and "--session is 'b'" in proc.stderr
    proc = quill.run(
        "push",
        "--session",
        "b",
        check=False,
        input='{"session_id": "a", "messages": [{"role": "user", "content": "x"}]}',
    )
    assert proc.returncode == 2 and "--session is 'b'" in proc.stderr
    quill.run("push", "--session", "c", input='{"op": "session.create", "data": {"source": "cli"}}')
    quill.drain()
    assert quill.json("sessions", "show", "c")["session"]["id"] == "c"

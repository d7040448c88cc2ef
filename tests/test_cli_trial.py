"""CLI mistakes a user makes, one test per kind of mistake: a command
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
    ops = [
        {"op": "session.create", "data": {"session_id": "a", "key": "chat:1"}},
        {
            "op": "messages.append",
            "data": {"session_id": "a", "messages": [{"role": "user", "content": "one"}]},
        },
        {"op": "session.create", "data": {"session_id": "b"}},
    ]
    quill.run("push", input="\n".join(json.dumps(o) for o in ops))
    quill.drain()


def _answer_on_tty(cli: QuillCLI, answer: bytes, *args: str) -> tuple[int, str]:
    """Run ``quill args`` on a pty, type ``answer`` at the prompt; (exit code, output)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        cli.argv(*args), stdin=slave, stdout=slave, stderr=slave, env=quill_env(cli.home)
    )
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
        error = json.loads(
            quill.run("sessions", "delete", *args, "--yes", "--json", check=False).stdout
        )["error"]
        assert error["kind"] == "not_found" and error["exit_code"] == 3
    quill.drain()
    assert {s["id"] for s in quill.json("sessions", "list", "--all")["sessions"]} == {"a", "b"}


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
    assert (
        piped.returncode == 2
        and "stdin is not a terminal" in piped.stderr
        and "--yes" in piped.stderr
    )
    quill.drain()
    assert {s["id"] for s in quill.json("sessions", "list", "--all")["sessions"]} == {"a", "b"}


def test_declining_the_prompt_is_a_clean_abort_with_its_own_exit_code(quill):
    _seed(quill)
    code, out = _answer_on_tty(quill, b"n\n", "sessions", "delete", "b")
    assert (
        code == 7 and "quill: error: aborted: nothing was changed" in out and "Traceback" not in out
    ), out
    code, out = _answer_on_tty(quill, b"y\n", "sessions", "delete", "b")
    assert code == 0 and "spooled" in out, out
    quill.drain()
    assert [s["id"] for s in quill.json("sessions", "list", "--all")["sessions"]] == ["a"]


def test_export_of_an_unknown_key_is_not_found(quill, tmp_path):
    proc = quill.run("export", "--key", "nokey", check=False)  # no store yet
    assert proc.returncode == 3 and "nokey" in proc.stderr
    _seed(quill)
    proc = quill.run("export", "--key", "nokey", check=False)
    assert (
        proc.returncode == 3
        and "no session has key 'nokey'" in proc.stderr
        and "quill: hint:" in proc.stderr
    )
    assert quill.run("export", "--key", "chat:1").stdout.count("\n") >= 2


def _tour() -> list[str]:
    """The shell lines of README's "A short tour" block (comments and continuations dropped)."""
    from conftest import REPO

    readme = (REPO / "README.md").read_text()
    block = readme.split("## A short tour", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    lines = [line.split("  #", 1)[0].strip() for line in block.splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


@pytest.mark.corpus
def test_readme_tour_commands_are_true_on_the_corpus(quill, home, fleet):
    """Every command of README's tour, run as the README says (a fleet running), against the
    shared corpus exits 0; the search example finds something (a README query that finds
    nothing misleads the first user)."""
    import shlex

    from conftest import CORPUS

    lines = _tour()
    assert any(line.startswith("quill search") for line in lines) and len(lines) >= 10
    ran = 0
    for line in lines:
        stdin = None
        if " | quill " in line:
            echo, line = line.split(" | ", 1)
            stdin = shlex.split(echo)[1] + "\n"
        argv = shlex.split(line.replace("../shared/corpus", str(CORPUS)))[1:]
        # an output file the README names relative to the user's cwd goes into the test's tmp dir
        argv = [
            str(home.parent / a) if i and argv[i - 1] in ("-o", "--output") else a
            for i, a in enumerate(argv)
        ]
        if (
            argv[0] == "push"
        ):  # a generous wait: the fleet may still be starting on a loaded machine
            argv = [a for a in argv if a != "--wait" and not a.isdigit()] + ["--wait", "120"]
        if argv[0] == "sessions" and argv[1] == "delete":
            continue  # run last, below: it would remove what later lines read
        if argv[0] == "watch":  # the running fleet follows the folders itself (README)
            assert quill.status()["watch"]["enabled"] is not None
            continue
        if argv[0] == "import":
            quill.run(
                *argv, check=False
            )  # exit 1: the corpus holds files of unknown formats (the README says so)
            # the writer applies in spool order: once this marker is applied, so is the import
            quill.run(
                "push",
                "--session",
                "marker",
                "--wait",
                "300",
                input='{"role": "user", "content": "."}',
            )
            continue
        proc = quill.run(*[a for a in argv if a != "[--adopt]"], input=stdin, check=False)
        assert proc.returncode == 0, f"README: {line}\n{proc.stdout[-500:]}\n{proc.stderr[-1000:]}"
        if argv[0] == "search":
            assert quill.json(*argv), f"README's example {line!r} finds nothing in the corpus"
        ran += 1
    assert (home.parent / "all.jsonl").stat().st_size > 0  # the export line wrote its file there
    delete = next(
        shlex.split(line)[1:] for line in lines if line.startswith("quill sessions delete")
    )
    assert quill.run(*delete).returncode == 0
    assert ran >= 9


def test_a_query_of_only_operator_words_searches_for_them(quill):
    """`quill search AND` used to drop the lone operator and find nothing, silently."""
    from quill.store.search.plan import plan

    for q in ("AND", "OR", "OR OR", "NOT"):
        assert plan(q).kind == "fts" and plan(q).terms == [q.split()[0].lower()]
    assert plan("foo AND").terms == ["foo"]  # a dangling operator next to a term is still dropped
    quill.run(
        "push", "--session", "s", input='{"role": "user", "content": "salt and pepper, or not"}'
    )
    quill.drain()
    for q in ("AND", "OR", "NOT"):
        assert len(quill.json("search", q)["hits"]) == 1, q


def test_export_then_import_keeps_an_implicit_sessions_start(quill, tmp_path):
    """A session made by its first messages (no session.create: a placeholder) kept its
    messages but got the re-import's time as started_at."""
    quill.run("push", "--session", "implicit", input='{"role": "user", "content": "hello"}')
    quill.drain()
    before = quill.json("sessions", "show", "implicit")["session"]
    exported = tmp_path / "all.jsonl"
    quill.run("export", "-o", str(exported))
    time.sleep(
        1.1
    )  # a re-import a second later would otherwise stamp a start equal within rounding
    other = QuillCLI(tmp_path / "other")
    other.run("import", str(exported))
    other.drain()
    after = other.json("sessions", "show", "implicit")["session"]
    assert (
        after["started_at"] == before["started_at"]
        and after["placeholder"] == before["placeholder"]
    )


def test_import_summary_says_what_each_count_is_and_names_skipped_md_files(quill, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "notes.md").write_text("# not a transcript\n")
    (folder / "chat.json").write_text(
        json.dumps(
            {
                "messages": [
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": "yo"},
                ]
            }
        )
    )
    first = quill.run("import", str(folder))
    assert "2 message(s) read: 2 new, 0 already stored" in first.stdout, first.stdout
    assert "skipped 1 .md file(s)" in first.stderr and "notes.md" in first.stderr
    quill.drain()
    again = quill.run("import", str(folder))
    assert "2 message(s) read: 0 new, 2 already stored" in again.stdout, again.stdout
    entry = json.loads(quill.run("import", str(folder), "--json").stdout)[0]
    assert entry["new_from_compactions"] == 0 and entry["already_stored"] == 2


def test_replay_while_a_fleet_runs_says_who_and_what_to_do(quill, fleet):
    deadline = time.monotonic() + 60
    while True:  # the fleet takes the writer lease shortly after it starts
        proc = quill.run("spool", "replay", check=False)
        if proc.returncode != 0 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert proc.returncode == 1, proc.stderr
    assert (
        "cannot replay into the live store: pid " in proc.stderr
        and "quill: hint: stop `quill run`" in proc.stderr
    )
    assert "{" not in proc.stderr  # no raw lease record
    again = quill.run("run", "--until-idle", check=False)
    assert again.returncode == 1 and "quill: hint:" in again.stderr and "{" not in again.stderr


def test_cosmetics_no_empty_title_no_one_hours_no_other_store_jobs(quill):
    quill.run("push", "--session", "s", input='{"role": "user", "content": "x"}')
    run = quill.run("run", "--until-idle", "--timeout", "60")
    assert "the default data dir" not in run.stderr  # QUILL_HOME is set here
    shown = quill.run("sessions", "show", "s").stdout
    assert "title=" not in shown
    quill.run(
        "push", input='{"op": "session.title", "data": {"session_id": "s", "title": "Fix it"}}'
    )
    quill.drain()
    assert "title=“Fix it”" in quill.run("sessions", "show", "s").stdout
    listed = quill.run("jobs", "list").stdout
    assert "every 1 hours" not in listed and "every 1 days" not in listed
    names = {j["name"] for j in quill.json("jobs", "list")["jobs"]}
    assert names and not any(n.startswith("pg_") for n in names)


def test_run_on_the_default_data_dir_says_so(tmp_path):
    env = {**quill_env(tmp_path / "unused"), "XDG_DATA_HOME": str(tmp_path / "xdg")}
    env.pop("QUILL_HOME")
    proc = subprocess.run(
        QuillCLI(tmp_path).argv("run", "--until-idle", "--timeout", "60"),
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert f"fleet on {tmp_path / 'xdg' / 'quill'} (the default data dir" in proc.stderr


def test_reasoning_shows_folded_in_the_text_view(quill):
    long = "step " * 200 + "kangaroo"
    msgs = [
        {"role": "user", "content": "which route?"},
        {"role": "assistant", "content": None, "reasoning": "weigh the\nshort route"},
        {"role": "assistant", "content": "done", "reasoning": long},
    ]
    quill.run("push", "--session", "r", input="\n".join(json.dumps(m) for m in msgs))
    quill.drain()
    shown = quill.run("sessions", "show", "r").stdout
    assert "reasoning: weigh the short route" in shown  # one line: folded, not an empty card
    assert f"… ({len(long)} chars)" in shown and "kangaroo" not in shown  # cut to a glimpse
    audit = quill.json("sessions", "show", "r", "--view", "audit")
    assert audit["messages"][2]["reasoning"] == long  # --json carries it whole

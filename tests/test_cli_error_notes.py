"""The one error format carries an error's notes (``BaseException.add_note``: what else
happened, what to do next): ``quill: note: …`` lines between the error and its hint, and
``notes`` in ``--json``. An error the CLI classifies (``from_exception``: a lower layer's
error becomes a public one) or wraps (``raise click.ClickException(...) from exc``) keeps the
notes of the error it came from and of its causes."""

from __future__ import annotations

import json
import time

import click
import pytest
from harness import InProcessWriter
from test_schedule_locked import held_lock

from quill.home import Halt, RunDir
from quill.jobs import outage
from quill.jobs import queues as job_queues
from quill.ops.cli.base import json_option, run
from quill.ops.cli.root import cli
from quill.ops.client.errors import StoreBusyError, from_exception
from quill.store.errors import TransientError


@pytest.fixture
def w(tmp_path, monkeypatch):
    monkeypatch.setattr(job_queues, "QUEUE_BUSY_TIMEOUT_S", 0.2)
    monkeypatch.setattr(outage, "LOCK_WAIT_S", 0.5, raising=False)
    h = InProcessWriter(tmp_path / "home")
    h.append("session.create", {"session_id": "s1", "source": "cli"})
    h.until_idle()
    monkeypatch.setenv("QUILL_HOME", str(h.cfg.home))
    yield h
    h.close()


def test_a_failed_snapshot_whose_run_is_not_in_history_says_so_in_text_and_json(w, capsys):
    """The snapshot job refuses during a halt (``HaltedError``); its run's record could not
    be sent either (``queue.db`` locked): ``jobs.run_records`` notes that on the error, and
    the public error the CLI prints (``StoreDamagedError``, a new object) must carry it."""
    RunDir(w.cfg.home).record_halt(
        Halt("CorruptError", "damage found", time.time()), w.cfg.state_db
    )
    with held_lock(w.cfg.queue_db, "python"):
        human = run(cli, ["snapshot"])
        err = capsys.readouterr().err
        as_json = run(cli, ["snapshot", "--json"])
        error = json.loads(capsys.readouterr().out)["error"]
    assert human == as_json == 1
    lines = err.splitlines()
    assert lines[0].startswith("quill: error: ") and "halted" in lines[0], err
    notes = [ln for ln in lines if ln.startswith("quill: note: ")]
    assert any("this run is not in `quill jobs history` yet" in n for n in notes), err
    assert lines[-1].startswith("quill: hint: "), err  # the hint stays last
    assert error["kind"] == "damaged"
    assert any("this run is not in `quill jobs history` yet" in n for n in error["notes"])


@click.group()
def _group() -> None:
    """A real click group run through the CLI's one error path (``base.run``)."""


@_group.command()
def wrapped() -> None:
    try:
        raise TransientError("database is locked")
    except TransientError as exc:
        exc.add_note("the writer was in a checkpoint")
        raise click.ClickException(f"could not read: {exc}") from exc


@_group.command()
@json_option
def classified(as_json: bool) -> None:
    exc = TransientError("database is locked")
    exc.add_note("first line\nsecond line")
    raise exc


def test_notes_survive_classification_and_wrapping_in_text_and_json(capsys):
    assert run(_group, ["wrapped"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "quill: error: could not read: database is locked",
        "quill: note: the writer was in a checkpoint",
    ]
    assert run(_group, ["classified", "--json"]) == 1
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["kind"] == "busy" and error["notes"] == ["first line\nsecond line"]
    assert run(_group, ["classified"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[1:3] == ["quill: note: first line", "             second line"], err
    assert err[3].startswith("quill: hint: retry shortly")


def test_an_error_without_notes_has_an_empty_list():
    error = from_exception(TransientError("locked"))
    assert isinstance(error, StoreBusyError) and error.as_dict()["notes"] == []

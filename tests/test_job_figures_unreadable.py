"""A ``job_runs.figures`` text that does not read is shown as unreadable with the reason and
the stored text — never read as no figures (``store.sqlite.job_runs.read_figures``): when
recovery judges a snapshot run from its effect (``store.sqlite.history._judged``), when the
history is listed (``quill jobs history`` / status), and when the writer closes a dead run."""

from __future__ import annotations

import time

import pytest
from harness import InProcessWriter

from quill.home.layout import snapshot_name
from quill.store import Reader
from quill.store.sqlite.connection import open_writer, transaction
from quill.store.sqlite.history import carry_job_runs
from quill.store.sqlite.job_runs import UNREADABLE

BROKEN = '{"runner": "writer", "holder": {"pid": 1'  # cut short: not JSON


@pytest.fixture
def w(tmp_path):
    h = InProcessWriter(tmp_path / "home")
    h.say("q", "hello")
    h.until_idle()
    yield h
    h.close()


def _insert(path, rows):
    conn = open_writer(path)
    try:
        with transaction(conn):
            conn.executemany(
                "INSERT INTO job_runs (job, started_at, ended_at, outcome, figures) "
                "VALUES (?, ?, ?, ?, ?)",
                rows,
            )
    finally:
        conn.close()


def test_a_run_whose_figures_do_not_read_is_listed_as_unreadable_with_the_reason(w):
    w.writer.shutdown()
    _insert(w.cfg.state_db, [("fts_merge", 1000.0, 1001.0, "ok", BROKEN)])
    with Reader(w.cfg.state_db) as r:
        [run] = r.job_runs(job="fts_merge")
    bad = run["figures"][UNREADABLE]
    assert bad["text"] == BROKEN
    assert bad["reason"].startswith("not JSON: ")


def test_a_snapshot_run_judged_by_recovery_keeps_its_unreadable_figures_with_the_reason(w):
    """The old ``_judged`` read such figures as ``{}``: the run came back "ok" with nothing
    saying its figures were lost."""
    started = time.time() - 5
    snaps = w.cfg.snapshots_dir
    snaps.mkdir(parents=True, exist_ok=True)
    (snaps / snapshot_name(1, 0)).write_bytes(b"")  # a verified copy's name: its effect
    w.writer.shutdown()
    old = w.cfg.state_db
    _insert(old, [("snapshot", started, None, "running", BROKEN)])
    conn = open_writer(old)  # carry into the same file's rows: a rebuilt store's schema
    try:
        carry_job_runs(
            conn,
            old,
            halt=None,
            started_at=time.time(),
            now=time.time(),
            figures={},
            snapshots_dir=snaps,
        )
    finally:
        conn.close()
    with Reader(old) as r:
        runs = [x for x in r.job_runs(job="snapshot") if x["started_at"] == started]
    assert runs and all(x["outcome"] == "ok" for x in runs), runs
    for run in runs:
        assert run["figures"]["judged"].startswith("completed (judged from effect")
        assert run["figures"][UNREADABLE]["text"] == BROKEN
        assert run["figures"][UNREADABLE]["reason"].startswith("not JSON: ")


def test_a_json_value_that_is_not_an_object_is_unreadable_too(w):
    w.writer.shutdown()
    _insert(w.cfg.state_db, [("vacuum", 1000.0, 1001.0, "ok", "[1, 2]")])
    with Reader(w.cfg.state_db) as r:
        [run] = r.job_runs(job="vacuum")
    assert run["figures"][UNREADABLE] == {
        "reason": "not a JSON object: a list",
        "text": "[1, 2]",
    }

"""The record of an incident survives ``quill recover``: the check that found the damage, the
job that declared it, the halt, the recovery and every run between the snapshot and the
incident are in the rebuilt store's job history, and no row stays ``running``.

Real pages of ``messages`` overwritten in a real ``state.db``; the real job worker functions
(``run_recorded``: records through the store queue), the production writer and recovery.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from conftest import damage_pages
from harness import InProcessWriter

from quill.jobs import catalog
from quill.jobs.queues import build_for, resolve_params, run_recorded
from quill.jobs.worker_jobs import DamageFound
from quill.store import Reader


@pytest.fixture
def w(tmp_path):
    h = InProcessWriter(tmp_path / "home", writer={"chunk_rows": 200})
    yield h
    h.close()


def _worker_job(w, name: str) -> None:
    """Run worker job ``name`` as the consumer does (its records go through the store queue)."""
    spec = catalog.get(name)
    run_recorded(spec, build_for(w.cfg), resolve_params(spec, w.cfg, {}), runner="consumer")


def _history(w) -> list[dict]:
    with Reader(w.cfg.state_db) as r:
        return list(reversed(r.job_runs(limit=5000)))


def test_job_history_survives_recover_with_the_incident_and_nothing_left_running(w):
    for i in range(40):
        w.say("q", *[f"row {i}-{k} " + "lorem ipsum " * 20 for k in range(10)])
    w.until_idle()
    _worker_job(w, "snapshot")  # the snapshot recovery will start from
    w.until_idle()  # the writer records the snapshot's run
    build_for(w.cfg).enqueue("fts_merge")  # a run between the snapshot and the incident
    w.say("q", "after the snapshot")
    w.until_idle()
    w.writer.shutdown()  # its checkpoint puts every page in the file
    damage_pages(w.cfg.state_db, "messages", leaves_only=True)
    w.writer = w.start()
    with pytest.raises(DamageFound):  # the finding: recorded, declare_corrupt queued
        _worker_job(w, "quick_check")
    for _ in range(6):
        w.turn()
    halt = w.writer.run_dir.halt(w.cfg.state_db)
    assert halt is not None and "quick_check" in halt.detail

    from quill.ops.recover.sqlite import rebuild

    report = rebuild(w.cfg)
    assert report.get("job_history", {}).get("error") is None
    w.writer.run_dir.request_swap(report["path"])  # the halted writer swaps it in
    w.turn()
    assert w.writer.done
    w.restart()
    w.until_idle()

    runs = _history(w)
    by_job: dict[str, list[dict]] = {}
    for run in runs:
        by_job.setdefault(run["job"], []).append(run)
    assert [r["outcome"] for r in by_job["snapshot"]] == ["ok"]
    assert [r["outcome"] for r in by_job["fts_merge"]] == ["ok"]
    assert "quick_check" in by_job, f"the finding is gone from the history: {sorted(by_job)}"
    [check] = by_job["quick_check"]
    assert check["outcome"] == "error" and "DamageFound" in check["error"]
    [declared] = by_job["declare_corrupt"]
    assert declared["outcome"] == "halted" and "quick_check" in declared["error"]
    assert declared["ended_at"] == pytest.approx(halt.at)
    [halted] = by_job["writer_halt"]
    assert halted["outcome"] == "halted" and halted["started_at"] == pytest.approx(halt.at)
    assert halted["figures"]["job"] == "declare_corrupt", "the halt names the job run"
    [recovered] = by_job["recover"]
    assert recovered["outcome"] == "ok" and recovered["figures"]["snapshot"] == report["snapshot"]
    assert recovered["started_at"] >= halted["started_at"]
    assert not [r for r in runs if r["outcome"] == "running"], runs
    # The incident reads in order: snapshot, the run after it, the finding, the halt, recovery.
    order = [r["job"] for r in runs]
    assert order.index("snapshot") < order.index("fts_merge") < order.index("quick_check")
    assert order.index("quick_check") < order.index("writer_halt") < order.index("recover")


def test_recover_carries_the_readable_job_runs_of_a_damaged_history_and_counts_the_rest(w):
    """Damage in ``job_runs`` itself: recovery still succeeds, carries every readable row and
    counts the unreadable ones instead of guessing them."""
    from quill.ops.recover.sqlite import rebuild
    from quill.store.sqlite.connection import open_writer, transaction

    w.say("q", "hello")
    w.until_idle()
    _worker_job(w, "snapshot")
    w.until_idle()  # the writer records the snapshot's run
    w.writer.shutdown()
    conn = open_writer(w.cfg.state_db)
    try:
        with transaction(conn):
            for i in range(600):
                conn.execute(
                    "INSERT INTO job_runs (job, started_at, ended_at, outcome, figures) "
                    "VALUES ('fts_merge', ?, ?, 'ok', ?)",
                    (1000.0 + i, 1001.0 + i, '{"pad": "' + "x" * 200 + '"}'),
                )
        conn.wal_checkpoint(mode=3)
    finally:
        conn.close()
    damage_pages(w.cfg.state_db, "job_runs", count=2, leaves_only=True)
    w.writer = w.start()
    w.turn()  # its start closes its predecessor's runs: a scan of job_runs meets the damage
    assert w.writer.run_dir.halt(w.cfg.state_db) is not None
    report = rebuild(w.cfg)
    history = report["job_history"]
    assert history["error"] is None
    assert history["unreadable_rows"] > 0
    assert 0 < history["carried"] < 600
    w.writer.run_dir.request_swap(report["path"])
    w.turn()
    assert w.writer.done
    w.restart()
    w.until_idle()
    merges = [r for r in _history(w) if r["job"] == "fts_merge"]
    assert len(merges) + history["unreadable_rows"] == 600  # every row carried or counted
    assert [r["job"] for r in _history(w)][-2:] == ["writer_halt", "recover"]


def test_a_snapshot_run_is_judged_by_the_snapshot_recover_rebuilt_from_when_the_store_is_gone(w):
    """The snapshot's own run is ``running`` inside the copy it made; with the store file gone
    (deleted, lost with its disk) nothing gives its end back. The verified snapshot the
    rebuild started from is that run's effect: ``ok``, judged from it, never "unknown"."""
    from quill.ops.recover.sqlite import rebuild

    w.say("q", "before the snapshot")
    w.until_idle()
    spec = catalog.get("snapshot")

    def applied_start_then_snapshot(**params):
        w.until_idle()  # a running fleet applies the run's start row before the copy is taken
        return spec.func(**params)

    ran = SimpleNamespace(name=spec.name, func=applied_start_then_snapshot)
    run_recorded(ran, build_for(w.cfg), resolve_params(spec, w.cfg, {}), runner="cli")
    w.until_idle()
    w.say("q", "after the snapshot")
    w.until_idle()
    w.writer.shutdown()
    for suffix in ("", "-wal", "-shm"):
        w.cfg.state_db.with_name(w.cfg.state_db.name + suffix).unlink(missing_ok=True)
    report = rebuild(w.cfg)
    assert report["job_history"]["error"] is not None  # nothing could be read from the old file
    assert report["applied"] >= 1  # the message after the snapshot, replayed from the spool
    with Reader(report["path"]) as r:
        [run] = r.job_runs(job="snapshot")
    made = report["snapshot"].rsplit("/", 1)[-1]
    assert run["outcome"] == "ok", run
    assert run["error"] is None
    assert run["figures"]["judged"].startswith(
        f"completed (judged from effect: verified snapshot {made} covering spool position "
    )

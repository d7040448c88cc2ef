"""Store jobs on the writer: VACUUM only when worthwhile, idle-only jobs deferred while the
drain is busy, failing jobs recorded and retried with backoff. Real huey queue, real store.
SQLite only: VACUUM, FTS merge/optimize, snapshots and quick_check have no PostgreSQL
counterpart (docs/backends.md, "Maintenance"); PostgreSQL's jobs are tested in
test_cluster_jobs.py and test_pg_amcheck.py."""

from __future__ import annotations

import json

import pytest
import structlog
from semantics_helpers import Store

from quill.jobs.prune import DAY, auto_prune
from quill.jobs.queues import build
from quill.jobs.store_jobs import vacuum
from quill.workers.job_runner import StoreJobRunner


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path)
    yield s
    s.close()


def _fill(store, sessions=30, per=40):
    for k in range(sessions):
        store.apply("session.create", {"session_id": f"s{k}", "source": "cron"})
        store.apply(
            "messages.append",
            {
                "session_id": f"s{k}",
                "messages": [
                    {"role": "user", "content": f"session {k} message {i} " + "lorem ipsum " * 40}
                    for i in range(per)
                ],
            },
        )
        store.apply("session.end", {"session_id": f"s{k}", "reason": "user_exit"})
    store.index()


def test_vacuum_skips_unless_worthwhile_and_shrinks_the_file_when_it_runs(store):
    _fill(store)
    assert vacuum(store.conn)["skipped"] == "free-page ratio below threshold"
    import time

    pruned = store.job(auto_prune, retention_s=DAY, now=time.time() + 10 * DAY, max_sessions=25)
    assert pruned["sessions_deleted"] == 25
    figures = vacuum(store.conn, min_free_ratio=0.2)
    assert "skipped" not in figures, figures
    assert figures["bytes_after"] < figures["bytes_before"] / 2
    assert figures["wal_bytes_after"] == 0
    with store.reader() as r:
        assert len(r.list_sessions(limit=100)) == 5


def test_idle_only_jobs_wait_for_the_drain_and_failures_are_retried(store, tmp_path):
    queues = build(tmp_path / "queue.db")
    runner = StoreJobRunner(queues, structlog.get_logger(), store.spool)
    queues.enqueue("vacuum", min_free_ratio=0.0)
    assert runner.run_one(store.backend, idle=False) is False  # busy: deferred
    assert queues.pending()["store"] == 1
    assert runner.run_one(store.backend, idle=True) is True  # idle: runs
    queues.enqueue("vacuum", min_free_ratio="not a number")  # fails with TypeError
    assert runner.run_one(store.backend, idle=True) is True
    runs = store.conn.execute("SELECT job, outcome, error FROM job_runs ORDER BY id").fetchall()
    assert [(j, o) for j, o, _ in runs] == [("vacuum", "ok"), ("vacuum", "error")]
    assert "TypeError" in runs[1][2]
    assert queues.store.scheduled_count() == 1  # a retry, with backoff
    [retry] = queues.store.scheduled()
    assert retry.retries == 1 and retry.eta is not None
    assert json.loads(
        store.conn.execute("SELECT figures FROM job_runs WHERE outcome='ok'").fetchone()[0]
    )


def test_fts_merge_and_optimize_keep_search_answers_unchanged(store):
    from quill.jobs.store_jobs import fts_merge, fts_optimize

    _fill(store, sessions=5, per=40)
    with store.reader() as r:
        before = [h["message_id"] for h in r.search("lorem", limit=50)]
    merged = fts_merge(store.conn, pages=50)
    assert isinstance(merged["pages_written"], int) and merged["pages_written"] >= 0
    fts_optimize(store.conn)
    with store.reader() as r:
        assert [h["message_id"] for h in r.search("lorem", limit=50)] == before


def test_snapshots_are_verified_stamped_and_only_the_newest_n_kept(store, tmp_path):
    from quill.jobs.worker_jobs import latest_snapshot, snapshot

    _fill(store, sessions=2, per=5)
    out = tmp_path / "snaps"
    results = [snapshot(str(tmp_path / "state.db"), str(out), keep=2) for _ in range(3)]
    kept = sorted(p.name for p in out.glob("snapshot-*.db"))
    first = results[0]["path"].rsplit("/", 1)[-1]
    assert len(kept) == 2 and results[1]["removed"] == [] and results[2]["removed"] == [first]
    path, position = latest_snapshot(out)
    assert str(position) == results[-1]["position"] and path.name == kept[-1]
    from quill.store.sqlite.swap import integrity

    assert integrity(path) == ["ok"]


def test_integrity_check_passes_on_a_healthy_store(store, tmp_path):
    from quill.jobs.worker_jobs import integrity_check, quick_check

    _fill(store, sessions=2, per=5)
    assert integrity_check(str(tmp_path / "state.db"))["result"] == "ok"
    assert quick_check(str(tmp_path / "state.db"))["result"] == "ok"


def test_a_check_waits_for_a_store_the_writer_has_not_created_yet(store, tmp_path):
    """On a new data dir the scheduler may fire a missed check before the writer created the
    file: the check waits for it (then checks it) instead of recording an error; a file that
    never appears is named in the error after the wait."""
    import os
    import shutil
    import threading

    from quill.jobs.worker_jobs import quick_check
    from quill.store.errors import CantOpenError

    _fill(store, sessions=1, per=3)
    store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    late = tmp_path / "late" / "state.db"
    late.parent.mkdir()
    part = late.with_name("state.db.part")

    def appear():  # whole at once, as SQLite's own create: a half-copied file is damage
        shutil.copyfile(tmp_path / "state.db", part)
        os.replace(part, late)

    timer = threading.Timer(0.5, appear)
    timer.start()
    try:
        assert quick_check(str(late), wait_s=30)["result"] == "ok"
    finally:
        timer.cancel()
    with pytest.raises(CantOpenError, match="never.db does not exist"):
        quick_check(str(tmp_path / "never.db"), wait_s=0.3)

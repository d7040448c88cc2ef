"""Attacks on ``quill spool purge`` / ``sessions delete --purge``: each test is a
failing reproduction of a defect found by running the feature as an operator would. These
check the store scrub: after a purge neither the live store (file and WAL) nor the next
snapshot holds the deleted content, whether the purge scrubs itself or queues the scrub for
a running writer."""

from __future__ import annotations

import threading
import time

from purge_helpers import PurgeHome, _rows, files_holding

from quill.workers.writer import Writer


def test_purge_later_then_the_next_snapshot_holds_no_deleted_content(tmp_path):
    """docs/operations.md: "`quill spool purge ID` once the delete is applied" is the way to
    purge a session deleted without ``--purge``. That delete ran without ``secure_delete``,
    so the live store's freed pages still hold the text; the purge cleans the spool and the
    snapshots and leaves the live store as is. The next scheduled ``snapshot`` job (or
    ``quill snapshot``) copies those pages into a new snapshot file: the content is back in
    snapshots/ hours after the purge reported success. (CLI on the corpus: marker message in
    A, ``quill sessions delete A``, run, ``quill spool purge A`` -> no file but state.db*
    holds the marker; ``quill snapshot`` -> snapshots/snapshot-….db holds it.)"""
    h = PurgeHome(tmp_path / "home")
    h.append("session.create", {"session_id": "a", "source": "cli"})
    h.say("a", "a keeps this")
    h.append("session.create", {"session_id": "x", "source": "cli"})
    h.say("x", *[f"WORD-x-secret {i} " + "lorem ipsum " * 20 for i in range(50)])
    h.append("sessions.delete", {"session_ids": ["x"], "reason": "user_request"})  # no purge flag
    h.drain()
    assert any(b"WORD-x" in p.read_bytes() for p in h.root.glob("state.db*"))  # freed pages
    figures = h.purge("x")
    assert files_holding(h.root, b"WORD-x") == []
    h.snapshot()  # the next scheduled snapshot
    assert files_holding(h.root, b"WORD-x") == []
    # the fix: the live store (file and WAL) no longer holds the bytes either, and the scrub
    # the writer ran (here the purge itself, holding the writer lease: no fleet runs) is on
    # record in job_runs like every job
    assert [p.name for p in h.root.glob("state.db*") if b"WORD-x" in p.read_bytes()] == []
    assert figures["store_scrub"]["runner"] == "cli"
    runs = _rows(h.db, "SELECT job, outcome FROM job_runs WHERE job = 'scrub'")
    assert runs == [("scrub", "ok")]
    assert _rows(h.db, "SELECT count(*) FROM messages WHERE session_id = 'a'") == [(1,)]


def test_purge_after_a_purge_delete_scrubs_and_truncates_the_wal(tmp_path):
    """A ``--purge`` delete zeroed the cells it freed (secure_delete), but the WAL still held
    the frames that inserted them (a new user found a purged secret in state.db-wal) and FTS5
    segments its words (another found them in messages_fts_data): the purge's scrub
    optimizes, VACUUMs and empties the WAL for it too."""
    h = PurgeHome(tmp_path / "home")
    h.append("session.create", {"session_id": "x", "source": "cli"})
    h.say("x", "WORD-x-secret")
    h.append("sessions.delete", {"session_ids": ["x"], "purge": True, "reason": "user_request"})
    h.drain()
    scrub = h.purge("x")["store_scrub"]
    assert scrub["vacuumed"] is True and scrub["wal_bytes_after"] == 0
    assert _rows(h.db, "SELECT count(*) FROM job_runs WHERE job = 'scrub' AND outcome = 'ok'") == [
        (1,)
    ]
    assert [
        p.name for p in h.root.rglob("*") if p.is_file() and b"WORD-x-secret" in p.read_bytes()
    ] == []


def _wait_for_the_lease(writer: Writer, thread: threading.Thread, timeout: float = 30) -> None:
    """Return once ``writer`` (running in ``thread``) holds its lease. Watching the writer's
    own lease object, not probing the lock: a probe in this process would hold the lock for
    an instant, and a writer starting in that instant would fail to take it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and thread.is_alive():
        if writer.lease.held:
            return
        time.sleep(0.02)
    raise AssertionError("the writer never took its lease")


def test_purge_later_queues_the_scrub_for_a_running_writer(tmp_path):
    """While a writer holds its lease the purge does not write the store: it queues ``scrub``
    and waits for the writer's ``job_runs`` record. The writer is the production one
    (``workers.writer.Writer.run``: lease, drain, queued store jobs), in a thread."""
    from quill.jobs.queues import build_for
    from quill.ops import logs

    h = PurgeHome(tmp_path / "home")
    h.append("session.create", {"session_id": "x", "source": "cli"})
    h.say("x", *[f"WORD-x-secret {i} " + "lorem ipsum " * 20 for i in range(50)])
    h.append("sessions.delete", {"session_ids": ["x"], "reason": "user_request"})
    h.drain()
    queues = build_for(h.cfg)
    writer = Writer(h.cfg, logs.configure(h.cfg.logs_dir, "writer"))
    stop = threading.Event()
    t = threading.Thread(target=writer.run, args=(stop,))
    t.start()
    try:
        _wait_for_the_lease(writer, t)  # held: the purge queues the scrub instead of running it
        figures = h.purge("x", enqueue_scrub=lambda **kw: queues.enqueue("scrub", **kw))
    finally:
        stop.set()
        t.join(10)
    assert figures["store_scrub"]["runner"] == "writer"
    h.snapshot()
    assert files_holding(h.root, b"WORD-x") == []
    assert [p.name for p in h.root.glob("state.db*") if b"WORD-x" in p.read_bytes()] == []
    assert _rows(h.db, "SELECT outcome FROM job_runs WHERE job = 'scrub'") == [("ok",)]

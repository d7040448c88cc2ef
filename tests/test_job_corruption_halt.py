"""A store job that meets structural corruption halts the writer at once, as the drain does.

Real damage (random bytes over the leaf pages of ``sessions`` in a real ``state.db``), the real
``auto_prune`` job queued on the real huey store queue and run by the production ``Writer``.
"""

from __future__ import annotations

import pytest
from conftest import damage_pages
from harness import InProcessWriter

from quill.jobs.queues import build_for
from quill.store.sqlite.connection import open_reader


@pytest.fixture
def w(tmp_path):
    h = InProcessWriter(tmp_path / "home", writer={"chunk_rows": 200})
    yield h
    h.close()


def _sessions(w, n: int) -> None:
    for i in range(n):
        w.append(
            "session.create",
            {
                "session_id": f"s{i:04d}",
                "source": "cli",
                "title": f"t{i}",
                "meta": {"pad": "x" * 300},
            },
        )


def test_a_store_job_meeting_corruption_halts_the_writer_at_once(w):
    _sessions(w, 400)
    w.until_idle()
    w.writer.shutdown()  # its checkpoint puts every page in the file
    damage_pages(w.cfg.state_db, "sessions", count=4, leaves_only=True)
    w.writer = w.start()
    w.turn()  # opens the store; nothing to apply
    assert w.writer.halt_cause is None, "the drain alone does not read the damaged pages"
    build_for(w.cfg).enqueue("auto_prune")
    for _ in range(3):  # the turn that runs the job must halt; later turns only look
        w.turn()
        if w.writer.halt_cause is not None:
            break
    halt = w.writer.run_dir.halt(w.cfg.state_db)
    assert halt is not None, "a job that met SQLITE_CORRUPT must halt the writer"
    assert halt.cause in ("CorruptError", "NotADatabaseError")
    [event] = w.events("writer.halt")
    assert event["cause"] == halt.cause
    # Not a job failure to be retried: the halt is the one outcome.
    assert not w.events("writer.job_failed")
    assert not list(build_for(w.cfg).store.scheduled()), "no retry was scheduled"
    # While halted the writer applies nothing more, and the job is not run again.
    w.say("s0001", "after the halt")
    assert w.turn() == w.writer.store.halt_poll_s
    assert w.status()["halted"] and w.status()["halt"]["cause"] == halt.cause
    conn = open_reader(w.cfg.state_db)
    try:
        applied = conn.execute("SELECT count(*) FROM messages").fetchone()[0]
    finally:
        conn.close()
    assert applied == 0

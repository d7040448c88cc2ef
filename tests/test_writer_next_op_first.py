"""The writer takes the next op before its upkeep (``workers.writer_upkeep``): after a partial
chunk it does not index, look at the job queue or rewrite its status file before the next op
a client sends once rung; a stream of read-your-writes ops is applied without a status write
per op. The status still says what readers act on: "busy" from the first commit after an
idle status, "idle" with the final cursor once the stream ends, and deferred upkeep still
runs while ops keep coming. Real data dirs, the production writer (``Writer.run`` in a
thread, or stepped), on both backends where the loop is the same.
"""

from __future__ import annotations

import time

from harness import InProcessWriter, WriterThread, make_home

import quill
from quill.home import WriterStatus
from quill.spool import SpoolReader
from quill.store import Reader
from quill.workers import writer as writer_module
from quill.workers.writer_upkeep import PUBLISH_S, UPKEEP_DUE_S

#: Ops sent back to back, each waited for (read-your-writes).
OPS = 30


def _indexed_upto(w: InProcessWriter) -> int:
    with Reader(w.cfg.state_db) as r:
        return int(
            r.conn.execute(
                "SELECT value FROM state_meta WHERE key = 'fts_indexed_upto'"
            ).fetchone()[0]
        )


def test_a_stream_of_waited_ops_is_applied_without_a_status_write_per_op(
    tmp_path, backend, monkeypatch
):
    """``OPS`` ops, each appended once the one before is applied (what every agent turn
    with ``QuillSession`` does): the writer publishes its status a few times, not once per
    commit, and once the stream ends it publishes "idle" at the final cursor. The writer
    lingers 2 s after each op here (and polls every 5 s), so a slow client on a loaded
    machine still counts as a stream."""
    monkeypatch.setattr(writer_module, "LINGER_S", 2.0, raising=False)
    cfg = make_home(tmp_path / "home", backend, writer={"poll_interval": 5.0})
    w = WriterThread(cfg)
    published: list[dict] = []
    publish = w.writer.run_dir.publish

    def counted(role: str, data: dict) -> bool:
        published.append(data)
        return publish(role, data)

    try:
        w.idle()
        w.writer.run_dir.publish = counted
        client = quill.Client(cfg.home)
        started = time.monotonic()
        for i in range(OPS):
            ack = client.append("s", [{"role": "user", "content": f"turn {i}"}])
            assert client.wait(ack, timeout=WriterThread.TIMEOUT_S).applied
        elapsed = time.monotonic() - started
        during = len(published)
        # One "busy" at the first commit, then at most one per PUBLISH_S (the deferred
        # upkeep's), and slack for a stream the load cut in two; not one per op (the ops
        # take well under PUBLISH_S each unless the machine is very loaded).
        said = [(p["idle"], p["cursor"]) for p in published]
        assert during <= 3 + elapsed / PUBLISH_S, (during, elapsed, said)
        assert not published[0]["idle"]  # the first commit said "busy" at once
        w.idle()  # the stream ended: the idle upkeep publishes the final cursor
        end = str(SpoolReader(cfg.spool_dir).end())
        st = WriterStatus.from_json(w.writer.run_dir.last("writer"))
        assert st.idle and st.cursor == end and st.applied == OPS
    finally:
        w.close()
    assert [m["content"] for m in quill.Client(cfg.home).messages("s")] == [
        f"turn {i}" for i in range(OPS)
    ]


def test_after_a_partial_chunk_the_next_op_comes_before_the_upkeep(tmp_path):
    """A partial chunk's upkeep waits: its rows are applied but not yet indexed when the
    next op is drained; the idle turn indexes both, and the status then says idle at the
    end of the spool (search reads unindexed rows meanwhile: the tail above the watermark)."""
    w = InProcessWriter(tmp_path / "home")
    try:
        w.say("s", "warm up")
        w.until_idle()
        base = _indexed_upto(w)
        w.say("s", "first")
        assert w.turn() == 0  # committed
        w.say("s", "second")  # the next op, arriving once the first is rung
        assert w.turn() == 0  # drained first ...
        assert _indexed_upto(w) == base  # ... with no index slice in between
        assert w.writer.totals["applied"] == 3
        with Reader(w.cfg.state_db) as r:  # found all the same
            assert len(r.search("second")) == 1
        w.turn()  # caught up: the idle upkeep
        assert _indexed_upto(w) == base + 2
        st = WriterStatus.from_json(w.status())
        assert st.idle and st.cursor == str(SpoolReader(w.cfg.spool_dir).end())
    finally:
        w.close()


def test_the_first_commit_after_an_idle_status_says_busy_at_once(tmp_path, backend):
    w = InProcessWriter(tmp_path / "home", backend)
    try:
        w.say("s", "one")
        w.until_idle()
        assert WriterStatus.from_json(w.status()).idle
        w.say("s", "two")
        w.turn()
        st = WriterStatus.from_json(w.status())
        assert not st.idle and st.applied == 2  # never a stale "idle" while it applies
    finally:
        w.close()


def test_deferred_upkeep_runs_while_ops_keep_coming(tmp_path):
    """A stream of partial chunks that never pauses still gets its index slices (and job
    looks): the upkeep runs ``UPKEEP_DUE_S`` after the first deferred commit."""
    w = InProcessWriter(tmp_path / "home")
    try:
        w.say("s", "warm up")
        w.until_idle()
        base = _indexed_upto(w)
        w.say("s", "a")
        w.writer.loop_once(w.clock, linger=True)  # deferred
        assert w.writer.loop_once(w.clock, linger=True) > 0  # lingers: waits for a ring
        w.say("s", "b")
        w.writer.loop_once(w.clock + UPKEEP_DUE_S / 2, linger=True)
        assert _indexed_upto(w) == base
        w.say("s", "c")
        w.writer.loop_once(w.clock + UPKEEP_DUE_S, linger=True)  # due: upkeep after it
        assert _indexed_upto(w) == base + 3
    finally:
        w.close()

"""A ring's note says "applied" only for a commit that landed in the live store: when
``state.db`` is removed or replaced while a chunk's transaction runs, the writer commits into
the file it holds open, which no reader sees any more; its guard halts it before the next
write, and its waiting clients must not have been told "applied" meanwhile (their look at the
store says the op is not there)."""

from __future__ import annotations

import os

from harness import InProcessWriter

import quill
from quill.home import doorbell
from quill.ops.client.wait import applied_position
from quill.store.errors import ReplacedError


def test_no_note_for_a_commit_into_a_store_file_removed_during_it(tmp_path):
    w = InProcessWriter(tmp_path / "home")
    try:
        w.until_idle()  # the store is made
        q = quill.Client(w.cfg.home)
        bell = doorbell.listen(doorbell.waiter_path(w.cfg.waiters_dir))
        assert bell is not None
        ack = q.append("s", [{"role": "user", "content": "lands nowhere"}])
        db = w.cfg.state_db
        store = w.writer.drain.store
        apply = store.apply_chunk

        def apply_after_swap(entries, on_reject):
            # The file goes while the writer is in its step, after its guard's check (an
            # operator's `rm`, a restore moving files): the commit lands in the unlinked inode.
            os.unlink(db)
            return apply(entries, on_reject)

        store.apply_chunk = apply_after_swap
        try:  # the guard finds the swap after the commit: now, or before the next write
            w.writer.step(w.clock)
            w.writer.store.check()
        except ReplacedError:
            pass
        else:
            raise AssertionError("the writer's guard did not see state.db go")
        store.apply_chunk = apply
        cursor = applied_position(w.cfg)
        assert cursor is None or not cursor > ack.position  # readers do not see the op
        assert (str(ack.position), ack.batch_id) not in doorbell.applied_in(bell.take())
        bell.close(remove=True)
    finally:
        w.writer.shutdown()


def test_notes_across_chunks_never_outrun_the_store(tmp_path, backend):
    """Attacks that held: a batch id reused in a later chunk (same content: a duplicate;
    other content: quarantined), a chunk whose note would exceed one pipe write, and a
    waiter that starts listening after the ring. Each wait's outcomes equal a store read."""
    w = InProcessWriter(tmp_path / "home", backend, writer={"chunk_rows": 1})
    try:
        w.until_idle()
        q = quill.Client(w.cfg.home)
        first = q.append("s", [{"role": "user", "content": "one"}])
        _ = w.writer.step(w.clock)  # chunk 1: `first` alone, rung before anyone listens
        bell = doorbell.listen(doorbell.waiter_path(w.cfg.waiters_dir))
        assert bell is not None
        retry = q.append("s", [{"role": "user", "content": "one"}], batch_id=first.batch_id)
        reused = q.append("s", [{"role": "user", "content": "two"}], batch_id=first.batch_id)
        while w.writer.step(w.clock):
            pass
        assert doorbell.applied_in(bell.take()) == set()  # neither applied by its chunk
        got = [o.status for o in q.wait_all([first, retry, reused], 10)]
        assert got == [o.status for o in q._outcomes([first, retry, reused])]
        assert got == ["applied", "applied", "quarantined"]

        # 200 ops in one chunk: the note would exceed NOTE_MAX, so it is a plain ring.
        w.writer.drain.chunk_rows = 1000
        acks = [
            q.append("s", [{"role": "user", "content": f"m{i}"}], batch_id=f"b-{i:060d}")
            for i in range(200)
        ]
        while w.writer.step(w.clock):
            pass
        assert bell.take() == doorbell.RING
        assert {o.status for o in q.wait_all(acks, 10)} == {"applied"}
        bell.close(remove=True)
    finally:
        w.writer.shutdown()


def test_many_waiters_each_told_their_own_outcome(tmp_path):
    """Seventeen clients wait at once (threads, each its own doorbell) on ops that are applied,
    duplicated and refused, all drained by the running writer: every wait answers what a
    store read answers (held)."""
    import threading

    from harness import WriterThread, make_home

    from quill.spool import Spool

    cfg = make_home(tmp_path / "home")
    q = quill.Client(cfg.home)
    acks = []
    for i in range(8):
        acks.append(q.append("s", [{"role": "user", "content": f"m{i}"}]))
        acks.append(
            q.append("s", [{"role": "user", "content": f"m{i}"}], batch_id=acks[-1].batch_id)
        )
    with Spool(cfg.spool_dir) as spool:  # past the client's precheck: refused by the writer
        acks.append(spool.append("messages.append", {"session_id": "s", "messages": "no"}))
    got: dict[int, str] = {}

    def wait(i: int) -> None:
        got[i] = quill.Client(cfg.home).wait(acks[i], WriterThread.TIMEOUT_S).status

    waiters = [threading.Thread(target=wait, args=(i,)) for i in range(len(acks))]
    for t in waiters:
        t.start()
    w = WriterThread(cfg)
    try:
        for t in waiters:
            t.join(WriterThread.TIMEOUT_S)
        assert [got.get(i) for i in range(len(acks))] == [o.status for o in q._outcomes(acks)]
        assert got[len(acks) - 1] == "quarantined"
    finally:
        w.close()


def test_an_op_applied_at_its_own_position_is_applied_whatever_a_leftover_entry_says(tmp_path):
    """A chunk whose op was refused (quarantined before the commit) and whose COMMIT then
    failed is retried; on PostgreSQL another host may have made the op valid meanwhile, so
    the retry applies it at the same position and the ring names it applied. The quarantine
    entry left from the failed try must not make a store read say "quarantined" for it — not
    for one ack, and not among others (it did, when another ack was not applied)."""
    from quill.spool import Quarantine, Spool

    w = InProcessWriter(tmp_path / "home")
    try:
        q = quill.Client(w.cfg.home)
        ack = q.append("s", [{"role": "user", "content": "applied on the retry"}])
        with Spool(w.cfg.spool_dir) as spool:
            refused = spool.append("messages.append", {"session_id": "s", "messages": "no"})
        # What the failed try left: the entry at the op's position (a real quarantine file).
        Quarantine(w.cfg.spool_dir).put(ack.position, "unknown-session", "first try", b"{}")
        w.until_idle()
        assert [o.status for o in q.wait_all([ack], 10)] == ["applied"]
        assert [o.status for o in q.wait_all([ack, refused], 10)] == ["applied", "quarantined"]
    finally:
        w.writer.shutdown()

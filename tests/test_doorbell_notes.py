"""The writer's ring after a commit names the ops that commit applied (``doorbell.applied_note``),
and a waiting client that finds its own ``[position, batch id]`` there is answered without
reading the store; a duplicate, a refused op or a batch id met twice in the chunk is never
named, so such a wait reads the outcome from the store as before."""

from __future__ import annotations

import asyncio
import threading
import time

from harness import InProcessWriter, WriterThread, make_home

import quill
from quill.home import doorbell
from quill.ops.client import aclient
from quill.ops.client.client import Client
from quill.spool import Spool


def _bell(w: InProcessWriter) -> doorbell.Doorbell:
    bell = doorbell.listen(doorbell.waiter_path(w.cfg.waiters_dir))
    assert bell is not None
    return bell


def _drain(w: InProcessWriter) -> None:
    while w.writer.step(w.clock):
        pass


def test_the_ring_names_exactly_the_ops_the_commit_applied(tmp_path, backend):
    w = InProcessWriter(tmp_path / "home", backend)
    try:
        w.until_idle()  # the store is made
        q = quill.Client(w.cfg.home)
        bell = _bell(w)
        one = q.append("s", [{"role": "user", "content": "one"}])
        again = q.append("s", [{"role": "user", "content": "one"}], batch_id=one.batch_id)
        reused = q.append("s", [{"role": "user", "content": "other"}], batch_id=one.batch_id)
        four = q.append("s", [{"role": "user", "content": "four"}])
        _drain(w)  # one chunk: `one`'s batch id occurs three times in it
        named = doorbell.applied_in(bell.take())
        assert named == {(str(four.position), four.batch_id)}
        outcomes = q._outcomes([one, again, reused, four])
        assert [o.status for o in outcomes] == ["applied", "applied", "quarantined", "applied"]

        # A chunk of a duplicate alone, then of a refused op alone: a plain ring, no names.
        q.append("s", [{"role": "user", "content": "four"}], batch_id=four.batch_id)
        _drain(w)
        w.append("messages.append", {"session_id": "s", "messages": "not a list"})
        _drain(w)
        rings = bell.take()
        assert rings == doorbell.RING * 2
        assert doorbell.applied_in(rings) == set()
        bell.close(remove=True)
    finally:
        w.writer.shutdown()


def test_a_note_too_long_for_one_pipe_write_is_a_plain_ring(tmp_path):
    pairs = [(f"1:{i}", f"batch-{i:040d}") for i in range(200)]
    assert doorbell.applied_note(pairs) == doorbell.RING
    assert doorbell.applied_note([]) == doorbell.RING
    short = doorbell.applied_note(pairs[:3])
    assert short.endswith(b"\n") and len(short) <= doorbell.NOTE_MAX
    # A note among plain rings and torn or foreign bytes: only its pairs count.
    assert doorbell.applied_in(b"!!" + short + b'{"x":1}\n[1,2]\n[oops\n') == set(pairs[:3])


def test_an_async_wait_answered_by_the_note_does_not_read_the_store(tmp_path, monkeypatch):
    """The wait listens and looks once before any writer runs (nothing applied yet); the
    writer's ring then ends it. With the note, the ring is the answer: one look in all."""
    monkeypatch.setattr(aclient, "WAIT_POLL_S", 60.0)
    looks = []
    look = Client._look
    monkeypatch.setattr(Client, "_look", lambda *a: looks.append(1) or look(*a))
    cfg = make_home(tmp_path / "home")
    client = quill.AsyncClient(cfg.home)
    ack = asyncio.run(client.append("s", [{"role": "user", "content": "ring"}]))
    with Spool(cfg.spool_dir) as spool:  # past the client's precheck: refused
        refused = spool.append("messages.append", {"session_id": "s", "messages": "not a list"})
    outcomes: list = []
    waiter = threading.Thread(
        target=lambda: outcomes.append(asyncio.run(client.wait_all([ack], 60.0)))
    )
    waiter.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not looks:
        time.sleep(0.01)  # until the wait has listened and looked once
    w = WriterThread(cfg)
    try:
        waiter.join(timeout=WriterThread.TIMEOUT_S)
        assert outcomes and [o.status for o in outcomes[0]] == ["applied"]
        assert len(looks) == 1  # the first look only: the ring's note answered the wait
        # The refused op is never named: its wait reads the outcome from the store.
        (out,) = asyncio.run(client.wait_all([refused], 60.0))
        assert out.status == "quarantined"
    finally:
        w.close()
        waiter.join()


def test_a_blocking_wait_answered_by_the_note_reads_no_outcome(tmp_path, monkeypatch):
    """``Client.wait``: the wait has read the cursor twice (before and after it listened)
    before any writer runs; the writer's ring then ends it, and with the note the outcome is
    known without reading it from the store."""
    from quill.ops.client import client as client_module
    from quill.ops.client import wait

    monkeypatch.setattr(client_module, "WAIT_POLL_S", 60.0)
    cursors: list[int] = []
    read: list[int] = []
    cursor, outcomes = wait.Looker.cursor, wait.Looker.outcomes
    monkeypatch.setattr(wait.Looker, "cursor", lambda self: cursors.append(1) or cursor(self))
    monkeypatch.setattr(wait.Looker, "outcomes", lambda s, a: read.append(1) or outcomes(s, a))
    cfg = make_home(tmp_path / "home")
    q = quill.Client(cfg.home)
    ack = q.append("s", [{"role": "user", "content": "ring"}])
    got: list = []
    waiter = threading.Thread(target=lambda: got.append(q.wait(ack, 60.0)))
    waiter.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and len(cursors) < 2:
        time.sleep(0.01)
    w = WriterThread(cfg)
    try:
        waiter.join(timeout=WriterThread.TIMEOUT_S)
        assert got and got[0].status == "applied"
        assert read == []  # answered by the ring's note
        with Spool(cfg.spool_dir) as spool:  # refused: never named, so read from the store
            refused = spool.append("messages.append", {"session_id": "s", "messages": "no"})
        assert q.wait(refused, 60.0).status == "quarantined"
        assert read == [1]
    finally:
        w.close()
        waiter.join()

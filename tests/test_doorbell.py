"""Read-your-writes without polling: an append wakes the idle writer and a commit wakes the
waiting client (``quill.home.doorbell``), on both backends; a lost or impossible ring costs
only the old poll interval, never a record.

Each test runs the production writer (``Writer.run``) in a thread on a real data dir and makes
the poll that used to do the waking far longer than the test's timeout, so only a ring can
make the test pass in time.
"""

from __future__ import annotations

import asyncio
import os
import stat
import threading
import time
from pathlib import Path

import pytest
from harness import WriterThread, make_home

import quill
from quill.home import doorbell
from quill.ops.client.wait import wait_applied
from quill.spool.segments import DOORBELL

#: The poll every test makes too long to matter: passing in time needs a ring.
LONG_POLL_S = 60.0
#: How long a test waits for what a ring delivers in milliseconds (generous: a loaded box).
TIMEOUT_S = WriterThread.TIMEOUT_S


def _until_listening(cfg, timeout: float = 60) -> None:
    """Wait until a wait listens (its doorbell is in ``cfg.waiters_dir``): only then does a
    ring, not the wait's first look, end it."""
    deadline = time.monotonic() + timeout
    while not (cfg.waiters_dir.exists() and any(cfg.waiters_dir.iterdir())):
        assert time.monotonic() < deadline, f"the wait did not listen within {timeout} s"
        time.sleep(0.01)


@pytest.fixture
def writer_home(tmp_path, backend):
    """A data dir on each backend whose idle writer would poll only every ``LONG_POLL_S``."""
    cfg = make_home(tmp_path / "home", backend, writer={"poll_interval": LONG_POLL_S})
    w = WriterThread(cfg)
    w.idle()
    yield w
    w.close()


def test_an_append_wakes_the_idle_writer(writer_home):
    q = quill.Client(writer_home.cfg.home)
    ack = q.append("s", [{"role": "user", "content": "ring"}])
    assert q.wait(ack, timeout=TIMEOUT_S).applied  # the writer's own poll is 60 s away
    assert [m["content"] for m in q.messages("s")] == ["ring"]


def test_a_commit_wakes_the_waiting_client(tmp_path, backend):
    """The record is acked with no writer running; the wait is listening before the writer
    starts, so only the writer's ring after its commit can end it before its 60 s poll."""
    cfg = make_home(tmp_path / "home", backend)
    ack = quill.Client(cfg.home).append("s", [{"role": "user", "content": "ring"}])
    waited: list[float] = []
    waiter = threading.Thread(
        target=lambda: waited.append(wait_applied(cfg, ack.position, 2 * LONG_POLL_S, LONG_POLL_S))
    )
    waiter.start()
    _until_listening(cfg)
    w = WriterThread(cfg)
    try:
        waiter.join(timeout=TIMEOUT_S)
        assert waited, "the wait was not woken by the writer's commit"
        assert not list(cfg.waiters_dir.iterdir())  # the wait removed its doorbell
    finally:
        w.close()
        waiter.join()


def test_a_commit_wakes_the_waiting_async_client(tmp_path, monkeypatch):
    from quill.integrations.openai_agents import QuillSession
    from quill.ops.client import aclient

    cfg = make_home(tmp_path / "home")
    monkeypatch.setattr(aclient, "WAIT_POLL_S", LONG_POLL_S)
    w = WriterThread(cfg)
    try:
        w.idle()
        session = QuillSession("s", client=quill.AsyncClient(cfg.home))

        async def turn() -> list:
            for i in range(3):  # each add_items returns only once applied
                await session.add_items([{"role": "user", "content": f"turn {i}"}])
            return await session.get_items()

        items = asyncio.run(asyncio.wait_for(turn(), TIMEOUT_S))
        assert [i["content"] for i in items] == ["turn 0", "turn 1", "turn 2"]
    finally:
        w.close()


def test_without_a_doorbell_the_writer_polls_and_loses_nothing(tmp_path):
    """A folder where the writer's doorbell belongs: the writer says so and polls."""
    cfg = make_home(tmp_path / "home")
    (cfg.spool_dir / DOORBELL).mkdir()
    w = WriterThread(cfg)
    try:
        q = quill.Client(cfg.home)
        acks = [q.append("s", [{"role": "user", "content": f"m{i}"}]) for i in range(5)]
        assert all(o.applied for o in q.wait_all(acks, timeout=TIMEOUT_S))
        assert len(q.messages("s")) == 5
    finally:
        w.close()
    log = (cfg.logs_dir / "writer.log").read_text()
    assert "writer.doorbell_unusable" in log


def test_a_waiter_that_cannot_listen_polls(tmp_path):
    """A file where the waiters' folder belongs: ``wait`` falls back to its poll."""
    cfg = make_home(tmp_path / "home")
    cfg.waiters_dir.write_text("not a folder")
    w = WriterThread(cfg)
    try:
        q = quill.Client(cfg.home)
        assert q.wait(q.append("s", [{"role": "user", "content": "x"}]), TIMEOUT_S).applied
    finally:
        w.close()


def test_leftovers_of_a_killed_writer_and_waiter_are_reused_or_removed(tmp_path):
    """A ``kill -9`` leaves the writer's pipe (reused by the next writer) and a waiter's
    pipe nobody reads (removed by the writer's next ring)."""
    cfg = make_home(tmp_path / "home")
    os.mkfifo(cfg.spool_dir / DOORBELL, 0o600)
    cfg.waiters_dir.mkdir(parents=True, exist_ok=True)
    dead = cfg.waiters_dir / "1-dead"
    os.mkfifo(dead, 0o600)
    w = WriterThread(cfg)
    try:
        w.idle()
        q = quill.Client(cfg.home)
        assert q.wait(q.append("s", [{"role": "user", "content": "x"}]), TIMEOUT_S).applied
        assert not dead.exists()
        assert stat.S_ISFIFO(os.lstat(cfg.spool_dir / DOORBELL).st_mode)
    finally:
        w.close()
    assert not (cfg.spool_dir / DOORBELL).exists()  # a stopped writer removes its pipe


def test_ring_never_writes_into_a_regular_file(tmp_path: Path):
    path = tmp_path / "not-a-pipe"
    path.write_bytes(b"")
    with pytest.raises(OSError):
        doorbell.ring(path)
    assert path.read_bytes() == b""
    assert doorbell.ring(tmp_path / "nobody") is False


def test_a_queued_job_wakes_the_idle_writer_and_its_recorded_run_wakes_the_wait(tmp_path):
    """A store job queued as ``quill jobs run`` queues it, waited for as ``--wait`` waits (the
    wait listens first): the writer's poll and the wait's own are both 60 s away, so only the
    two rings (the queue's to the idle writer, the writer's to the waiter once the run is
    recorded) end it in time. ``wal_checkpoint`` appends nothing to the spool, so no commit
    of a chunk rings instead. The rings are the same on both backends (the writer's loop)."""
    from quill.jobs.queues import build_for
    from quill.ops.client.stores import open_reader
    from quill.ops.client.wait import wait_job_run

    cfg = make_home(tmp_path / "home", writer={"poll_interval": LONG_POLL_S})
    w = WriterThread(cfg)
    got: list = []

    def runs() -> list:
        with open_reader(cfg) as r:
            return r.job_runs(job="wal_checkpoint", limit=5)

    try:
        w.idle()
        queued_at = time.time()
        waiter = threading.Thread(
            target=lambda: got.append(
                wait_job_run(cfg.waiters_dir, runs, queued_at, 2 * LONG_POLL_S, LONG_POLL_S)
            ),
            daemon=True,  # a failed run is reported at once, not after the 60 s poll
        )
        waiter.start()
        _until_listening(cfg)
        build_for(cfg).enqueue("wal_checkpoint")
        waiter.join(timeout=TIMEOUT_S)
        assert got, "the wait was not woken: no ring reached the writer or the wait"
    finally:
        w.close()
    assert got[0]["outcome"] == "ok" and got[0]["figures"]["runner"] == "writer"
    assert not list(cfg.waiters_dir.iterdir())  # the wait removed its doorbell

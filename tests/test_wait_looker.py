"""A wait's looks at the store (``ops.client.wait.Looker``): one reader kept for the whole
wait, a one-row cursor read that agrees with ``figures()``, and a ``state.db`` swapped in
under a waiting client (``quill recover``) is followed, not watched forever."""

from __future__ import annotations

import os

import apsw
from harness import WriterThread, make_home

import quill
from quill.ops.client.stores import open_reader
from quill.ops.client.wait import Looker, applied_position


def _applied(w: WriterThread, q: quill.Client, content: str) -> quill.Ack:
    ack = q.append("s", [{"role": "user", "content": content}])
    assert q.wait(ack, timeout=w.TIMEOUT_S).applied
    return ack


def test_the_cursor_read_agrees_with_figures(tmp_path, backend):
    cfg = make_home(tmp_path / "home", backend)
    assert applied_position(cfg) is None  # no store yet: nothing applied, no error
    w = WriterThread(cfg)
    try:
        q = quill.Client(cfg.home)
        ack = _applied(w, q, "one")
        with open_reader(cfg) as reader:
            assert reader.applied_cursor() == reader.figures()["cursor"]
        with Looker(cfg) as look:
            assert look.cursor() > ack.position
            assert look.outcomes([ack]) == [{"outcome": "applied"}]
            reader = look.reader
            ack2 = _applied(w, q, "two")
            assert look.cursor() > ack2.position  # the kept reader sees the later commit
            assert look.reader is reader  # one reader for every look
    finally:
        w.close()


def _copy(cfg, dst) -> None:
    """A consistent copy of the store file (SQLite's backup API, from a Quill reader)."""
    dest = apsw.Connection(str(dst))
    with open_reader(cfg) as reader, dest.backup("main", reader.conn, "main") as b:
        b.step()
    dest.close()


def test_a_looker_follows_a_replaced_store_file(tmp_path):
    """A reader kept open on the old inode would report the old cursor forever."""
    cfg = make_home(tmp_path / "home")
    w = WriterThread(cfg)
    try:
        q = quill.Client(cfg.home)
        first = _applied(w, q, "one")
        old = tmp_path / "old.db"
        _copy(cfg, old)
        second = _applied(w, q, "two")
        new = tmp_path / "new.db"
        _copy(cfg, new)
    finally:
        w.close()
    os.replace(old, cfg.state_db)  # the store as of the first record
    for suffix in ("-wal", "-shm"):
        cfg.state_db.with_name(cfg.state_db.name + suffix).unlink(missing_ok=True)
    with Looker(cfg) as look:
        at_first = look.cursor()
        assert first.position < at_first <= second.position
        os.replace(new, cfg.state_db)  # swapped in under the waiting client
        assert look.cursor() > second.position


def test_the_drain_rings_only_after_the_commit(tmp_path):
    """``Drain.step``'s ``on_commit`` (where the writer rings its waiting clients) runs once
    per committed chunk, when a fresh reader already sees the cursor past it — and never
    when there was nothing to apply."""
    from harness import InProcessWriter

    w = InProcessWriter(tmp_path / "home", writer={"chunk_rows": 1})
    w.until_idle()  # the store is made
    acks = [quill.Client(w.cfg.home).append("s", [{"role": "user", "content": t}]) for t in "ab"]
    seen = []
    drain = w.writer.drain
    for _ in acks:
        drain.step(on_commit=lambda _step: seen.append(applied_position(w.cfg)))
    assert [c > a.position for c, a in zip(seen, acks)] == [True, True]
    assert not drain.step(on_commit=lambda _step: seen.append("rung")).entries
    assert len(seen) == 2


def test_a_client_keeps_one_reader_between_its_waits(tmp_path, backend, monkeypatch):
    """``Client.wait`` (and ``AsyncClient.wait``, ``QuillSession.add_items``) opens no store
    connection per call: the reader of the last wait is kept (``wait.Lookers``). On
    PostgreSQL a kept connection the server ended is replaced once, and the wait succeeds."""
    import asyncio

    from quill.ops.client import wait

    opened: list = []
    real = wait.open_reader

    def counted(cfg):
        opened.append(cfg)
        return real(cfg)

    monkeypatch.setattr(wait, "open_reader", counted)
    cfg = make_home(tmp_path / "home", backend)
    w = WriterThread(cfg)
    try:
        w.idle()  # the store is made
        q = quill.Client(cfg.home)
        for i in range(5):
            _applied(w, q, f"sync {i}")
        aq = quill.AsyncClient(client=q)

        async def turns() -> None:
            for i in range(5):
                ack = await aq.append("s", [{"role": "user", "content": f"async {i}"}])
                assert (await aq.wait(ack, timeout=w.TIMEOUT_S)).applied

        asyncio.run(turns())
        assert len(opened) == 1, len(opened)  # one reader for ten waits
        if backend:  # the server ends the kept connection while it sits idle
            kept = q._lookers._kept.reader.conn.raw
            with open_reader(cfg) as other:
                other.conn.execute("SELECT pg_terminate_backend(?)", (kept.info.backend_pid,))
            _applied(w, q, "after the server ended the kept connection")
            assert len(opened) == 2
    finally:
        w.close()
    assert len(quill.Client(cfg.home).messages("s")) == 11 if backend else 10

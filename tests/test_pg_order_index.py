"""The order-key index ``messages_ack`` on a PostgreSQL store that has rows and lacks it (a
store migrated from an older layout, a ``pg_dump`` restore) is built by a writer without
blocking writers (``CREATE INDEX CONCURRENTLY``, store/postgres/order_index.py), and an
``INVALID`` one left by an interrupted build is dropped and built again.

The build is made observable by a transaction that holds ``ROW EXCLUSIVE`` on ``messages`` (an
open write): a concurrent build waits for it without queueing in front of other writers; a
plain ``CREATE INDEX`` (``SHARE``) would queue, and every insert behind it would wait too.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import psycopg
import pytest

from quill.spool import START, Spool, SpoolReader
from quill.spool.identity import holder
from quill.store.apply.chunking import take_chunk
from quill.store.factory import open_url
from quill.store.postgres import order_index


def _spool(path: Path, sid: str, texts: list[str]) -> None:
    with Spool(path, fsync=False) as sp:
        for i, t in enumerate(texts):
            sp.append(
                "messages.append",
                {"session_id": sid, "messages": [{"role": "user", "content": t}]},
                batch_id=f"{path.name}-{i}",
            )


def _apply(store, spool_dir: Path) -> int:
    entries = take_chunk(SpoolReader(spool_dir).read(START, max_bytes=8 << 20), 10_000)
    return store.apply_chunk(entries, lambda *a: pytest.fail(f"rejected {a[1:]}")).applied


def _writer(url: str, root: Path, spool_id: str):
    """A writer's store (it claims its spool id, as the production writer does)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "spool-id").write_text(spool_id)
    return open_url(url, root / "state.db", spool_id, holder=holder(root / "spool-id"))


def _index(url: str) -> tuple[str, int | None]:
    """``(state, oid)`` of ``messages_ack`` in the store's schema."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT c.oid, i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE c.relname = 'messages_ack' AND c.relnamespace = current_schema()::regnamespace"
        ).fetchone()
    if row is None:
        return "missing", None
    return ("valid" if row[1] else "invalid"), row[0]


def _wait(cond, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.1)
    pytest.fail(f"timed out after {timeout} s waiting for {what}")


def _building(url: str) -> int:
    """How many builds of ``messages_ack`` the server runs now (its progress view)."""
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(
            "SELECT count(*) FROM pg_stat_progress_create_index p JOIN pg_class c "
            "ON c.oid = p.index_relid WHERE c.relname = 'messages_ack' "
            "AND c.relnamespace = current_schema()::regnamespace"
        ).fetchone()[0]


def _store_without_index(tmp_path: Path, url: str) -> None:
    """A store with rows in session ``shared`` whose order-key index is gone."""
    _spool(tmp_path / "b", "shared", [f"b{i}" for i in range(200)])
    store = open_url(url, tmp_path / "b.db", "host-b")
    try:
        assert _apply(store, tmp_path / "b") == 200
    finally:
        store.close()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP INDEX messages_ack")


def _hold_a_write(url: str) -> psycopg.Connection:
    """An open transaction holding ROW EXCLUSIVE on ``messages``, as an open insert does."""
    conn = psycopg.connect(url)
    conn.execute("LOCK TABLE messages IN ROW EXCLUSIVE MODE")
    return conn


def _contents(url: str, sid: str) -> list[str]:
    with psycopg.connect(url) as conn:
        return [
            r[0]
            for r in conn.execute(
                "SELECT content FROM messages WHERE session_id = %s ORDER BY seq", (sid,)
            )
        ]


def test_writers_apply_while_the_order_index_builds(tmp_path, pg_store_url):
    """A writer opens a store whose rows lack the index: it builds it concurrently. While the
    build waits for an open write, both this writer and another host's writer apply at once,
    late ops included (placed right without the index); when the write ends the index is
    valid. Old code never builds it on a store at the current layout."""
    url = pg_store_url
    _spool(tmp_path / "a", "shared", [f"a{i}" for i in range(20)])  # acknowledged first: late
    time.sleep(0.01)
    _store_without_index(tmp_path, url)
    _spool(tmp_path / "c", "other", [f"c{i}" for i in range(50)])
    blocker = _hold_a_write(url)
    a = _writer(url, tmp_path / "host-a", "host-a")
    try:
        _wait(lambda: _building(url) == 1, 30, "the concurrent build to start")
        assert _index(url)[0] == "invalid"  # being built: not used by the planner yet

        done: dict[str, int] = {}

        def apply_c():
            c = open_url(url, tmp_path / "c.db", "host-c")
            try:
                done["c"] = _apply(c, tmp_path / "c")
            finally:
                c.close()

        other = threading.Thread(target=apply_c)
        other.start()
        other.join(30)
        assert done.get("c") == 50, "another host's writer was blocked by the build"
        assert _apply(a, tmp_path / "a") == 20  # the building host's own writer: late ops
        assert _building(url) == 1 and _index(url)[0] == "invalid"  # still waiting
        assert _contents(url, "shared") == [f"a{i}" for i in range(20)] + [
            f"b{i}" for i in range(200)
        ]
        blocker.rollback()
        _wait(lambda: _index(url)[0] == "valid", 60, "the index to become valid")
        # The server marks the index valid before ``ensure`` returns to the builder's thread.
        _wait(lambda: "messages_ack" in a._index_builder.outcome, 30, "the builder's outcome")
        assert a._index_builder.outcome["messages_ack"]["outcome"] == "built"
    finally:
        blocker.close()
        a.close()
    assert _contents(url, "other") == [f"c{i}" for i in range(50)]


def test_an_invalid_index_left_by_an_interrupted_build_is_rebuilt(tmp_path, pg_store_url):
    """A build whose session ended mid-way (its host crashed) leaves ``messages_ack``
    INVALID: never used, still maintained. The next writer to connect drops it and builds it
    again. Old code: ``CREATE INDEX IF NOT EXISTS`` sees it and leaves it INVALID forever."""
    url = pg_store_url
    _store_without_index(tmp_path, url)
    blocker = _hold_a_write(url)
    crashed = psycopg.connect(url, autocommit=True)
    pid = crashed.info.backend_pid
    build = threading.Thread(
        target=lambda: pytest.raises(
            psycopg.Error,
            crashed.execute,
            f"CREATE INDEX CONCURRENTLY messages_ack ON messages ({order_index.COLUMNS})",
        )
    )
    build.start()
    _wait(lambda: _building(url) == 1, 30, "the first build to start")
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    build.join(30)
    blocker.close()
    state, old_oid = _index(url)
    assert state == "invalid"
    a = _writer(url, tmp_path / "host-a", "host-a")
    try:
        _wait(lambda: _index(url)[0] == "valid", 60, "the index to be rebuilt")
        assert _index(url)[1] != old_oid  # dropped and built again
        _wait(lambda: a._index_builder.outcome, 30, "the builder's outcome")
        assert a._index_builder.outcome["messages_ack"]["outcome"] == "rebuilt"
    finally:
        a.close()


def test_a_store_closed_while_its_index_builds_cancels_the_build(tmp_path, pg_store_url):
    """Closing a writer's store while its builder's ``CREATE INDEX CONCURRENTLY`` waits (for an
    open write) cancels the statement on the server and ends the thread within the close: no
    build of the closed store's is left running, its INVALID index is left for the next
    builder, which replaces it. Old code: the close raised ``AttributeError`` (no ``cancel``)
    and left the build running on the server."""
    url = pg_store_url
    _store_without_index(tmp_path, url)
    blocker = _hold_a_write(url)
    a = _writer(url, tmp_path / "host-a", "host-a")
    try:
        _wait(lambda: _building(url) == 1, 30, "the build to start")
        builder = a._index_builder
        a.close()
        assert not builder.alive  # the close cancelled the build and joined the thread
        _wait(lambda: _building(url) == 0, 60, "the cancelled build to end on the server")
        assert _index(url)[0] == "invalid" and builder.outcome == {}
    finally:
        blocker.close()
    b = _writer(url, tmp_path / "host-b", "host-b")
    try:
        _wait(lambda: "messages_ack" in b._index_builder.outcome, 60, "the next build")
        assert b._index_builder.outcome["messages_ack"]["outcome"] == "rebuilt"
        assert _index(url)[0] == "valid"
    finally:
        b.close()


def test_hosts_opening_at_once_build_the_index_once(tmp_path, pg_store_url, monkeypatch):
    """Two writers connect while the index is missing: one builds it; the other finds the
    build in progress (the index INVALID, its lock held) and leaves it alone, however often it
    looks, instead of dropping it or starting a second build."""
    monkeypatch.setattr(order_index, "RETRY_S", 0.2)
    url = pg_store_url
    _store_without_index(tmp_path, url)
    blocker = _hold_a_write(url)
    a = _writer(url, tmp_path / "host-a", "host-a")
    b = None
    try:
        _wait(lambda: _building(url) == 1, 30, "the first build to start")
        oid = _index(url)[1]
        b = _writer(url, tmp_path / "host-c", "host-c")
        assert b._index_builder is not None and b._index_builder.alive
        for _ in range(10):  # b looks again every 0.2 s meanwhile
            time.sleep(0.2)
            assert _building(url) == 1 and _index(url) == ("invalid", oid)
        blocker.rollback()
        _wait(lambda: _index(url)[0] == "valid", 60, "the index to become valid")
        assert _index(url)[1] == oid  # the first build's index, never dropped
        _wait(lambda: not b._index_builder.alive, 60, "the second builder to see it built")
        assert b._index_builder.outcome == {"messages_ack": {"outcome": "present", "seconds": 0.0}}
    finally:
        blocker.close()
        a.close()
        if b is not None:
            b.close()


def test_integrity_check_skips_an_index_still_being_built(tmp_path, pg_store_url):
    """amcheck refuses an INVALID index (one being built concurrently, or left by a crash):
    the integrity check checks the valid ones and passes instead of failing the job."""
    url = pg_store_url
    _store_without_index(tmp_path, url)
    blocker = _hold_a_write(url)
    crashed = psycopg.connect(url, autocommit=True)
    build = threading.Thread(
        target=lambda: pytest.raises(
            psycopg.Error,
            crashed.execute,
            f"CREATE INDEX CONCURRENTLY messages_ack ON messages ({order_index.COLUMNS})",
        )
    )
    build.start()
    _wait(lambda: _building(url) == 1, 30, "the build to start")
    store = open_url(url, tmp_path / "x.db", "host-x")
    try:
        figures = store.maintenance("integrity_check")
    finally:
        store.close()
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (crashed.info.backend_pid,))
        build.join(30)
        blocker.close()
    assert figures["ok"], figures["problems"]
    assert figures["indexes_checked"] >= 3


def test_a_new_store_has_the_index_at_once(tmp_path, pg_store_url):
    """An empty store is created with the index in its creation transaction (no builder)."""
    store = _writer(pg_store_url, tmp_path / "host-a", "host-a")
    try:
        assert _index(pg_store_url)[0] == "valid"
        assert store._index_builder is None
    finally:
        store.close()

"""PostgreSQL only (the per-session advisory locks serialize hosts; SQLite has one writer):
an op that touches sessions other than ``data.session_id`` — a ``sessions.delete``'s targets,
the delegate children it deletes and the children it detaches, a ``session.create``'s parent —
must wait for another host's chunk that holds those sessions' locks, so the two apply in one
serial order (docs/backends.md, "Per-session lock").

Two hosts = two spools with their own spool ids on one real PostgreSQL schema. Host B's chunk
is held open at the point ``apply_chunk`` reaches after its locks (BEGIN, locks, the ops
applied, no COMMIT yet), so the interleaving that can lose rows (message rows left without a
session) is reproduced every time, not by chance."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from quill.spool import START, Spool, SpoolReader
from quill.store.apply.chunk import apply_entries
from quill.store.factory import open_url as open_backend
from quill.store.postgres import apply as pg_apply


class Host:
    """One host: its own spool (and spool id) and backend on the shared store."""

    def __init__(self, root: Path, url: str, name: str):
        self.spool = Spool(root / name / "spool")
        self.dir = root / name / "spool"
        self.backend = open_backend(url, root / name / "state.db", f"host-{name}")
        self.conn = self.backend.conn
        self.spool_id = f"host-{name}"

    def entries(self) -> list:
        cursor = self.backend.read_cursor()
        from quill.spool import Position

        start = START if cursor is None else Position(*cursor)
        return list(SpoolReader(self.dir).read(start, max_bytes=1 << 40))

    def apply(self, op: str, data: dict) -> None:
        self.spool.append(op, data)
        rejects: list = []
        self.backend.apply_chunk(self.entries(), lambda e, reason, detail: rejects.append(reason))
        assert rejects == []

    def open_chunk(self, ops: list[tuple[str, dict]]) -> None:
        """Apply ``ops`` as ``apply_chunk`` does, up to its COMMIT: BEGIN, the chunk's
        session locks, the ops. ``commit()`` finishes it."""
        for op, data in ops:
            self.spool.append(op, data)
        entries = self.entries()
        self.conn.execute("BEGIN IMMEDIATE")
        self.conn.execute(pg_apply._LOCK_SQL, (pg_apply.session_ids(entries),)).fetchall()
        apply_entries(
            self.conn,
            entries,
            time.time(),
            lambda e, r, d: pytest.fail(r),
            pg_apply.PgLedger(self.spool_id),
        )
        self.last = entries[-1].next

    def commit(self) -> None:
        self.conn.execute(
            'INSERT INTO spool_cursor (spool_id, segment, "offset", updated_at) '
            "VALUES (?, ?, ?, ?) ON CONFLICT (spool_id) DO UPDATE SET segment = excluded.segment, "
            '"offset" = excluded."offset"',
            (self.spool_id, *self.last, time.time()),
        )
        self.conn.execute("COMMIT")

    def close(self) -> None:
        self.backend.close()
        self.spool.close()


@pytest.fixture
def hosts(tmp_path, pg_store_url):
    a, b = Host(tmp_path, pg_store_url, "a"), Host(tmp_path, pg_store_url, "b")
    yield a, b
    a.close()
    b.close()


def _msgs(tag: str, n: int) -> list[dict]:
    return [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"{tag} {i}"} for i in range(n)
    ]


def _race(a: Host, b: Host, b_ops: list[tuple[str, dict]], delete_ids: list[str]) -> bool:
    """B holds a chunk of ``b_ops`` open while A applies a ``sessions.delete`` of
    ``delete_ids``; then B commits. Returns whether A's delete had waited for B."""
    b.open_chunk(b_ops)
    done = threading.Event()
    errors: list[BaseException] = []

    def delete() -> None:
        try:
            a.apply(
                "sessions.delete",
                {"session_ids": delete_ids, "reason": "user_request", "actor": "user:test"},
            )
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)
        done.set()

    thread = threading.Thread(target=delete)
    thread.start()
    waited = not done.wait(1.0)
    b.commit()
    thread.join(30)
    assert not thread.is_alive() and errors == []
    return waited


def _orphans(conn) -> tuple[int, list]:
    rows = conn.execute(
        "SELECT count(*) FROM messages m WHERE NOT EXISTS "
        "(SELECT 1 FROM sessions s WHERE s.id = m.session_id)"
    ).fetchone()[0]
    dangling = conn.execute(
        "SELECT c.id, c.parent_id FROM sessions c WHERE c.parent_id IS NOT NULL AND NOT EXISTS "
        "(SELECT 1 FROM sessions p WHERE p.id = c.parent_id)"
    ).fetchall()
    return rows, dangling


def test_a_delete_waits_for_another_hosts_append_to_its_target(hosts):
    a, b = hosts
    a.apply("messages.append", {"session_id": "x", "messages": _msgs("seed", 2)})
    waited = _race(
        a, b, [("messages.append", {"session_id": "x", "messages": _msgs("late", 200)})], ["x"]
    )
    assert waited
    assert _orphans(a.conn) == (0, [])
    assert a.conn.execute("SELECT count(*) FROM messages WHERE session_id = 'x'").fetchone()[0] == 0


def test_a_delete_waits_for_another_hosts_append_to_a_delegate_child(hosts):
    a, b = hosts
    a.apply("messages.append", {"session_id": "parent", "messages": _msgs("p", 2)})
    a.apply(
        "session.create",
        {
            "session_id": "child",
            "source": "subagent",
            "parent_id": "parent",
            "parent_kind": "delegate",
        },
    )
    a.apply(
        "session.create",
        {"session_id": "branch", "source": "cli", "parent_id": "parent", "parent_kind": "branch"},
    )
    b_ops = [("messages.append", {"session_id": "child", "messages": _msgs("c", 200)})]
    assert _race(a, b, b_ops, ["parent"])
    assert _orphans(a.conn) == (0, [])
    ids = {r[0] for r in a.conn.execute("SELECT id FROM sessions")}
    assert ids == {"branch"}  # the delegate went with its parent, the branch was detached


def test_a_delete_waits_for_another_hosts_create_of_a_child(hosts):
    a, b = hosts
    a.apply("messages.append", {"session_id": "parent", "messages": _msgs("p", 2)})
    b_ops = [
        (
            "session.create",
            {
                "session_id": "new-child",
                "source": "subagent",
                "parent_id": "parent",
                "parent_kind": "delegate",
            },
        ),
        ("messages.append", {"session_id": "new-child", "messages": _msgs("n", 50)}),
    ]
    assert _race(a, b, b_ops, ["parent"])
    assert _orphans(a.conn) == (0, [])  # the child committed first, so it went with its parent
    assert a.conn.execute("SELECT count(*) FROM sessions").fetchone()[0] == 0


def test_lock_sessions_takes_the_named_sessions_and_a_deletes_descendants(hosts):
    a, b = hosts
    a.apply("session.create", {"session_id": "root", "source": "cli"})
    a.apply(
        "session.create",
        {"session_id": "kid", "source": "cli", "parent_id": "root", "parent_kind": "delegate"},
    )
    a.apply(
        "session.create",
        {"session_id": "grandkid", "source": "cli", "parent_id": "kid", "parent_kind": "reset"},
    )
    b.spool.append("sessions.delete", {"session_ids": ["root"]})
    b.spool.append(
        "session.create", {"session_id": "other", "parent_id": "elsewhere", "parent_kind": "branch"}
    )
    b.conn.execute("BEGIN")
    try:
        assert sorted(pg_apply.lock_sessions(b.conn, b.entries())) == [
            "elsewhere",
            "grandkid",
            "kid",
            "other",
            "root",
        ]
    finally:
        b.conn.execute("ROLLBACK")

"""A late op (acknowledged before rows another host's writer applied first) costs the same
in a long session as in a short one, on both backends: it is placed in the gap ``seq`` leaves
before those rows, so no row of the session moves (store/apply/order.py).

Cost is counted, not timed: the rows whose ``seq``/``pos`` changed, and the statements the
placement ran. The order itself is checked against the order keys every time.
"""

from __future__ import annotations

import random

import pytest

from quill.store.apply import order
from quill.store.apply.messages import messages_append

TAG_A, TAG_B = 1, 2  # two spools' tie-break tags


class Counting:
    """A real store connection that counts the statements run through it (nothing else
    changes: every call goes to the connection)."""

    def __init__(self, conn):
        self.conn, self.statements = conn, 0

    def execute(self, sql, args=()):
        self.statements += 1
        return self.conn.execute(sql, args)

    def executemany(self, sql, rows):
        self.statements += 1
        return self.conn.executemany(sql, rows)

    def __getattr__(self, name):
        return getattr(self.conn, name)


@pytest.fixture
def store(backend, tmp_path):
    """An open writer connection of each backend: ``(conn, commit)``."""
    if backend is None:
        from quill.store import open_writer

        conn = open_writer(tmp_path / "state.db")
        yield conn
        conn.close()
    else:
        from quill.store.postgres import PostgresBackend

        pg = PostgresBackend(backend, "test")
        yield pg.conn
        pg.close()


def _append(conn, sid: str, key: tuple[int, int, int], text: str) -> None:
    data = {"session_id": sid, "messages": [{"role": "user", "content": text}]}
    conn.execute("BEGIN")
    with order.applying(key):
        messages_append(conn, data, f"b-{sid}-{key}", key[0] / 1e6)
    conn.execute("COMMIT")


def _labels(conn, sid: str) -> dict[str, tuple[int, int]]:
    rows = conn.execute(
        "SELECT quill_text(content), seq, pos FROM messages WHERE session_id = ?", (sid,)
    ).fetchall()
    return {r[0]: (r[1], r[2]) for r in rows}


def _in_order(conn, sid: str) -> list[str]:
    return [
        r[0]
        for r in conn.execute(
            "SELECT quill_text(content) FROM messages WHERE session_id = ? ORDER BY seq", (sid,)
        )
    ]


def _late_op_cost(conn, sid: str, length: int) -> tuple[int, int]:
    """Host A's first turn, then ``length`` turns of host B (acknowledged later, applied
    first), then host A's late second turn, which belongs right after its first. Returns
    (rows moved, statements run) by the late op."""
    _append(conn, sid, (1_000, TAG_A, 1), "a0")
    for i in range(length):
        _append(conn, sid, (2_000 + i, TAG_B, i), f"b{i}")
    before = _labels(conn, sid)
    counting = Counting(conn)
    _append(counting, sid, (1_500, TAG_A, 2), "a1")
    after = _labels(conn, sid)
    assert _in_order(conn, sid) == ["a0", "a1", *(f"b{i}" for i in range(length))]
    moved = sum(1 for text, labels in before.items() if after[text] != labels)
    return moved, counting.statements


def test_a_late_op_into_a_long_session_costs_what_it_costs_in_a_short_one(store):
    short = _late_op_cost(store, "short", 3)
    long = _late_op_cost(store, "long", 600)
    assert long[0] == short[0] == 0, (short, long)  # no row of either session moved
    assert long[1] == short[1], (short, long)  # and the same statements ran


def test_a_run_of_late_ops_into_one_gap_keeps_ack_order_and_moves_few_rows(store):
    """Host A's backlog lands op after op in the one gap before host B's rows; when the gap is
    used up a small window is relabelled, never the session."""
    _append(store, "run", (1_000, TAG_A, 0), "a0")
    for i in range(200):
        _append(store, "run", (100_000 + i, TAG_B, i), f"b{i}")
    moved = 0
    for j in range(1, 320):  # more than the gap holds at its first spacing
        before = _labels(store, "run")
        _append(store, "run", (1_000 + j, TAG_A, j), f"a{j}")
        after = _labels(store, "run")
        moved += sum(1 for text, labels in before.items() if after[text] != labels)
    assert _in_order(store, "run") == [f"a{j}" for j in range(320)] + [f"b{i}" for i in range(200)]
    assert moved <= 16, moved  # the old renumbering moved 200 rows per op: 63,800


def test_arrival_in_any_order_reads_in_key_order_with_compaction_positions(store, monkeypatch):
    """Random keys arriving in random order, with gaps shrunk so that windows are relabelled
    often: ``seq`` order is always key order, and a compaction copy keeps its original's
    display position (``pos``) through every relabelling."""
    monkeypatch.setattr(order, "STRIDE", 8)
    monkeypatch.setattr(order, "_LATE_STEP", 2)
    monkeypatch.setattr(order, "_MIN_GAP", 2)
    rng = random.Random(7)
    keys = [(rng.randrange(10_000), rng.choice((TAG_A, TAG_B)), i) for i in range(150)]
    for key in keys:
        _append(store, "rnd", key, f"k{key[2]}")
    want = [f"k{k[2]}" for k in sorted(keys)]
    assert _in_order(store, "rnd") == want
    # A copy placed at its original's position follows it whatever moves later.
    first = store.execute(
        "SELECT id, seq FROM messages WHERE session_id = 'rnd' ORDER BY seq LIMIT 1"
    ).fetchone()
    store.execute(  # as messages.compact's copy of the first row would be
        "UPDATE messages SET pos = ? WHERE session_id = 'rnd' AND quill_text(content) = ?",
        (first[1], want[-1]),
    )
    for key in [(rng.randrange(10_000), TAG_A, 1_000 + i) for i in range(60)]:
        _append(store, "rnd", key, f"k{key[2]}")
        keys.append(key)
    assert _in_order(store, "rnd") == [f"k{k[2]}" for k in sorted(keys)]
    labels = _labels(store, "rnd")
    assert labels[want[-1]][1] == labels[want[0]][0]  # the copy's pos is its original's seq
    assert all(p == s for text, (s, p) in labels.items() if text != want[-1])

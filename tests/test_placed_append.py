"""``messages.append`` with ``order_keys`` (store/apply/placed.py), on both backends through
the real spool and the one drain loop: a transcript delivered in pieces that repeat each
other (as OTLP chat spans repeat the history before them), in every order, gives one
transcript — each message at the earliest place and with the earliest time any delivery
gives it — and a store rebuilt from the spool (from empty, or from a copy taken midway plus
the rest of the spool) equals the live one, row for row.
"""

from __future__ import annotations

import itertools
import os
import random
import shutil

import apsw
import pytest
from semantics_helpers import Store

from quill.spool import START, SpoolReader
from quill.store.apply import order
from quill.store.apply.precheck import precheck
from quill.store.errors import InvalidOpError

S = 1_000_000  # µs per second
T = 1_700_000_000.0  # the epoch second the times below count from


def _msg(ext: str, role: str, ts: float, **kw) -> dict:
    """A message stamped ``ts`` seconds after ``T``."""
    return {"id": ext, "role": role, "content": kw.pop("content", ext), "timestamp": T + ts, **kw}


def _calls(call_id: str) -> dict:
    return {"tool_calls": [{"id": call_id, "type": "function", "function": {"name": "f"}}]}


SYS = ("sys", "system")
U1 = ("u1", "user")
C1 = ("c1", "assistant", _calls("k1"))
R1 = ("r1", "tool", {"tool_call_id": "k1", "name": "f"})
A1 = ("a1", "assistant")
U2 = ("u2", "user")
C2 = ("c2", "assistant", _calls("k2"))
R2 = ("r2", "tool", {"tool_call_id": "k2", "name": "f"})


def _span(start: float, end: float, tie: int, inputs: list, outputs: list) -> dict:
    """One delivery as an OTLP chat or tool span makes it: its inputs stamped with its start,
    its outputs with its end, keyed ``[start µs, tie, index]``."""
    msgs, keys = [], []
    for i, (spec, ts) in enumerate([(m, start) for m in inputs] + [(m, end) for m in outputs]):
        ext, role, *extra = spec
        msgs.append(_msg(ext, role, ts, **(extra[0] if extra else {})))
        if spec in outputs and role == "assistant":  # an input repeats it without
            msgs[-1]["finish_reason"] = "stop"
        keys.append([round((T + start) * S), tie, i])
    return {"source": "otlp", "messages": msgs, "order_keys": keys}


#: A two-turn conversation with a tool call per turn, as five spans deliver it.
DELIVERIES = [
    _span(100.0, 101.0, 7, [SYS, U1], [C1]),  # chat 1
    _span(101.5, 102.0, 3, [], [R1]),  # the tool span of k1
    _span(102.5, 103.0, 9, [SYS, U1, C1, R1], [A1]),  # chat 2
    _span(104.0, 105.0, 1, [SYS, U1, C1, R1, A1, U2], [C2]),  # chat 3
    _span(105.5, 106.0, 5, [], [R2]),  # the tool span of k2
]
#: The one transcript every order must give: (id, time).
EXPECTED = [
    ("sys", 100.0, None),
    ("u1", 100.0, None),
    ("c1", 101.0, "stop"),
    ("r1", 102.0, None),
    ("a1", 103.0, "stop"),
    ("u2", 104.0, None),
    ("c2", 105.0, "stop"),
    ("r2", 106.0, None),
]


@pytest.fixture
def stores(tmp_path, backend, request):
    """Two stores on the backend under test: ``live`` and ``rebuilt`` (empty)."""
    second = None if backend is None else request.getfixturevalue("pg_schemas")()
    live, rebuilt = Store(tmp_path / "live", backend), Store(tmp_path / "rebuilt", second)
    yield live, rebuilt
    live.close()
    rebuilt.close()


def _transcript(store: Store, sid: str) -> list[tuple]:
    """``(id, ts, finish_reason)`` in transcript order, checking that display positions
    agree with it."""
    rows = store.conn.execute(
        "SELECT ext_id, ts, finish_reason, seq, pos FROM messages WHERE session_id = ? "
        "ORDER BY seq",
        (sid,),
    ).fetchall()
    assert [r[3] for r in rows] == [r[4] for r in rows]  # no copies here: pos is its seq
    return [(r[0], r[1] - T, r[2]) for r in rows]


def _all_rows(store: Store) -> list[tuple]:
    """Every message row (every column) and session row of the store, by id."""
    return [
        tuple(r) for r in store.conn.execute("SELECT * FROM messages ORDER BY id").fetchall()
    ] + [tuple(r) for r in store.conn.execute("SELECT * FROM sessions ORDER BY id").fetchall()]


def _replay(live: Store, into: Store, start=START) -> None:
    """Apply ``live``'s spool from ``start`` to ``into`` (a rebuild's replay)."""
    entries = list(SpoolReader(live.root / "spool").read(start, max_bytes=1 << 40))
    into.backend.apply_chunk(entries, lambda e, reason, detail: pytest.fail(reason))


def test_every_order_of_the_deliveries_gives_one_transcript_and_the_rebuild_equals_it(stores):
    """Places, times and finish reasons (an output's, which the next span's input repeats
    without) are those one request of all five spans stores, whatever the order."""
    live, rebuilt = stores
    orders = list(itertools.permutations(range(len(DELIVERIES))))
    if not os.environ.get("QUILL_TORTURE"):  # 24 of the 120 orders (all: QUILL_TORTURE=1)
        orders = [orders[0], orders[-1], *random.Random(0).sample(orders[1:-1], 22)]
    for k, perm in enumerate(orders):  # each order in its own session, all in one spool
        for i in perm:
            live.spool.append("messages.append", {**DELIVERIES[i], "session_id": f"p{k}"})
    assert live.drain() == []
    for k, perm in enumerate(orders):
        assert _transcript(live, f"p{k}") == EXPECTED, f"deliveries in the order {perm}"
        # The session starts at its earliest message, whichever delivery came first.
        started = live.conn.execute(
            "SELECT started_at FROM sessions WHERE id = ?", (f"p{k}",)
        ).fetchone()[0]
        assert started == T + 100.0
    _replay(live, rebuilt)
    assert _all_rows(rebuilt) == _all_rows(live)


def test_a_repeat_only_lowers_a_message_time_and_every_order_agrees(stores):
    """The time rule alone: the same message at the same key, stamped differently by each
    delivery (a later span repeating it stamps it with its own, later start)."""
    live, rebuilt = stores
    key = [[100 * S, 1, 0], [100 * S, 1, 1]]
    stamps = [(130.0, 131.0), (110.0, 140.0), (120.0, 105.0)]
    orders = list(itertools.permutations(range(len(stamps))))
    for k, perm in enumerate(orders):
        for i in perm:
            a, b = stamps[i]
            data = {"session_id": f"t{k}", "order_keys": key}
            data["messages"] = [_msg("x", "user", a), _msg("y", "assistant", b)]
            live.spool.append("messages.append", data)
    assert live.drain() == []
    for k, perm in enumerate(orders):
        assert _transcript(live, f"t{k}") == [("x", 110.0, None), ("y", 105.0, None)], perm
    _replay(live, rebuilt)
    assert _all_rows(rebuilt) == _all_rows(live)


def test_moves_through_full_gaps_keep_the_order_and_a_midway_copy_plus_the_spool_rebuilds_it(
    stores, tmp_path, monkeypatch
):
    """Sixty messages delivered one by one in a random order, each later delivered again
    with an earlier key in another random order: rows are placed late and moved into gaps
    until they are full (``order`` relabels a window), and the order is the keys' order.
    A copy of the store taken midway plus the rest of the spool gives the same store (SQLite:
    the file copied, as a snapshot is; PostgreSQL: the first half replayed into it)."""
    live, rebuilt = stores
    rng = random.Random(28)
    n = 60
    first = list(range(n))
    rng.shuffle(first)
    for i in first:
        data = {"session_id": "m", "order_keys": [[(1000 + i) * S, 0, 0]]}
        data["messages"] = [_msg(f"m{i:02d}", "user", 1000.0 + i)]
        live.spool.append("messages.append", data)
    assert live.drain() == []
    cursor = SpoolReader(live.root / "spool").end()
    if live.kind == "sqlite":  # a snapshot: the backup API's copy of the live file
        rebuilt.close()
        copy = apsw.Connection(str(tmp_path / "copy.db"))
        with copy.backup("main", live.conn, "main") as job:
            job.step()
        copy.close()
        shutil.copy(tmp_path / "copy.db", tmp_path / "rebuilt" / "state.db")
        rebuilt = Store(tmp_path / "rebuilt", None)
    else:
        _replay(live, rebuilt)
    again = list(range(n))
    rng.shuffle(again)
    for i in again:  # the same message, now keyed before every first delivery, reversed
        data = {"session_id": "m", "order_keys": [[10 * S, 0, n - i]]}
        data["messages"] = [_msg(f"m{i:02d}", "user", 2000.0)]
        live.spool.append("messages.append", data)
    relabels = []
    monkeypatch.setattr(
        order, "_relabel", lambda *a, _f=order._relabel: relabels.append(a) or _f(*a)
    )
    assert live.drain() == []
    assert relabels  # the moves filled a gap: a window was relabelled
    got = _transcript(live, "m")
    assert got == [(f"m{i:02d}", 1000.0 + i, None) for i in reversed(range(n))]
    _replay(live, rebuilt, cursor)
    assert _all_rows(rebuilt) == _all_rows(live)
    rebuilt.close()


def test_order_keys_are_checked_by_the_content_rules():
    """A wrong ``order_keys`` is refused by the content rules, so precheck (the producer's
    side) refuses what the writer would."""
    data = {"session_id": "s", "messages": [_msg("x", "user", 1.0)], "order_keys": [[1, 2]]}
    with pytest.raises(InvalidOpError) as err:
        precheck("messages.append", data)
    assert err.value.reason == "invalid-field"
    for bad in ([[1, 2, -1]], [[True, 0, 0]], [[1 << 62, 0, 0]], [[0, 1 << 63, 0]], [], "x"):
        with pytest.raises(InvalidOpError):
            order.stated_keys({"order_keys": bad}, 1)
    keyed = {**data, "order_keys": [[1, 2, 3]]}
    precheck("messages.append", keyed)  # accepted
    with pytest.raises(InvalidOpError):  # the last copy against the earliest: not both
        precheck("messages.append", {**keyed, "revise": True})
    assert order.stated_keys({"order_keys": [None]}, 1) == [None]
    assert order.stated_keys({}, 3) is None


def test_a_plain_repeat_changes_nothing_and_a_keyed_one_never_moves_a_row_later(stores):
    live, _ = stores
    base = {"session_id": "s", "source": "x"}
    live.spool.append("messages.append", {**base, "messages": [_msg("a", "user", 200.0)]})
    live.spool.append("messages.append", {**base, "messages": [_msg("b", "user", 300.0)]})
    assert live.drain() == []
    before = live.rows("s")
    live.spool.append("messages.append", {**base, "messages": [_msg("a", "user", 100.0)]})
    assert live.drain() == [] and live.rows("s") == before  # no order_keys: skipped as before
    # A keyed repeat at a later key and a later time than the row has: nothing moves.
    later = {**base, "order_keys": [[2**61, 0, 0]], "messages": [_msg("a", "user", 250.0)]}
    live.spool.append("messages.append", later)
    assert live.drain() == [] and live.rows("s") == before
    # An earlier time lowers it, in place (its key is already earlier than b's).
    live.spool.append("messages.append", {**later, "messages": [_msg("a", "user", 150.0)]})
    assert live.drain() == []
    assert _transcript(live, "s") == [("a", 150.0, None), ("b", 300.0, None)]

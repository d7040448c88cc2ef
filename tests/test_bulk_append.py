"""Runs of ``messages.append`` applied together (store/apply/bulk.py) leave the store the
op-at-a-time path leaves, row for row, and refuse the same ops with the same reasons.

Each seeded sequence writes a real spool of mostly appends (repeated producer ids within and
across ops, tool results that reuse a call id — some refused as ``duplicate-tool-result`` in
the store phase —, usage with repeated response ids, invalid usage, invalid messages, blobs,
sources given late, batch ids re-sent with the same or other content) mixed with creates,
automatic and deliberate ends (reopening) and deletes (the id floor). The spool is applied
twice to fresh SQLite stores in large chunks by the one drain loop (``workers.drain.Drain``
over the store ``store.factory.open_url`` returns): once with bulk runs (production) and
once with the ledger's bulk runs off (each op in its own SAVEPOINT, as the PostgreSQL backend
does). Every table must match, every column except the drain's own clock, and the
quarantine calls must match in order.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from harness import RecordingDrain

from quill.spool import Quarantine, Spool, SpoolReader
from quill.store import open_writer
from quill.store.apply.ledger import SqliteLedger
from quill.store.factory import open_url

SESSIONS = ["a", "b", "c", "d"]
#: (table, column) that hold when the drain ran, not what it stored.
VOLATILE = {
    ("applied_batches", "applied_at"),
    ("rejected_batches", "rejected_at"),
    ("spool_cursor", "updated_at"),
}


def _message(rng: random.Random, n: int) -> dict:
    role = rng.choice(
        ["user", "assistant", "assistant", "tool"] + (["bogus"] if rng.random() < 0.02 else [])
    )
    msg: dict = {"role": role, "content": rng.choice(["hello", "fix the bug", "done", "ok ok"])}
    if rng.random() < 0.6:
        msg["id"] = f"m{rng.randrange(n + 3)}"  # repeats: skipped within an op and across ops
    if role == "assistant" and rng.random() < 0.3:
        msg["tool_calls"] = [
            {
                "id": f"c{rng.randrange(30)}",
                "type": "function",
                "function": {"name": "bash", "arguments": '{"cmd": "ls"}'},
            }
        ]
    if role == "tool":
        msg["tool_call_id"] = f"c{rng.randrange(30)}"
    if role == "assistant" and rng.random() < 0.4:
        bad = rng.random() < 0.05
        msg["usage"] = {
            "prompt_tokens": -1 if bad else rng.randint(1, 99),
            "completion_tokens": rng.randint(1, 9),
        }
        if rng.random() < 0.5:
            msg["response_id"] = f"r{rng.randrange(8)}"
            msg["model"] = rng.choice(["gpt-4o", None])
    if rng.random() < 0.03:
        msg["content"] = [
            {"type": "text", "text": "see"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "QUJD" * 400}},
        ]
    return msg


def write_spool(spool_dir: Path, seed: int, ops: int = 160) -> None:
    rng = random.Random(seed)
    sent: list[tuple[str, str, dict]] = []
    with Spool(spool_dir, fsync=False) as sp:
        for i in range(ops):
            sid = rng.choice(SESSIONS)
            r = rng.random()
            if r < 0.05 and sent:  # a retry (same content) or a reused batch id (other content)
                batch, op, data = rng.choice(sent)
                if rng.random() < 0.5:
                    data = {**data, "session_id": rng.choice(SESSIONS)}
                sp.append(op, data, batch_id=batch)
                continue
            if r < 0.10:
                op, data = (
                    "session.create",
                    {"session_id": sid, "source": rng.choice(["cli", "cron"])},
                )
            elif r < 0.15:
                op, data = (
                    "session.end",
                    {"session_id": sid, "reason": rng.choice(["agent_close", "user_exit"])},
                )
            elif r < 0.17:
                op, data = (
                    "sessions.delete",
                    {"session_ids": [sid], "reason": "user", "actor": "user:test"},
                )
            else:
                op, data = (
                    "messages.append",
                    {
                        "session_id": sid,
                        "messages": [_message(rng, i) for _ in range(rng.randint(0, 6))],
                    },
                )
                if rng.random() < 0.3:
                    data["source"] = rng.choice(["cli", "claude-code"])
                if rng.random() < 0.02:
                    data["session_id"] = " bad id"
            batch = f"b{i}"
            sp.append(op, data, batch_id=batch)
            sent.append((batch, op, data))


def apply_all(spool_dir: Path, db: Path, chunk_rows: int) -> list[tuple[str, str]]:
    """Drain the whole spool into a new store ``db`` in chunks of ``chunk_rows`` rows;
    returns the quarantine calls (the quarantine beside ``db``)."""
    store = open_url(None, db, "local")
    try:
        drain = RecordingDrain(store, SpoolReader(spool_dir), Quarantine.for_store(db), chunk_rows)
        drain.start()
        drain.until_empty()
    finally:
        store.close()
    return [(position, reason) for reason, _, position in drain.rejects]


def dump(db: Path) -> dict[str, list[tuple]]:
    """Every row of every table except the FTS tables (the drain here never indexes)."""
    conn = open_writer(db)
    try:
        out = {}
        for (table,) in conn.execute(
            "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE "
            "'messages_fts%' AND name NOT LIKE 'messages_trigram%' ORDER BY name"
        ).fetchall():
            cols = [c[1] for c in conn.execute(f'PRAGMA table_info("{table}")')]
            sel = ", ".join("NULL" if (table, c) in VOLATILE else f'"{c}"' for c in cols)
            out[table] = conn.execute(f'SELECT {sel} FROM "{table}" ORDER BY 1').fetchall()
        return out
    finally:
        conn.close()


@pytest.mark.parametrize("seed", range(6))
def test_bulk_runs_equal_one_op_at_a_time(tmp_path: Path, seed: int, monkeypatch) -> None:
    write_spool(tmp_path / "spool", seed)
    chunk = random.Random(seed).choice([40, 200, 5000])
    bulk = apply_all(tmp_path / "spool", tmp_path / "bulk.db", chunk)
    with monkeypatch.context() as m:  # the reference: the ledger with bulk runs off
        m.setattr(SqliteLedger, "bulk_append", False)
        single = apply_all(tmp_path / "spool", tmp_path / "single.db", chunk)
    assert bulk == single
    a, b = dump(tmp_path / "bulk.db"), dump(tmp_path / "single.db")
    assert a.keys() == b.keys()
    for table in a:
        assert a[table] == b[table], table
    reasons = {r for _, r in bulk}
    assert a["messages"] and a["usage"]  # the sequence did write
    assert "duplicate-tool-result" in reasons or seed > 2  # the store-phase refusal is exercised
    assert reasons <= {
        "duplicate-tool-result",
        "invalid-usage",
        "invalid-role",
        "invalid-session-id",
        "batch-id-reused",
        "unknown-session",
    }


def test_refused_op_in_a_run_is_quarantined_alone(tmp_path: Path) -> None:
    """Five appends in one chunk; the third repeats a live tool result (refused only once the
    store is consulted): it alone is quarantined, the other four are applied around it."""
    msgs = [
        [{"role": "user", "content": "go"}],
        [{"role": "tool", "tool_call_id": "x", "content": "1"}],
        [
            {"role": "tool", "tool_call_id": "x", "content": "2"},
            {"role": "user", "content": "lost"},
        ],
        [
            {
                "role": "assistant",
                "content": "after",
                "usage": {"prompt_tokens": 3, "completion_tokens": 1},
            }
        ],
        [{"role": "user", "content": "last"}],
    ]
    with Spool(tmp_path / "spool", fsync=False) as sp:
        for i, m in enumerate(msgs):
            sp.append("messages.append", {"session_id": "s", "messages": m}, batch_id=f"b{i}")
    rejected = apply_all(tmp_path / "spool", tmp_path / "s.db", 500)
    assert [r for _, r in rejected] == ["duplicate-tool-result"]
    conn = open_writer(tmp_path / "s.db")
    try:
        rows = conn.execute(
            "SELECT m.id, quill_text(m.content), b.batch_id FROM messages m "
            "JOIN batches b ON b.id = m.batch "
            "ORDER BY m.id"
        ).fetchall()
        assert rows == [(1, "go", "b0"), (2, "1", "b1"), (3, "after", "b3"), (4, "last", "b4")]
        assert conn.execute("SELECT message_id, batch_id FROM usage").fetchall() == [(3, "b3")]
        assert conn.execute("SELECT batch_id, reason FROM rejected_batches").fetchall() == [
            ("b2", "duplicate-tool-result")
        ]
        assert sorted(r[0] for r in conn.execute("SELECT batch_id FROM applied_batches")) == [
            "b0",
            "b1",
            "b3",
            "b4",
        ]
    finally:
        conn.close()

"""The seeded op sequences of the rebuild property (tests/test_property_rebuild.py), shared
with the purge tests: ``Run`` appends random ops of every kind to a real spool, drains them
with the one drain loop (``workers.drain.Drain``) in small random chunks, indexes, runs the
real store jobs between chunks and takes real snapshots; ``dump`` reads a store's canonical
tables for comparison."""

from __future__ import annotations

import os
import random
import socket
import time
from pathlib import Path

from quill.jobs import prune, store_jobs
from quill.jobs.worker_jobs import snapshot
from quill.spool import Quarantine, Spool, SpoolReader
from quill.store import open_writer, packed, schema
from quill.store.factory import open_url
from quill.workers.drain import Drain

N = int(os.environ.get("QUILL_PROPERTY_N", "8"))
SEEDS = (
    [int(os.environ["QUILL_PROPERTY_SEED"])]
    if os.environ.get("QUILL_PROPERTY_SEED")
    else list(range(N))
)
DAY = 86400.0
SESSIONS = [f"s{i}" for i in range(6)]
TITLES = ["alpha", "beta", "gamma", "", None]
#: Canonical tables (the schema registry's ``CANONICAL`` role): what a user reads back, plus
#: what an op writes for later ops (session_deletions). Bookkeeping (cursor, applied/rejected
#: batches, job runs, state_meta) and derived data (FTS indexes) are excluded. A table added
#: to the schema is compared here without being named.
CANONICAL = tuple(t for t, role in schema.TABLES.items() if role == schema.CANONICAL)
#: Each table's primary key, the dump's order (usage ids are insertion order).
KEYS = {"blobs": "sha256", "session_deletions": "session_id"}
PROMPTS = ["You are a careful agent. " * 20, "You are terse."]
TOOLS = [
    [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}],
    [{"type": "function", "function": {"name": "edit"}}],
]


def dump(db: Path) -> dict[str, list[tuple]]:
    """Every row of every canonical table, every column, in primary-key order; a message's
    ``content`` as its text, whatever its stored form (``[store] pack_min_bytes``)."""
    conn = open_writer(db)
    try:
        out = {}
        for table in CANONICAL:
            if conn.execute("SELECT 1 FROM sqlite_schema WHERE name = ?", (table,)).fetchone():
                key = KEYS.get(table, "id")
                cols = [c[1] for c in conn.execute(f'PRAGMA table_info("{table}")')]
                sel = ", ".join(packed.text_sql(c) if c == "content" else c for c in cols)
                out[table] = conn.execute(f"SELECT {sel} FROM {table} ORDER BY {key}").fetchall()
        return out
    finally:
        conn.close()


class Run:
    """One seeded sequence against one data dir."""

    def __init__(self, root: Path, seed: int):
        self.rng = random.Random(seed)
        self.keyed = random.Random(-seed)  # which appends state order keys, and the keys
        self.revising = random.Random(seed + 10**6)  # which other appends send ``revise``
        self.root = root
        self.spool_dir = root / "spool"
        self.spool = Spool(self.spool_dir)
        self.db = root / "state.db"
        self.store = open_url(None, self.db, "local")
        self.conn = self.store.conn
        self.reader = SpoolReader(self.spool_dir)
        self.quarantine = Quarantine(self.spool_dir)
        self.drainer = Drain(self.store, self.reader, self.quarantine, 1)
        self.snapshots: list[Path] = []
        self.ext = 0

    # -- ops -----------------------------------------------------------------------------

    def message(self, role: str | None = None) -> dict:
        rng = self.rng
        role = role or rng.choice(["user", "assistant", "assistant", "tool", "system"])
        msg: dict = {
            "role": role,
            "content": rng.choice(["hello", "fix the bug", "done", "prunedword", "ok ok"]),
        }
        if rng.random() < 0.5:
            self.ext += 1
            msg["id"] = f"m{rng.randrange(self.ext + 1)}"  # repeats exercise idempotent appends
        if role == "assistant" and rng.random() < 0.3:
            msg["tool_calls"] = [
                {
                    "id": f"c{rng.randrange(4)}",
                    "type": "function",
                    "function": {"name": "bash", "arguments": '{"cmd": "ls"}'},
                }
            ]
        if role == "tool":
            msg["tool_call_id"] = f"c{rng.randrange(4)}"
        if rng.random() < 0.1:
            msg["timestamp"] = rng.choice([1_700_000_000, "2024-01-01T00:00:00Z", 5])
        if role == "assistant" and rng.random() < 0.2:
            msg["usage"] = {
                "prompt_tokens": rng.randint(1, 99),
                "completion_tokens": rng.randint(1, 9),
            }
        if rng.random() < 0.05:
            msg["content"] = [
                {"type": "text", "text": "see"},
                {
                    "type": "image_url",
                    "image_url": {"url": "data:image/png;base64," + "QUJD" * 300},
                },
            ]
        return msg

    def message_id(self, sid: str) -> int | None:
        ids = [
            r[0] for r in self.conn.execute("SELECT id FROM messages WHERE session_id = ?", (sid,))
        ]
        return self.rng.choice(ids) if ids else None

    def random_op(self) -> tuple[str, dict]:
        rng = self.rng
        sid = rng.choice(SESSIONS)
        kind = rng.choices(
            [
                "create",
                "append",
                "end",
                "title",
                "flags",
                "read",
                "compact",
                "rewind",
                "replace",
                "delete",
                "usage",
            ],
            weights=[3, 8, 2, 2, 2, 1, 2, 2, 1, 1, 1],
        )[0]
        if kind == "create":
            data: dict = {
                "session_id": sid,
                "source": rng.choice(["cli", "cron", "claude-code"]),
                "title": rng.choice(TITLES),
                "started_at": time.time() - rng.choice([0, 3 * DAY]),
            }
            if rng.random() < 0.4:
                data["parent_id"] = rng.choice(SESSIONS)
                data["parent_kind"] = rng.choice(["compression", "branch", "delegate", "reset"])
            if rng.random() < 0.4:  # stored once as blobs, referenced from session_context
                data["system_prompt"] = rng.choice(PROMPTS)
            if rng.random() < 0.3:
                data["tools"] = rng.choice(TOOLS)
            if rng.random() < 0.3:  # an owner that is certainly dead (pid above pid_max)
                data["owner"] = {
                    "host": socket.gethostname(),
                    "pid": 2**22 + rng.randrange(1000),
                    "create_time": 1.0,
                }
            return "session.create", data
        if kind == "append":
            data = {
                "session_id": sid,
                "messages": [self.message() for _ in range(rng.randint(1, 4))],
            }
            keyed = self.keyed  # its own stream: the other ops stay those of the seed
            if keyed.random() < 0.3:  # each message placed by its own key; repeats settle
                now_us = int(time.time() * 1_000_000)
                data["order_keys"] = [
                    None
                    if keyed.random() < 0.2
                    else [now_us - keyed.randrange(10**7), keyed.randrange(3), keyed.randrange(3)]
                    for _ in data["messages"]
                ]
            elif self.revising.random() < 0.6:  # last copy wins (store.apply.revise)
                data["revise"] = True
                held = sorted(
                    r[0]
                    for r in self.conn.execute(
                        "SELECT DISTINCT ext_id FROM messages WHERE session_id = ? "
                        "AND ext_id IS NOT NULL",
                        (sid,),
                    )
                )
                for msg in data["messages"]:  # later copies of held messages
                    if held and self.revising.random() < 0.6:
                        msg["id"] = self.revising.choice(held)
                for msg in data["messages"]:  # a copy renaming a call renames its results
                    for c in msg.get("tool_calls") or ():
                        if self.revising.random() < 0.5:
                            c["function"]["name"] = "edit"
            return "messages.append", data
        if kind == "end":
            return "session.end", {
                "session_id": sid,
                "reason": rng.choice(["user_exit", "agent_close", "compression"]),
            }
        if kind == "usage":
            return "usage.record", {
                "session_id": sid,
                "task": rng.choice(["title", "compression"]),
                "model": rng.choice(["gpt-4o", None]),
                "usage": {
                    "prompt_tokens": rng.randint(1, 99),
                    "completion_tokens": rng.randint(1, 9),
                },
                **({"response_id": f"r{rng.randrange(4)}"} if rng.random() < 0.5 else {}),
            }
        if kind == "title":
            return "session.title", {"session_id": sid, "title": rng.choice(TITLES)}
        if kind == "flags":
            flag = rng.choice(["archived", "pinned", "hidden"])
            return "session.flags", {"session_id": sid, flag: rng.random() < 0.5}
        if kind == "read":
            mid = self.message_id(sid) if rng.random() < 0.5 else None
            return "session.read", {"session_id": sid, **({"message_id": mid} if mid else {})}
        if kind == "compact":
            data = {
                "session_id": sid,
                "messages": [{"role": "user", "content": "[summary] so far"}],
            }
            if rng.random() < 0.4 and (mid := self.message_id(sid)):
                data["watermark"] = mid
            return "messages.compact", data
        if kind == "rewind":
            return "messages.rewind", {"session_id": sid, "user_turn": rng.choice([1, -1, 2])}
        if kind == "replace":
            return "messages.replace", {"session_id": sid, "messages": [self.message("assistant")]}
        return "sessions.delete", {
            "session_ids": rng.sample(SESSIONS, rng.randint(1, 2)),
            "reason": "user",
            "actor": "user:property",
        }

    # -- the writer's side ------------------------------------------------------------------

    def drain(self, chunks: int | None = None) -> None:
        """Apply chunks of 1–6 message rows with the one drain loop (all if ``chunks`` is
        None), indexing a random slice after about half of them."""
        done = 0
        self.drainer.start()
        while chunks is None or done < chunks:
            self.drainer.chunk_rows = self.rng.randint(1, 6)
            if not self.drainer.step().entries:
                return
            done += 1
            if self.rng.random() < 0.5:
                self.store.index(self.rng.randint(1, 50))

    #: The store jobs a sequence runs between chunks (the prune jobs append ops to the spool;
    #: the rest are SQLite maintenance).
    JOBS = (
        "auto_prune",
        "delete_empty",
        "orphan_sweep",
        "vacuum",
        "fts_rebuild",
        "fts_optimize",
        "fts_merge",
        "wal_checkpoint",
    )

    def job(self) -> None:
        """Run one of ``JOBS``, chosen at random, at a random time ahead."""
        rng = self.rng
        now = time.time() + rng.choice([0.0, 2 * DAY, 100 * DAY])
        name = rng.choice(list(self.JOBS))
        if name == "auto_prune":
            prune.auto_prune(
                self.conn,
                self.spool,
                stale_after_s=DAY,
                retention_s=30 * DAY,
                now=now,
                max_sessions=rng.randint(1, 4),
            )
        elif name == "delete_empty":
            prune.delete_empty(self.conn, self.spool, now=now)
        elif name == "orphan_sweep":
            prune.orphan_sweep(self.conn, self.spool)
        elif name == "vacuum":
            store_jobs.vacuum(self.conn, min_free_ratio=0.0)
        elif name == "fts_rebuild":
            store_jobs.fts_rebuild(self.conn)
        elif name == "fts_optimize":
            store_jobs.fts_optimize(self.conn)
        elif name == "fts_merge":
            store_jobs.fts_merge(self.conn, pages=rng.randint(1, 100))
        else:
            store_jobs.wal_checkpoint(self.conn, rng.choice(["PASSIVE", "TRUNCATE"]))

    def sequence(self, steps: int) -> None:
        rng = self.rng
        for _ in range(steps):
            r = rng.random()
            if r < 0.6:
                self.spool.append(*self.random_op())
            elif r < 0.8:
                self.drain(chunks=rng.randint(1, 3))
            elif r < 0.93:
                self.job()
            else:
                self.snapshots.append(
                    Path(snapshot(str(self.db), str(self.root / "snapshots"), keep=1000)["path"])
                )
        self.drain()
        while self.store.index():
            pass

    def close(self) -> None:
        self.store.close()
        self.spool.close()

"""Token usage and cost: the ``usage`` rows, their pricing, and the ``usage.record`` op.

One row per model call. Usage arrives either on the assistant message the call
produced (``usage`` on a message in ``messages.append`` / ``messages.replace``) or as its own
``usage.record`` op for calls that produce no stored message (title generation, compression,
background review, embeddings). Payloads: docs/ops.md.

Token fields and the provider shapes accepted: ``store.apply.usage_fields`` (normalising and
the content rules, no store access); this module writes the rows.

Counting once: a row's ``response_id`` (the provider's response/request id) is unique in the
store, so the records Claude Code writes per content block, each repeating one response's
usage, add one row. Cost: ``genai_prices.calc_price`` at the call's time; the package version
is recorded in ``price_version`` so a store can be re-priced (store/apply/pricing.py prices a call
without a table walk per call, to the same figure); a model the table does not know
is stored with ``cost_usd`` NULL (unpriced), never $0.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import apsw

from quill.store.apply.normalize import dumps, scrub, timestamp
from quill.store.apply.pricing import price, price_version
from quill.store.apply.rules import atomic, ensure_session, opt
from quill.store.apply.usage_fields import (
    TASKS,
    TOKEN_FIELDS,
    carries_usage,
    check_call,
    check_task,
    check_usage_record,
    fields,
    normalize_usage,
    usage_holder,
)

#: The usage table (part of ``schema.DDL``). Tokens: input = all prompt tokens including cache
#: reads and writes; reasoning is part of output. cost_usd NULL = unpriced.
DDL = """
CREATE INDEX IF NOT EXISTS sessions_key ON sessions(key) WHERE key IS NOT NULL;

CREATE TABLE IF NOT EXISTS usage (
    id                 INTEGER PRIMARY KEY,
    session_id         TEXT NOT NULL REFERENCES sessions(id),
    message_id         INTEGER,         -- the stored message this call produced, else NULL
    response_id        TEXT,            -- provider response/request id: counted once
    task               TEXT NOT NULL,   -- turn | compression | title | background_review | ...
    model              TEXT,
    provider           TEXT,
    source             TEXT,            -- the producer's source, as sent with the usage
    input_tokens       INTEGER NOT NULL,
    output_tokens      INTEGER NOT NULL,
    cache_read_tokens  INTEGER NOT NULL,
    cache_write_tokens INTEGER NOT NULL,
    reasoning_tokens   INTEGER NOT NULL,
    cost_usd           REAL,
    price_version      TEXT,            -- e.g. genai-prices==0.2.3; NULL when unpriced
    ts                 REAL NOT NULL,
    day                TEXT NOT NULL,   -- UTC date of ts (YYYY-MM-DD): grouping needs no date SQL
    raw                TEXT NOT NULL,   -- the usage object as sent (JSON)
    batch_id           TEXT NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS usage_response ON usage(response_id)
    WHERE response_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS usage_session ON usage(session_id);
CREATE INDEX IF NOT EXISTS usage_ts ON usage(ts);
"""
#: Schema v2 → v3 (and the tail of a fresh store's DDL, so both paths run the same
#: statements): the session columns ``key`` and ``placeholder``, then the table.
MIGRATION = (
    """
ALTER TABLE sessions ADD COLUMN key TEXT;
ALTER TABLE sessions ADD COLUMN placeholder INTEGER NOT NULL DEFAULT 0;
"""
    + DDL
)

__all__ = [
    "TASKS",
    "TOKEN_FIELDS",
    "check_call",
    "check_usage_record",
    "normalize_usage",
    "price",
    "record",
    "record_messages",
    "usage_record",
]


def record(
    conn: apsw.Connection,
    sid: str,
    raw: Any,
    *,
    task: str,
    model: str | None,
    provider: str | None,
    source: str | None,
    response_id: str | None,
    ts: float,
    batch_id: str,
    message_id: int | None = None,
    merge_message: bool = False,
) -> int:
    """Insert one usage row (returns 1), or merge into the row of an already counted
    ``response_id`` (returns 0), or record nothing for a usage with no tokens (0). With
    ``merge_message`` (a revision: ``store.apply.revise``) the usage row pointing at
    ``message_id`` (its first) is that call too, merged into when no row has ``response_id``:
    a message is one response, whichever copy named its response id.

    Merging: one response may be written as several records whose usage grows while it
    streams (Claude Code responses in the corpus repeat their usage with a larger
    ``output_tokens`` in a later record), so each token field keeps its maximum and the
    cost is recomputed; the response is still one call. Raises ``InvalidOpError``
    (``invalid-usage``, ``invalid-field``) before writing anything.
    """
    tokens = normalize_usage(raw)
    check_task(task)
    if not any(tokens.values()):
        return 0  # e.g. Claude Code's "<synthetic>" error messages: no call was billed
    known = None
    cols = f"SELECT id, {', '.join(TOKEN_FIELDS)}, message_id, model, provider, ts FROM usage"
    if response_id is not None:
        known = conn.execute(f"{cols} WHERE response_id = ?", (response_id,)).fetchone()
    if known is None and merge_message and message_id is not None:
        known = conn.execute(
            f"{cols} WHERE message_id = ? ORDER BY id LIMIT 1",
            (message_id,),
        ).fetchone()
    if known is not None:
        merged = {f: max(tokens[f], known[1 + i]) for i, f in enumerate(TOKEN_FIELDS)}
        # a revised message's own row takes the message's time (the caller's ``ts``: the
        # revised row's, kept when the copy gives none): the last copy wins, as for the row
        at = ts if merge_message and known[-4] == message_id else known[-1]
        if merged != dict(zip(TOKEN_FIELDS, known[1 : 1 + len(TOKEN_FIELDS)])) or at != known[-1]:
            cost = price(merged, known[-3], known[-2], at)
            conn.execute(
                f"UPDATE usage SET {', '.join(f + ' = ?' for f in TOKEN_FIELDS)}, "
                "cost_usd = ?, price_version = ?, raw = ?, ts = ?, day = ? WHERE id = ?",
                (
                    *merged.values(),
                    cost,
                    price_version() if cost is not None else None,
                    dumps(raw),
                    at,
                    dt.datetime.fromtimestamp(at, tz=dt.UTC).strftime("%Y-%m-%d"),
                    known[0],
                ),
            )
        return 0
    cost = price(tokens, model, provider, ts)
    conn.execute(
        f"""INSERT INTO usage (session_id, message_id, response_id, task, model, provider, source,
                {", ".join(TOKEN_FIELDS)}, cost_usd, price_version, ts, day, raw, batch_id)
            VALUES (?, ?, ?, ?, ?, ?, ?, {", ".join("?" for _ in TOKEN_FIELDS)},
                ?, ?, ?, ?, ?, ?)""",
        (
            sid,
            message_id,
            response_id,
            task,
            model,
            provider,
            source,
            *(tokens[f] for f in TOKEN_FIELDS),
            cost,
            price_version() if cost is not None else None,
            ts,
            dt.datetime.fromtimestamp(ts, tz=dt.UTC).strftime("%Y-%m-%d"),
            dumps(raw),
            batch_id,
        ),
    )
    return conn.changes()


def record_messages(
    conn: apsw.Connection,
    sid: str,
    inserted: list[tuple[int, dict]],
    source: str | None,
    batch_id: str,
    arrived_at: float,
    merge_message: bool = False,
) -> int:
    """Record the ``usage`` of each just-inserted message ``(store id, message dict)`` that
    carries one, on the message or in its ``extra`` (attributes beside it: model, provider,
    response_id, task; model defaults to the session's). ``merge_message``: see ``record``
    (revised messages). Returns usage rows written. Raises ``InvalidOpError``."""
    carrying = [(mid, m) for mid, m in inserted if carries_usage(m)]
    if not carrying:
        return 0
    row = conn.execute("SELECT model, source FROM sessions WHERE id = ?", (sid,)).fetchone()
    written = 0
    for mid, msg in carrying:
        holder = usage_holder(msg)
        attrs = fields(holder, row[0] if row else None)
        written += record(
            conn,
            sid,
            holder["usage"],
            source=source or (row[1] if row else None),
            ts=timestamp(msg.get("timestamp"), arrived_at),
            batch_id=batch_id,
            message_id=mid,
            merge_message=merge_message,
            **attrs,
        )
    return written


@atomic
def usage_record(conn: apsw.Connection, data: dict, batch_id: str, arrived_at: float) -> int:
    """Apply ``usage.record``: one model call's usage, for a call with no stored message.

    ``data``: session_id, usage (object, any accepted shape), task (default ``turn``), model,
    provider, source, response_id, ts (epoch s or ISO; default arrival), message_ext_id (the
    producer id of the message this call produced, when it has one). A session that does
    not exist yet gets a *placeholder* row carrying ``source``, completed by its later
    ``session.create`` (never a permanent ``unknown`` session). Returns rows written (0 for a
    response already counted). Raises ``InvalidOpError`` (``invalid-usage``, ``invalid-field``).
    """
    sid, source, attrs = check_usage_record(data)
    ts = timestamp(data.get("ts"), arrived_at)
    ensure_session(conn, sid, arrived_at, source)
    message_id = None
    if (ext := opt(data, "message_ext_id", str)) is not None:
        row = conn.execute(  # the first in transcript order (a copy comes after its original)
            "SELECT id FROM messages WHERE session_id = ? AND ext_id = ? ORDER BY seq LIMIT 1",
            (sid, scrub(ext)),
        ).fetchone()  # a message id as message_row stores it
        message_id = row[0] if row else None
    if attrs["model"] is None:
        row = conn.execute("SELECT model FROM sessions WHERE id = ?", (sid,)).fetchone()
        attrs["model"] = row[0] if row else None
    return record(
        conn,
        sid,
        data["usage"],
        source=source,
        ts=ts,
        batch_id=batch_id,
        message_id=message_id,
        **attrs,
    )

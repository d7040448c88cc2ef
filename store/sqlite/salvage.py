"""Salvaging readable rows from a damaged store into a rebuilt one.

Recovery rebuilds from snapshot + spool, which holds every acknowledged batch unless spool
segments were lost outside Quill's rules. For that case the damaged file may still hold rows
nobody else has: ``salvage`` copies every *readable* session and message whose batch the
rebuilt store does not know, reading in id ranges so one damaged page costs only the rows on
it (a failing range is split until single rows; unreadable ones are counted, not guessed).
Salvaged messages keep their batch id and state and get ``extra.salvaged_from`` so they can
be told apart.

Two promises hold after salvage:
* **Session metadata.** A session whose ``session.create`` was lost comes back from the
  replay as a bare row; every column still empty there (source, model, title, cwd,
  parent_id + parent_kind, meta, owner, end) is filled from the damaged file, start and
  creation times take the earlier value, flags and the read mark the later one. A title
  another session now holds goes to ``meta.requested_title``, as ``session.create`` does.
* **Transcript order.** Store ids are transcript order (docs/ops.md). Every message gets an
  order key in the damaged file's id space: a salvaged row its old id; a rebuilt row the old
  id of the row it reproduces (same session, batch and ordinal within the batch); a rebuilt
  row the old file never had (newer than it) sorts right after the rebuilt row before it.
  All rows are then renumbered 1…N in key order (``origin_id`` and read marks follow), and
  the search indexes are rebuilt, since they are keyed by id.
Sessions named in ``exclude`` (deleted by a ``sessions.delete`` the rebuild applied) are not
brought back from the old file.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import apsw

from quill.store import packed
from quill.store.apply import batches, order
from quill.store.apply.batches import BATCH_ID_SQL
from quill.store.apply.normalize import ROW_COLUMNS
from quill.store.apply.sessions import clean_title
from quill.store.errors import InvalidOpError
from quill.store.sqlite import fts_repair
from quill.store.sqlite.connection import open_reader, transaction

#: A message row as salvage reads it; ``batch_id`` is the batch id as text (a v12 file's
#: ``messages.batch`` named through its ``batches``: ``_rows_in``).
_MSG_COLS = ("session_id", *ROW_COLUMNS, "arrived_at", "state", "batch_id", "origin_id")
_SESSION_COLS = (
    "id",
    "source",
    "model",
    "title",
    "cwd",
    "parent_id",
    "parent_kind",
    "started_at",
    "ended_at",
    "end_reason",
    "archived",
    "pinned",
    "hidden",
    "meta",
    "created_at",
    "owner_host",
    "owner_pid",
    "owner_started",
    "last_read_id",
)
#: Session columns added by schema v3 (store/apply/usage.py): conversation key, placeholder flag.
_V3_SESSION_COLS = ("key", "placeholder")
#: Filled from the old file only where the rebuilt row has NULL.
_FILL = ("source", "model", "cwd", "meta", "owner_host", "owner_pid", "owner_started", "key")
#: A packed text that does not unpack is a damaged value like any other (``store.packed``).
_DAMAGE = (apsw.CorruptError, apsw.NotADBError, apsw.IOError, packed.PackedValueError)
RANGE = 512


def readable_rows(
    conn: apsw.Connection, table: str, cols: str, lo: int, hi: int, bad: list[int]
) -> list[tuple]:
    """Readable rows of ``table`` (``cols``, SQL) with ``lo <= id < hi``, in id order, from a
    damaged file: a range that fails is halved until single rows, whose ids go to ``bad``."""
    try:
        return conn.execute(
            f"SELECT {cols} FROM {table} WHERE id >= ? AND id < ? ORDER BY id", (lo, hi)
        ).fetchall()
    except _DAMAGE:
        if hi - lo <= 1:
            bad.append(lo)
            return []
        mid = (lo + hi) // 2
        return readable_rows(conn, table, cols, lo, mid, bad) + readable_rows(
            conn, table, cols, mid, hi, bad
        )


def _batch_names(conn: apsw.Connection) -> dict[int, str] | None:
    """``{number: batch id}`` of a damaged file's readable ``batches`` rows (schema v12), or
    None for a file of an older schema, whose message rows hold the batch id itself."""
    if not any(r[1] == "batch" for r in conn.execute("PRAGMA table_info(messages)")):
        return None
    try:
        top = conn.execute("SELECT coalesce(max(id), 0) FROM batches").fetchone()[0]
    except (*_DAMAGE, apsw.SQLError):
        return {}
    names: dict[int, str] = {}
    for lo in range(0, top + 1, RANGE):
        names.update(readable_rows(conn, "batches", "id, batch_id", lo, lo + RANGE, []))
    return names


def _rows_in(
    conn: apsw.Connection, lo: int, hi: int, bad: list[int], names: dict[int, str] | None
) -> list[tuple]:
    """Readable message rows with ``lo <= id < hi`` (``id``, ``_MSG_COLS``), the batch id as
    text (``names``: ``_batch_names``); ids of unreadable single rows go to ``bad``, and so do
    rows whose batch number names no readable batch (whether the rebuild holds them is
    unknown, so they are not copied)."""
    if names is None:
        return readable_rows(conn, "messages", f"id, {packed.columns_sql(_MSG_COLS)}", lo, hi, bad)
    cols = packed.columns_sql(["batch" if c == "batch_id" else c for c in _MSG_COLS])
    at = _MSG_COLS.index("batch_id") + 1
    out = []
    for row in readable_rows(conn, "messages", f"id, {cols}", lo, hi, bad):
        if row[at] in names:
            out.append((*row[:at], names[row[at]], *row[at + 1 :]))
        else:
            bad.append(row[0])
    return out


def _merge_session(target: apsw.Connection, old: dict[str, Any]) -> int:
    """Insert the old file's session row, or fill the rebuilt row's empty columns from it.
    Returns 1 when a session row was inserted."""
    sid = old["id"]
    try:
        title = clean_title(old["title"]) if old["title"] else None
    except InvalidOpError:  # longer than today's limit: keep the row, not the title
        title = None
    if (
        title
        and target.execute(
            "SELECT 1 FROM sessions WHERE title = ? AND id != ?", (title, sid)
        ).fetchone()
    ):
        meta = json.loads(old["meta"] or "{}")
        old = {**old, "meta": json.dumps({**meta, "requested_title": title}, separators=(",", ":"))}
        title = None
    old = {**old, "title": title}
    old = {**old, "placeholder": 1 if old["placeholder"] else 0}
    if not target.execute("SELECT 1 FROM sessions WHERE id = ?", (sid,)).fetchone():
        cols = [c for c in (*_SESSION_COLS, *_V3_SESSION_COLS) if c != "last_read_id"]
        target.execute(
            f"INSERT INTO sessions ({', '.join(cols)}) VALUES ({', '.join('?' for _ in cols)})",
            [old[c] for c in cols],
        )
        return 1
    sets = [f"{c} = coalesce({c}, :{c})" for c in _FILL]
    sets += [
        "title = coalesce(title, :title)",
        "parent_kind = CASE WHEN parent_id IS NULL THEN :parent_kind ELSE parent_kind END",
        "parent_id = coalesce(parent_id, :parent_id)",
        "end_reason = CASE WHEN ended_at IS NULL THEN :end_reason ELSE end_reason END",
        "ended_at = coalesce(ended_at, :ended_at)",
        "started_at = min(coalesce(started_at, :started_at), coalesce(:started_at, started_at))",
        "created_at = min(created_at, coalesce(:created_at, created_at))",
        "archived = max(archived, :archived)",
        "pinned = max(pinned, :pinned)",
        "hidden = max(hidden, :hidden)",
        "placeholder = min(placeholder, :placeholder)",
    ]  # created in either file: not a placeholder
    target.execute(f"UPDATE sessions SET {', '.join(sets)} WHERE id = :id", old)
    return 0


def _order_keys(
    target: apsw.Connection, old_rows: dict[int, tuple[str, str]]
) -> tuple[dict[int, tuple], dict[int, int]]:
    """Order keys for the rebuilt rows, and old id → rebuilt id for rows the rebuild reproduced.
    ``old_rows``: old id → (session id, batch id) for every readable row of the old file."""
    groups: dict[tuple[str, str], list[int]] = defaultdict(list)
    for old_id in sorted(old_rows):
        groups[old_rows[old_id]].append(old_id)
    seen: dict[tuple[str, str], int] = defaultdict(int)
    keys: dict[int, tuple] = {}
    matched: dict[int, int] = {}
    prev = 0
    for tid, sid, batch in target.execute(
        f"SELECT m.id, m.session_id, {BATCH_ID_SQL} FROM messages m ORDER BY m.id"
    ):
        group = groups.get((sid, batch), [])
        n = seen[(sid, batch)]
        seen[(sid, batch)] = n + 1
        if n < len(group):
            prev = group[n]
            keys[tid] = (prev, 0, 0)
            matched[prev] = tid
        else:
            keys[tid] = (prev, 1, tid)
    return keys, matched


def _renumber(target: apsw.Connection, keys: dict[int, tuple]) -> dict[int, int]:
    """Give every message id 1…N in key order; ``origin_id`` and read marks follow.
    Returns the id map (id before → id after)."""
    mapping = {cur: n for n, cur in enumerate(sorted(keys, key=keys.__getitem__), 1)}
    target.execute(
        "CREATE TEMP TABLE IF NOT EXISTS salvage_map "
        "(old INTEGER PRIMARY KEY, new INTEGER NOT NULL)"
    )
    target.execute("DELETE FROM temp.salvage_map")
    target.executemany(
        "INSERT INTO temp.salvage_map (old, new) VALUES (?, ?)", list(mapping.items())
    )
    target.execute(
        "UPDATE messages SET origin_id = (SELECT new FROM temp.salvage_map WHERE old = origin_id) "
        "WHERE origin_id IS NOT NULL"
    )
    target.execute(
        "UPDATE sessions "
        "SET last_read_id = (SELECT new FROM temp.salvage_map WHERE old = last_read_id) "
        "WHERE last_read_id IS NOT NULL"
    )
    target.execute(
        "UPDATE usage SET message_id = (SELECT new FROM temp.salvage_map WHERE old = message_id) "
        "WHERE message_id IS NOT NULL"
    )
    # Two passes through negative ids: no new id ever collides with an id not yet moved.
    target.execute(
        "UPDATE messages SET id = -(SELECT new FROM temp.salvage_map WHERE old = messages.id)"
    )
    target.execute("UPDATE messages SET id = -id")
    target.execute("DROP TABLE temp.salvage_map")
    return mapping


def salvage(
    damaged: Path, target: apsw.Connection, exclude: set[str] | frozenset[str] = frozenset()
) -> dict[str, Any]:
    """Copy readable rows of ``damaged`` missing from ``target`` (the rebuilt writer
    connection), fill empty session columns and restore transcript order (module doc).
    ``exclude``: session ids not to bring back. Figures: sessions inserted / filled, messages
    salvaged, message ids unreadable, or why nothing could be read at all. Memory: one
    (id, session, batch) triple per message of the old file."""
    try:
        src = open_reader(damaged)
    except Exception as exc:  # noqa: BLE001 — an unopenable file simply has nothing to give
        return {
            "salvaged_sessions": 0,
            "salvaged_messages": 0,
            "unreadable": f"{type(exc).__name__}: {exc}",
        }
    known = {b for (b,) in target.execute("SELECT batch_id FROM applied_batches")}
    sessions = filled = messages = 0
    bad: list[int] = []
    try:
        try:
            top = src.execute("SELECT max(id) FROM messages").fetchone()[0] or 0
            have = {
                r[1] for r in src.execute("PRAGMA table_info(sessions)")
            }  # an older schema lacks some
            cols = [c for c in (*_SESSION_COLS, *_V3_SESSION_COLS) if c in have]
            srows = [
                {**dict.fromkeys(_V3_SESSION_COLS), **dict(zip(cols, r))}
                for r in src.execute(f"SELECT {', '.join(cols)} FROM sessions ORDER BY id")
            ]
        except _DAMAGE as exc:
            return {
                "salvaged_sessions": 0,
                "salvaged_messages": 0,
                "unreadable": f"{type(exc).__name__}: {exc}",
            }
        with transaction(target):
            present = {sid for (sid,) in target.execute("SELECT id FROM sessions")}
            for old in srows:
                if old["id"] in exclude and old["id"] not in present:
                    continue
                added = _merge_session(target, old)
                sessions += added
                filled += 1 - added
            old_rows: dict[int, tuple[str, str]] = {}
            fresh: list[dict[str, Any]] = []
            names = _batch_names(src)
            for lo in range(0, top + 1, RANGE):
                for row in _rows_in(src, lo, lo + RANGE, bad, names):
                    values = dict(zip(("id", *_MSG_COLS), row))
                    if values["session_id"] in exclude and values["session_id"] not in present:
                        continue
                    old_rows[values["id"]] = (values["session_id"], values["batch_id"])
                    if values["batch_id"] not in known:
                        fresh.append(values)
            keys, matched = _order_keys(target, old_rows)
            base = (
                max(top, target.execute("SELECT coalesce(max(id), 0) FROM messages").fetchone()[0])
                + 1
            )
            current = {**matched, **{v["id"]: base + v["id"] for v in fresh}}  # old id → id now
            for values in fresh:
                extra = json.loads(values["extra"] or "{}")
                extra["salvaged_from"] = {"file": str(damaged), "id": values["id"]}
                values["extra"] = json.dumps(extra, separators=(",", ":"))
                values["origin_id"] = current.get(values["origin_id"])
                values["batch"] = batches.ref(target, values["batch_id"])
                cols = [c if c != "batch_id" else "batch" for c in _MSG_COLS]
                target.execute(
                    f"INSERT INTO messages (id, {', '.join(cols)}) VALUES "
                    f"(?, {packed.marks_sql(cols)})",
                    [base + values["id"], *(values[c] for c in cols)],
                )
                keys[base + values["id"]] = (values["id"], 0, 0)
                messages += 1
            mapping = _renumber(target, keys) if messages else {i: i for i in keys}
            if messages:  # ids are transcript order again: seq/pos follow them
                target.execute(order.RESEQUENCE_BY_ID)
            for (
                old
            ) in srows:  # read marks: the later (ids are transcript order now) of rebuilt and old
                if old["last_read_id"] in current:
                    target.execute(
                        "UPDATE sessions SET last_read_id = max(coalesce(last_read_id, 0), ?) "
                        "WHERE id = ?",
                        (mapping[current[old["last_read_id"]]], old["id"]),
                    )
            usage = _copy_usage(
                src,
                target,
                known,
                exclude - present,
                {old: mapping[cur] for old, cur in current.items()},
            )
        if messages:
            _copy_blobs(src, target)
            fts_repair.rebuild(target)  # the indexes are keyed by message id
    finally:
        src.close()
    return {
        "salvaged_sessions": sessions,
        "filled_sessions": filled,
        "salvaged_messages": messages,
        "salvaged_usage": usage,
        "unreadable_message_ids": len(bad),
    }


def _copy_usage(
    src: apsw.Connection,
    target: apsw.Connection,
    known: set[str],
    exclude: set[str],
    message_ids: dict[int, int],
) -> int:
    """Copy readable usage rows (store/apply/usage.py) of batches the rebuild does not know;
    ``message_id`` follows ``message_ids`` (old id → final id; unknown → NULL). Returns rows
    copied (a ``response_id`` already counted is not counted twice)."""
    try:
        have = [r[1] for r in src.execute("PRAGMA table_info(usage)")]
        rows = (
            src.execute(f"SELECT {', '.join(have)} FROM usage ORDER BY id").fetchall()
            if have
            else []
        )
    except (*_DAMAGE, apsw.SQLError):
        return 0
    cols = [c for c in have if c != "id"]
    copied = 0
    for row in rows:
        values = dict(zip(have, row))
        if values["batch_id"] in known or values["session_id"] in exclude:
            continue
        values["message_id"] = message_ids.get(values["message_id"])
        target.execute(
            f"INSERT OR IGNORE INTO usage ({', '.join(cols)}) "
            f"VALUES ({', '.join('?' for _ in cols)})",
            [values[c] for c in cols],
        )
        copied += target.changes()
    return copied


def _copy_blobs(src: apsw.Connection, target: apsw.Connection) -> None:
    """Salvaged rows may reference blobs (store/apply/blobs.py) the rebuilt store lacks: copy every
    readable blob row it does not hold (a v1 file has no blobs table: nothing to copy)."""
    cols = "sha256, encoding, data, size, created_at"
    try:
        rows = src.execute(f"SELECT {cols} FROM blobs").fetchall()
    except (*_DAMAGE, apsw.SQLError):
        return
    with transaction(target):
        target.executemany(f"INSERT OR IGNORE INTO blobs ({cols}) VALUES (?, ?, ?, ?, ?)", rows)

"""``quill export``: sessions out of the store, as Quill ops (re-importable), Markdown, OpenAI
chat JSONL or ShareGPT.

* ``quill`` — Quill's own op JSONL, one ``{"op", "batch", "data"}`` per line, starting with a
  header line ``{"quill_export": 1, ...}``. Per session: ``session.create`` (every field),
  ``messages.restore`` chunks (every row in transcript order, with its state and copy lineage),
  ``usage.record`` per usage row, ``session.flags`` and ``session.end`` when set. The system
  prompt and tool array travel in the ``session.create`` (and a later change, a tool reload,
  as a ``session.create`` placed after the rows the session held then). Batch ids
  are derived from the content, so importing the same export twice applies it once.
  ``quill import`` recognises the header and appends the ops as they are; into an empty data
  dir that gives identical audit views, states, lineage, usage and attachments (the
  last-read watermark, a store id, is not carried).
* ``markdown`` — the display view, readable; tool calls and results folded (``<details>``).
* ``openai`` — one ``{"messages": [...], "tools": [...]}`` line per session: the model view
  with the stored system prompt and tool array (for fine-tuning).
* ``sharegpt`` — one ``{"id", "conversations": [{"from", "value"}]}`` line per session,
  reasoning as ``<think>`` blocks (Hermes style). ``openai`` carries no reasoning: it is the
  fine-tuning shape, which has no such field; ``quill`` is the lossless format.

This module holds the session selection and the ``quill`` format; ``export_render.py`` the
other three, ``export_reimport.py`` reading a ``quill`` export back (``quill import``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from quill.ops.transfer.ingest import stable_batch_id
from quill.store.apply import blobs
from quill.store.apply.usage import TOKEN_FIELDS
from quill.store.read.reader import Reader

FORMATS = ("quill", "markdown", "openai", "sharegpt")
HEADER_KEY = "quill_export"
#: Rows per ``messages.restore`` op (an op is one spool record and one transaction).
RESTORE_CHUNK = 200

_SESSION_COLS = (
    "id",
    "source",
    "model",
    "title",
    "cwd",
    "key",
    "parent_id",
    "parent_kind",
    "started_at",
    "ended_at",
    "end_reason",
    "archived",
    "pinned",
    "hidden",
    "meta",
    "owner_host",
    "owner_pid",
    "owner_started",
    "owner_boot",
    "owner_ticks",
    "placeholder",
)


def select_sessions(
    r: Reader,
    session_id: str | None = None,
    *,
    since: float | None = None,
    source: str | None = None,
    key: str | None = None,
) -> list[str]:
    """Session ids to export, oldest first: one session, or every session matching the
    filters (``since``: active at or after, epoch s; ``source``; ``key``)."""
    where, args = ["1=1"], []
    if session_id is not None:
        where.append("s.id = ?")
        args.append(session_id)
    if source is not None:
        where.append("s.source = ?")
        args.append(source)
    if key is not None:
        where.append("s.key = ?")
        args.append(key)
    if since is not None:
        where.append(
            "coalesce((SELECT max(m.ts) FROM messages m WHERE m.session_id = s.id), "
            "s.started_at) >= ?"
        )
        args.append(since)
    with r.snapshot() as conn:
        return [
            row[0]
            for row in conn.execute(
                f"SELECT s.id FROM sessions s WHERE {' AND '.join(where)} "
                "ORDER BY s.created_at, s.id",
                args,
            )
        ]


def _session_row(conn: Any, sid: str) -> dict[str, Any]:
    row = conn.execute(
        f"SELECT {', '.join(_SESSION_COLS)} FROM sessions WHERE id = ?", (sid,)
    ).fetchone()
    return dict(zip(_SESSION_COLS, row))


def _audit_rows(conn: Any, sid: str) -> list[tuple[dict[str, Any], str, int | None, int]]:
    """``(message dict, state, origin store id, store id)`` for every row, in ``seq`` order. The
    dict is what ``messages.append`` would store as this exact row: the stored ``extra``
    travels as the message's ``extra`` object (not flattened, so no extra key can collide with
    a message field), blob references are inflated back to their payloads."""
    out = []
    cache: dict[str, str | None] = {}
    for (
        mid,
        ext_id,
        role,
        content,
        parts,
        tool_calls,
        tool_call_id,
        tool_name,
        reasoning,
        finish_reason,
        ts,
        extra,
        state,
        origin,
    ) in conn.execute(
        "SELECT id, ext_id, role, content, parts, tool_calls, tool_call_id, tool_name, "
        "reasoning, finish_reason, ts, extra, state, origin_id FROM messages "
        "WHERE session_id = ? ORDER BY seq",
        (sid,),
    ).fetchall():
        msg: dict[str, Any] = {
            "role": role,
            "content": blobs.inflate(conn, json.loads(parts), cache) if parts else content,
        }
        for key, value in (
            ("id", ext_id),
            ("tool_calls", json.loads(tool_calls) if tool_calls else None),
            ("tool_call_id", tool_call_id),
            ("name", tool_name),
            ("reasoning", reasoning),
            ("finish_reason", finish_reason),
            ("timestamp", ts),
        ):
            if value is not None:
                msg[key] = value
        if extra:
            msg["extra"] = blobs.inflate(conn, json.loads(extra), cache)
        out.append((msg, state, origin, mid))
    return out


def quill_ops(r: Reader, sid: str) -> Iterator[dict[str, Any]]:
    """The ops that rebuild session ``sid`` (module doc), as spool-record bodies."""
    with r.snapshot() as conn:
        s = _session_row(conn, sid)
        rows = _audit_rows(conn, sid)
        changes = _context_changes(conn, sid)
        usage = conn.execute(
            f"SELECT u.task, u.model, u.provider, u.source, u.response_id, u.ts, u.raw, m.ext_id, "
            f"{', '.join('u.' + f for f in TOKEN_FIELDS)} "
            "FROM usage u LEFT JOIN messages m ON m.id = u.message_id "
            "WHERE u.session_id = ? ORDER BY u.id",
            (sid,),
        ).fetchall()
    if not s["placeholder"]:
        create = {
            "session_id": sid,
            **{
                k: s[k]
                for k in (
                    "source",
                    "model",
                    "title",
                    "cwd",
                    "key",
                    "parent_id",
                    "parent_kind",
                    "started_at",
                )
                if s[k] is not None
            },
        }
        if s["meta"]:
            create["meta"] = json.loads(s["meta"])
        if s["owner_host"] or s["owner_pid"] is not None:
            create["owner"] = {
                "host": s["owner_host"],
                "pid": s["owner_pid"],
                "create_time": s["owner_started"],
                **({"boot_id": s["owner_boot"]} if s["owner_boot"] is not None else {}),
                **({"start_ticks": s["owner_ticks"]} if s["owner_ticks"] is not None else {}),
            }
        first = changes.get(0) or [{}]
        create.update(first.pop(0))  # the prompt and tools set before any message
        if not first:
            changes.pop(0, None)
        yield _op("session.create", create)
    position = {mid: i for i, (_, _, _, mid) in enumerate(rows)}
    # A later change (a tool reload) is re-sent where it happened: after the rows the session
    # held then, so the import records it after the same message (store/apply/context.py).
    stops = sorted({*range(0, len(rows), RESTORE_CHUNK), *changes, len(rows)})
    for start, end in zip(stops, stops[1:] + [None]):
        for i, values in enumerate(changes.get(start, [])):
            change = {"session_id": sid, **values}
            yield {
                **_op("session.create", change),
                "batch": stable_batch_id("export", "context", start, i, change),
            }
        if end is None:
            break
        chunk = [
            {
                "message": m,
                "state": state,
                "origin": position.get(origin) if origin is not None else None,
            }
            for m, state, origin, _ in rows[start:end]
        ]
        data = {"session_id": sid, "offset": start, "rows": chunk}
        # a placeholder has no session.create to carry these: the restore re-creates it
        if s["placeholder"]:
            if s["source"]:
                data["source"] = s["source"]
            if start == 0:
                data["started_at"] = s["started_at"]
        yield _op("messages.restore", data)
    for task, model, provider, source, rid, ts, raw, ext, *_ in usage:
        data = {
            "session_id": sid,
            "usage": json.loads(raw),
            "task": task,
            "model": model,
            "provider": provider,
            "source": source,
            "response_id": rid,
            "ts": ts,
            "message_ext_id": ext,
        }
        yield _op("usage.record", {k: v for k, v in data.items() if v is not None})
    flags = {k: bool(s[k]) for k in ("archived", "pinned", "hidden") if s[k]}
    if flags:
        yield _op("session.flags", {"session_id": sid, **flags})
    if s["ended_at"] is not None:
        yield _op(
            "session.end",
            {"session_id": sid, "reason": s["end_reason"] or "ended", "ended_at": s["ended_at"]},
        )


def _context_changes(conn: Any, sid: str) -> dict[int, list[dict[str, Any]]]:
    """The session's system prompt / tools changes (store/apply/context.py), keyed by how many of
    its message rows (in seq order) existed when each was made: ``{rows before: [{"system_prompt":
    str, "tools": list}, …]}``, one dict per ``session.create`` to send (a second change of
    the same kind at the same point needs its own). 0 holds what was set before any message."""
    out: dict[int, list[dict[str, Any]]] = {}
    for kind, sha, after in conn.execute(
        "SELECT c.kind, v.sha256, c.after_message_id FROM session_context c JOIN context_values v "
        "ON v.id = c.value_id WHERE c.session_id = ? ORDER BY c.id",
        (sid,),
    ).fetchall():
        before = (
            0
            if after is None
            else conn.execute(
                "SELECT count(*) FROM messages WHERE session_id = ? AND seq <= "
                "(SELECT seq FROM messages WHERE id = ?)",
                (sid, after),
            ).fetchone()[0]
        )
        text = blobs.get(conn, sha)
        if text is None:
            # a reference without its blob: nothing to carry (reported by doctor, not here)
            continue
        at = out.setdefault(before, [{}])
        if kind in at[-1]:
            at.append({})
        at[-1][kind] = json.loads(text) if kind == "tools" else text
    return out


def _op(op: str, data: dict[str, Any]) -> dict[str, Any]:
    return {"op": op, "batch": stable_batch_id("export", op, data), "data": data}


def header(count: int) -> dict[str, Any]:
    """The first line of a Quill export."""
    return {HEADER_KEY: 1, "sessions": count, "format": "quill ops, one per line (docs/ops.md)"}

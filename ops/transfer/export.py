"""``quill export``: sessions out of the store, as Quill ops (re-importable), Markdown, OpenAI
chat JSONL or ShareGPT.

* ``quill`` — Quill's own op JSONL, one ``{"op", "batch", "data"}`` per line, starting with a
  header line ``{"quill_export": 1, ...}``. Per session: ``session.create`` (every field),
  ``messages.restore`` chunks (every row in transcript order, with its state and copy lineage),
  ``usage.record`` per usage row, ``session.flags`` and ``session.end`` when set. The system
  prompt and tool array travel in the ``session.create`` (and a later change, a tool reload,
  as a ``session.create`` placed after the rows the session held then). Batch ids
  are derived from the content, so importing the same export twice applies it once.
  A binary payload the store keeps once (store/apply/blobs.py) travels once per session: its
  first row carries it inline, every later row of the session keeps the store's reference
  (``quill-blob:<sha256>``) and its ``messages.restore`` op names that hash in ``blob_refs``,
  so the import refuses the op (``missing-blob``) rather than keep a reference it cannot
  resolve. A session's export is self-contained: a payload shared by two sessions is inline
  in each.
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

from collections.abc import Iterator
from typing import Any

from quill.ops.transfer.ingest import stable_batch_id
from quill.store import packed
from quill.store.apply import blobs
from quill.store.apply.usage import TOKEN_FIELDS
from quill.store.errors import stored_json
from quill.store.read.reader import Reader

FORMATS = ("quill", "markdown", "openai", "sharegpt")
HEADER_KEY = "quill_export"
#: Rows per ``messages.restore`` op (an op is one spool record and one transaction).
RESTORE_CHUNK = 200

#: The session fields a ``session.create`` carries as they are stored.
_CREATE_FIELDS = (
    "source",
    "model",
    "title",
    "cwd",
    "key",
    "parent_id",
    "parent_kind",
    "started_at",
)
_SESSION_COLS = (
    "id",
    *_CREATE_FIELDS,
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
    filters (``since``: last active at or after, epoch s — newest message time, else start,
    as ``store.read.listing`` bounds it; ``source``; ``key``)."""
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


def _audit_rows(
    conn: Any, sid: str
) -> list[tuple[dict[str, Any], str, int | None, int, frozenset[str]]]:
    """``(message dict, state, origin store id, store id, kept refs)`` for every row, in
    ``seq`` order. The dict is what ``messages.append`` would store as this exact row: the
    stored ``extra`` travels as the message's ``extra`` object (not flattened, so no extra key
    can collide with a message field). A blob reference is inflated back to its payload the
    first time the session's rows meet it; later ones stay references, and ``kept refs`` holds
    their hashes (module doc)."""
    out = []
    rows = conn.execute(
        f"SELECT id, ext_id, role, {packed.text_sql('content')}, parts, tool_calls, tool_call_id, "
        "tool_name, "
        "reasoning, finish_reason, ts, extra, state, origin_id FROM messages "
        "WHERE session_id = ? ORDER BY seq",
        (sid,),
    ).fetchall()
    # Every payload the session references in one query, not one per distinct reference.
    cache = blobs.get_many(conn, blobs.referenced(t for r in rows for t in (r[4], r[11])))
    sent: set[str] = set()
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
    ) in rows:
        kept: set[str] = set()
        msg: dict[str, Any] = {
            "role": role,
            "content": (
                _inflate_once(conn, parts, cache, sent, kept, f"parts of message {mid}")
                if parts
                else content
            ),
        }
        for key, value in (
            ("id", ext_id),
            (
                "tool_calls",
                stored_json(tool_calls, f"tool calls of message {mid}") if tool_calls else None,
            ),
            ("tool_call_id", tool_call_id),
            ("name", tool_name),
            ("reasoning", reasoning),
            ("finish_reason", finish_reason),
            ("timestamp", ts),
        ):
            if value is not None:
                msg[key] = value
        if extra:
            msg["extra"] = _inflate_once(
                conn, extra, cache, sent, kept, f"extra fields of message {mid}"
            )
        out.append((msg, state, origin, mid, frozenset(kept)))
    return out


def _inflate_once(
    conn: Any,
    text: str,
    cache: dict[str, str | None],
    sent: set[str],
    kept: set[str],
    what: str,
) -> Any:
    """The stored JSON ``text`` (a row's parts or extra) parsed, with each reference to a
    stored blob whose hash is not in ``sent`` replaced by its payload (and the hash added to
    ``sent``); a reference already in ``sent`` stays as it is and its hash goes into ``kept``.
    A reference to no stored blob is producer text (``blobs.inflate``) and stays, in neither
    set. ``what`` names the value: ``DamagedValueError`` when it does not parse."""
    value = stored_json(text, what)
    if not blobs.has_refs(text):
        return value
    return blobs.inflate(conn, value, cache, sent=sent, kept=kept)


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
            **{k: s[k] for k in _CREATE_FIELDS if s[k] is not None},
        }
        if s["meta"]:
            create["meta"] = stored_json(s["meta"], f"meta of session {sid}")
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
    position = {mid: i for i, (_, _, _, mid, _) in enumerate(rows)}
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
            for m, state, origin, _, _ in rows[start:end]
        ]
        data = {"session_id": sid, "offset": start, "rows": chunk}
        refs = sorted(set().union(*(kept for *_, kept in rows[start:end])))
        if refs:
            data["blob_refs"] = refs
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
            "usage": stored_json(raw, f"usage record of session {sid}"),
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
        at[-1][kind] = stored_json(text, f"tools blob {sha}") if kind == "tools" else text
    return out


def _op(op: str, data: dict[str, Any]) -> dict[str, Any]:
    return {"op": op, "batch": stable_batch_id("export", op, data), "data": data}


def header(count: int) -> dict[str, Any]:
    """The first line of a Quill export."""
    return {HEADER_KEY: 1, "sessions": count, "format": "quill ops, one per line (docs/ops.md)"}

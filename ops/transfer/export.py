"""``quill export``: sessions out of the store, as Quill ops (re-importable), Markdown, OpenAI
chat JSONL or ShareGPT.

* ``quill`` — Quill's own op JSONL, one ``{"op", "batch", "data"}`` per line, starting with a
  header line ``{"quill_export": 1, ...}``. Per session: ``session.create`` (every field),
  ``messages.restore`` chunks (every row in id order, with its state and copy lineage),
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
"""

from __future__ import annotations

import html
import json
import re
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
    """``(message dict, state, origin store id, store id)`` for every row, in id order. The
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
        "reasoning, finish_reason, ts, extra, state, origin_id "
        "FROM messages WHERE session_id = ? ORDER BY id",
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
        if s[
            "placeholder"
        ]:  # no session.create to carry them: the restore re-creates the placeholder
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
    its message rows (in id order) existed when each was made: ``{rows before: [{"system_prompt":
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
                "SELECT count(*) FROM messages WHERE session_id = ? AND id <= ?", (sid, after)
            ).fetchone()[0]
        )
        text = blobs.get(conn, sha)
        if text is None:
            # A reference without its blob: nothing to carry (reported by doctor, not here).
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


def _fenced(text: str, info: str = "") -> list[str]:
    """``text`` as a Markdown code block whose fence is longer than any run of backticks in
    it (CommonMark: a fence closes only on a run at least as long), so tool output holding
    its own fences cannot close the block early."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence + info, text, fence]


def _part_text(part: Any, missing: str | None) -> str | None:
    """A content part's text for a flat export: its ``text`` when that is a string, a bare
    string part as is, else ``missing`` (``[type]``-style placeholder or None to drop it).
    Parts are stored verbatim, so ``text`` may be any JSON value (null, a number, an object)."""
    if isinstance(part, str):
        return part
    if isinstance(part, dict) and isinstance(part.get("text"), str):
        return part["text"]
    return missing


def _function(call: Any) -> dict[str, Any]:
    """A stored tool call's ``function`` object, or ``{}`` when the call or its ``function``
    is not an object (tool calls are stored verbatim: ``function`` may be any JSON value)."""
    fn = call.get("function") if isinstance(call, dict) else None
    return fn if isinstance(fn, dict) else {}


def markdown(r: Reader, sid: str) -> str:
    """One session's display transcript as Markdown; tool calls and results folded."""
    session = r.get_session(sid) or {"id": sid}
    out = [
        f"# {session.get('title') or sid}",
        "",
        f"- session: `{sid}`"
        + (f" · source: {session['source']}" if session.get("source") else "")
        + (f" · model: {session['model']}" if session.get("model") else ""),
        "",
    ]
    for m in r.get_messages(sid, "display"):
        content = m.get("content")
        if isinstance(content, list):
            content = "\n".join(
                _part_text(p, f"[{p.get('type')}]" if isinstance(p, dict) else json.dumps(p))
                for p in content
            )
        if m["role"] in ("tool", "function"):
            out += [
                "<details><summary>tool result"
                f"{' · ' + html.escape(m['name']) if m.get('name') else ''}"
                "</summary>",
                "",
                *_fenced(str(content or "")),
                "",
                "</details>",
                "",
            ]
            continue
        out += [f"## {m['role']}", ""]
        if m.get("reasoning"):
            out += [
                "<details><summary>reasoning</summary>",
                "",
                m["reasoning"],
                "",
                "</details>",
                "",
            ]
        if content:
            out += [str(content), ""]
        for call in m.get("tool_calls") or []:
            fn = _function(call)
            out += [
                f"<details><summary>tool call · {html.escape(str(fn.get('name')))}</summary>",
                "",
                *_fenced(str(fn.get("arguments", "")), "json"),
                "",
                "</details>",
                "",
            ]
    return "\n".join(out)


def openai_chat(r: Reader, sid: str) -> dict[str, Any]:
    """``{"messages": model view, "tools": [...]}`` (OpenAI chat fine-tuning shape, no Quill
    keys): the session's stored system prompt (store/apply/context.py) leads the messages unless
    the transcript already starts with a system or developer message; its tool array, when
    one was sent, is ``tools``."""
    keep = ("role", "content", "tool_calls", "tool_call_id", "name")
    with r.snapshot():
        messages = [{k: m[k] for k in keep if k in m} for m in r.get_messages(sid, "model")]
        context = r.context(sid)
    if context["system_prompt"] is not None and not (
        messages and messages[0]["role"] in ("system", "developer")
    ):
        messages.insert(0, {"role": "system", "content": context["system_prompt"]})
    return {
        "messages": messages,
        **({"tools": context["tools"]} if context["tools"] is not None else {}),
    }


_SHAREGPT_ROLE = {
    "system": "system",
    "developer": "system",
    "user": "human",
    "assistant": "gpt",
    "tool": "tool",
    "function": "tool",
}


def sharegpt(r: Reader, sid: str) -> dict[str, Any]:
    """``{"id", "conversations": [{"from", "value"}]}`` from the model view; reasoning leads its
    turn as a ``<think>`` block and tool calls follow as ``<tool_call>`` JSON blocks, as
    Hermes-style ShareGPT does (and as the ShareGPT importer reads them back)."""
    turns = []
    for m in r.get_messages(sid, "model"):
        content = m.get("content")
        if isinstance(content, list):
            content = "\n".join(
                t
                for t in (_part_text(p, None) for p in content if isinstance(p, dict))
                if t is not None
            )
        value = content or ""
        if m.get("reasoning"):
            value = f"<think>\n{m['reasoning']}\n</think>\n{value}"
        for call in m.get("tool_calls") or []:
            fn = _function(call)
            call_json = json.dumps({"name": fn.get("name"), "arguments": fn.get("arguments")})
            value += f"\n<tool_call>\n{call_json}\n</tool_call>"
        turns.append({"from": _SHAREGPT_ROLE.get(m["role"], m["role"]), "value": value.strip()})
    return {"id": sid, "conversations": turns}


def is_quill_export(path: Any) -> bool:
    """Whether a file starts with a Quill export header line."""
    try:
        with open(path, "rb") as fh:
            first = fh.readline(4096)
        head = json.loads(first)
    except (OSError, ValueError):
        return False
    return isinstance(head, dict) and head.get(HEADER_KEY) == 1


def read_export(path: Any) -> Iterator[tuple[int, dict[str, Any] | None, str | None]]:
    """``(line number, op, None)`` for each op of a Quill export after its header, or
    ``(line number, None, reason)`` for a line that is not one (bad JSON, a cut-off last line,
    a value that is not an op): the caller reports it and goes on, like every importer."""
    with open(path, encoding="utf-8", errors="surrogateescape") as fh:
        for lineno, line in enumerate(fh, 1):
            if lineno == 1 or not line.strip():
                continue
            try:
                op = json.loads(line)
            except ValueError as exc:  # JSONDecodeError, and a line of undecodable bytes
                yield lineno, None, f"not JSON: {exc}"
                continue
            if (
                not isinstance(op, dict)
                or not isinstance(op.get("op"), str)
                or not isinstance(op.get("data"), dict)
            ):
                yield (
                    lineno,
                    None,
                    "not a Quill op (an object with an 'op' string and a 'data' object)",
                )
                continue
            yield lineno, op, None


def _applied(store: Any, batch: Any) -> bool:
    """Whether ``store`` (a reader, or None) has applied the batch id ``batch``."""
    if store is None or not isinstance(batch, str):
        return False
    return (
        store.conn.execute("SELECT 1 FROM applied_batches WHERE batch_id = ?", (batch,)).fetchone()
        is not None
    )


def import_export(spool: Any, path: Any, store: Any = None) -> dict[str, Any]:
    """Append the ops of a Quill export to ``spool`` as they are (their batch ids make a
    repeat a no-op); returns an import report entry. With ``store`` (a reader of the data
    dir's store, ``import_spool.open_store_view``), an op whose batch id the store has
    applied already is not appended again — the writer would only skip it — and its message
    rows count as ``already_stored``, so a repeat says "0 new" and the spool does not grow.
    A line that is not an op, or an op the spool refuses (``InvalidOpError``: unknown op,
    data it cannot encode), is a problem of that line (``problems``: line, kind ``skipped``,
    reason) and the rest of the file is appended. Raises ``quill.spool.SpoolError`` for other
    I/O failures (disk full …)."""
    from quill.spool.errors import InvalidOpError

    sessions: dict[str, None] = {}
    problems: list[dict[str, Any]] = []
    rows = stored = 0
    for lineno, op, reason in read_export(path):
        if op is not None and _applied(store, op.get("batch")):
            stored += len(op["data"].get("rows") or []) if op["op"] == "messages.restore" else 0
            continue
        if op is not None:
            try:
                spool.append(op["op"], op["data"], batch_id=op.get("batch"))
            except InvalidOpError as exc:
                reason = str(exc)
        if reason is not None:
            problems.append({"line": lineno, "kind": "skipped", "reason": reason})
            continue
        sid = op["data"].get("session_id")
        if isinstance(sid, str):
            sessions.setdefault(sid)
        if op["op"] == "messages.restore":
            rows += len(op["data"].get("rows") or [])
    return {
        "path": str(path),
        "format": "quill-export",
        "skipped": None,
        "sessions": len(sessions),
        "session_ids": list(sessions),
        "messages": rows + stored,
        "new": rows,
        "already_stored": stored,
        "rewound": 0,
        "compactions": 0,
        "new_from_compactions": 0,
        "problems": problems,
    }

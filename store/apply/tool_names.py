"""A tool result's tool name, taken from the tool call it answers when the producer left it out.

Many producers write a tool result as ``{role: tool, tool_call_id, content}`` with no ``name``
(OpenAI chat, Codex ``function_call_output``, the Agents SDK's items, OTLP tool spans, most
importers); the name is only on the call. Search finds a result by its tool's name through the
``tool_name`` column, and the views show it, so the writer fills that column on every message
it inserts through ``messages.append`` (one op or a bulk run) and ``messages.replace``: from a
call in the same op (or an earlier op of the same bulk run), else from the newest call with
that id stored in the same session, in any state. This one rule covers every way in (importers,
client, HTTP, ``QuillSession``, OTLP): they all write these ops.

Invariants:
* a name the producer gave is never changed; only a NULL ``tool_name`` of a tool-result row
  (role ``tool``/``function``) with a ``tool_call_id`` is filled;
* a result whose call is not known when it is applied (the call arrives later, in another
  session, or was never sent) keeps NULL: rows are not rewritten afterwards (only by a
  ``revise`` append, ``store.apply.revise``, itself an op), so a store rebuilt from the
  spool, which applies the same ops in the same order, fills the same rows;
* the bulk run fills exactly what op-at-a-time appends would: an op sees its own calls, then
  the run's earlier ops' new rows (newer than anything stored), then the store.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from quill.store.apply.normalize import ROW_COLUMNS, dumps
from quill.store.errors import stored_json

_ROLE = ROW_COLUMNS.index("role")
_CALLS = ROW_COLUMNS.index("tool_calls")
_CALL_ID = ROW_COLUMNS.index("tool_call_id")
_NAME = ROW_COLUMNS.index("tool_name")
_RESULT_ROLES = ("tool", "function")
_CHUNK = 200  # LIKE patterns per statement


def unnamed(row: tuple) -> str | None:
    """The ``tool_call_id`` of a tool-result row without a tool name, else None."""
    if row[_ROLE] in _RESULT_ROLES and row[_NAME] is None and row[_CALL_ID] is not None:
        return row[_CALL_ID]
    return None


def call_names(tool_calls: str | None, what: str = "tool calls") -> dict[str, str]:
    """``{call id: tool name}`` of a stored ``tool_calls`` value (a JSON array of OpenAI-style
    calls, ``{"id", "function": {"name"}}``; a flat ``{"id"|"call_id", "name"}`` is read too).
    Calls without an id or a non-empty name are left out. ``what`` names the value for the
    error. Raises ``DamagedValueError`` (store damage, kind ``damaged``) when the value does
    not parse: the writer stores only JSON it encoded (``normalize.dumps``), so such a value
    was damaged on disk, and reading it as "no names" would hide that."""
    if not tool_calls:
        return {}
    calls = stored_json(tool_calls, what)
    out: dict[str, str] = {}
    for call in calls if isinstance(calls, list) else ():
        if not isinstance(call, dict):
            continue
        cid = call.get("id") or call.get("call_id")
        fn = call.get("function")
        name = fn.get("name") if isinstance(fn, dict) else call.get("name")
        if isinstance(cid, str) and isinstance(name, str) and name:
            out[cid] = name
    return out


def rows_names(rows: Iterable[tuple]) -> dict[str, str]:
    """``{call id: tool name}`` of the calls in ``rows`` (``ROW_COLUMNS`` tuples; later wins)."""
    out: dict[str, str] = {}
    for row in rows:
        if row[_CALLS] is not None:
            out.update(call_names(row[_CALLS]))
    return out


def _like(call_id: str) -> str:
    """A LIKE pattern finding the call id ``call_id`` anywhere in a stored ``tool_calls`` value
    (``\\`` escapes). The value is JSON written by ``normalize.dumps``, where an id holding a
    quote, a backslash or a control character is escaped (``\\"``): the pattern is that
    encoded form, else such a call would be found only by a bulk run (from the run's own rows),
    never once stored, and a store rebuilt from the spool would name results the live one
    left unnamed."""
    text = dumps(call_id)[1:-1]
    return "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def stored_names(conn: Any, sid: str, call_ids: Iterable[str]) -> dict[str, str]:
    """``{call id: tool name}`` for those of ``call_ids`` a call stored in session ``sid``
    carries (the newest such call, any state). ``conn``: an apsw connection or a
    ``PgConnection``. Only rows whose ``tool_calls`` text contains an id are read (LIKE,
    a pre-filter: the JSON decides). Raises ``DamagedValueError`` for such a row whose
    ``tool_calls`` does not parse (``call_names``)."""
    wanted = sorted(set(call_ids))
    found: dict[str, str] = {}
    for start in range(0, len(wanted), _CHUNK):
        part = wanted[start : start + _CHUNK]
        cond = " OR ".join("tool_calls LIKE ? ESCAPE '\\'" for _ in part)
        for mid, calls in conn.execute(
            f"SELECT id, tool_calls FROM messages WHERE session_id = ? "
            f"AND tool_calls IS NOT NULL AND ({cond}) ORDER BY id",
            (sid, *(_like(c) for c in part)),
        ):
            names = call_names(calls, f"tool calls of message {mid}")
            found.update((k, v) for k, v in names.items() if k in part)
    return found


def named(rows: list[tuple], names: dict[str, str]) -> list[tuple]:
    """``rows`` with each unnamed tool result's ``tool_name`` set from ``names`` (by call id)."""
    out = []
    for row in rows:
        cid = unnamed(row)
        if cid is not None and cid in names:
            row = (*row[:_NAME], names[cid], *row[_NAME + 1 :])
        out.append(row)
    return out


def fill(conn: Any, sid: str, rows: list[tuple]) -> list[tuple]:
    """``rows`` (one op's new rows of ``sid``) with their unnamed tool results named from the
    op's own calls, else from calls stored in ``sid``. No store read when nothing is unnamed."""
    missing = {c for c in map(unnamed, rows) if c is not None}
    if not missing:
        return rows
    names = rows_names(rows)
    if missing - names.keys():
        names = {**stored_names(conn, sid, missing - names.keys()), **names}
    return named(rows, names)


def fill_run(conn: Any, ops: list[tuple[str, list[tuple]]]) -> list[list[tuple]]:
    """``fill`` over a bulk run: ``ops`` are ``(session id, new rows)`` in spool order; each
    op's results are named from its own calls, then the run's earlier ops' rows of the same
    session, then the store (one read per session). Returns each op's rows."""
    if not any(unnamed(r) is not None for _, rows in ops for r in rows):
        return [rows for _, rows in ops]
    seen: dict[str, dict[str, str]] = {}  # session -> names of the run's rows so far
    out: list[list[tuple]] = []
    later: dict[str, set[str]] = {}  # session -> ids no call of the run named before use
    for sid, rows in ops:
        own = rows_names(rows)
        known = seen.setdefault(sid, {})
        rows = named(rows, {**known, **own})
        known.update(own)
        later.setdefault(sid, set()).update(c for c in map(unnamed, rows) if c is not None)
        out.append(rows)
    stored = {sid: stored_names(conn, sid, ids) for sid, ids in later.items() if ids}
    return [named(rows, stored.get(sid, {})) for (sid, _), rows in zip(ops, out)]

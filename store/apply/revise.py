"""Last copy wins: ``messages.append`` with ``revise: true`` rewrites the messages a session
already holds when the copy sent differs from the stored one (docs/ops.md).

Why: agents rewrite their records. Gemini CLI appends a message record again, whole, each
time its tool calls, results or tokens change (a tool result is first written ``executing``
with no output); a Gemini ``.json`` session is rewritten in place; an Aider reply grows in
its Markdown file. An import (and the watcher, which imports a file at any point while an
agent writes it) reads whatever version is there, so a message can be read before its last
copy. Without revision the store kept the first copy read (its id held, later copies were
skipped), so a live capture differed from an import of the final file.

Invariants:
* only the message's own columns change (``REVISED_COLUMNS``); a row keeps its store id, its
  place (``seq``, ``pos``), its state, its arrival, its batch and its ``origin_id``, so
  compaction, rewind and display order are untouched, and nothing is deleted;
* a copy without a timestamp keeps the stored time (never re-dated to its arrival); a tool
  result without a name keeps the stored name, else gets its call's (``tool_names.fill``);
* a revision that renames a tool call renames the session's results of that call named as
  its old copy (``_rename_results``), as an import of the final copy names results sent
  without a name: a capture that saw the first copy ends as the import, whether or not the
  result is sent again (an import sends only the records that differ);
* every row holding the producer id is revised (a compaction may hold a carried copy under
  the same id), and only when a value differs: re-sending the same copy changes nothing;
* indexes: SQLite's FTS rows of a revised row that is already indexed are replaced in the
  same transaction (``indexer.reindex``); PostgreSQL's ``words`` column is generated;
* replay: a revision is an op in the spool, applied in spool order, so a store rebuilt from a
  snapshot plus the spool holds the same rows;
* a deleted (pruned or purged) session holds no row to revise: a copy of one of its messages
  would be appended as new, so an op decided before the delete (``deletions_seen`` lower than
  the session's deletions) is applied as nothing before it gets here (``deletes.stale``).
"""

from __future__ import annotations

from typing import Any

import apsw

from quill.store import packed
from quill.store.apply import tool_names, usage
from quill.store.apply.message_rows import _CHUNK, check_tool_results, result_ids
from quill.store.apply.normalize import ROW_COLUMNS
from quill.store.apply.rules import backdate_start

#: The columns a revision rewrites (``ROW_COLUMNS`` without the producer id), in that order.
REVISED_COLUMNS = tuple(c for c in ROW_COLUMNS if c != "ext_id")
#: The VALUES marks of ``REVISED_COLUMNS``: a revised text is stored as a new one is.
_MARKS = packed.marks_sql(REVISED_COLUMNS).split(", ")
_NAME = REVISED_COLUMNS.index("tool_name")
_TS = REVISED_COLUMNS.index("ts")
_CALLS = REVISED_COLUMNS.index("tool_calls")


def merged(stored: tuple, row: tuple, msg: dict) -> tuple:
    """The ``REVISED_COLUMNS`` values a stored row (``stored``, that order) holds once revised
    by ``row`` (``normalize.message_row`` of ``msg``, ``ROW_COLUMNS`` order): the copy's
    values, except the stored time when ``msg`` carries none and the stored tool name when
    ``msg`` gives none."""
    out = list(row[1:])
    if msg.get("timestamp") is None:
        out[_TS] = stored[_TS]
    if out[_NAME] is None:
        out[_NAME] = stored[_NAME]
    return tuple(out)


def changed(stored: tuple, row: tuple, msg: dict) -> bool:
    """Whether revising ``stored`` by ``row`` (see ``merged``) would change a value."""
    return merged(stored, row, msg) != tuple(stored)


def held_versions(conn: Any, sid: str, ext_ids: list[str]) -> dict[str, list[tuple]]:
    """``{producer id: [(store id, *REVISED_COLUMNS values), …]}`` of ``sid``'s rows with
    those producer ids (every row holding one, in transcript order)."""
    out: dict[str, list[tuple]] = {}
    ids = sorted(set(ext_ids))
    cols = packed.columns_sql(REVISED_COLUMNS)
    for start in range(0, len(ids), _CHUNK):
        part = ids[start : start + _CHUNK]
        for ext, *values in conn.execute(
            f"SELECT ext_id, id, {cols} FROM messages WHERE session_id = ? "
            f"AND ext_id IN ({', '.join('?' for _ in part)}) ORDER BY seq",
            (sid, *part),
        ):
            out.setdefault(ext, []).append(tuple(values))
    return out


def revise(
    conn: Any,
    sid: str,
    copies: list[tuple[tuple, dict]],
    source: str | None,
    batch_id: str,
    arrived_at: float,
) -> int:
    """Rewrite ``sid``'s rows holding the producer id of each ``(row, message)`` of
    ``copies`` (``row``: ``normalize.message_row`` of the message, ``ROW_COLUMNS`` order; the
    last copy of an id wins) wherever a value differs (module doc). Usage a revised message
    carries is recorded as the append records it (``usage.record_messages``: merged into
    the row of its ``response_id``), else into the usage row that points at the message
    (one call, counted once, whichever copy named its response id; each figure its largest). Returns
    rows rewritten. Raises ``InvalidOpError``
    (``duplicate-tool-result``; usage reasons) — the caller's op is then refused whole."""
    last = {row[0]: (row, msg) for row, msg in copies}
    held = held_versions(conn, sid, list(last))
    changes: list[tuple[int, tuple, dict]] = []
    for ext, versions in held.items():
        row, msg = last[ext]
        for store_id, *stored in versions:
            if changed(tuple(stored), row, msg):
                changes.append((store_id, merged(tuple(stored), row, msg), msg))
    if not changes:
        return 0
    rows = tool_names.fill(conn, sid, [(None, *values) for _, values, _ in changes])
    renamed = _renamed_calls(conn, [(i, r) for r, (i, _, _) in zip(rows, changes)])
    sets = ", ".join(f"{c} = {m}" for c, m in zip(REVISED_COLUMNS, _MARKS))
    conn.executemany(
        f"UPDATE messages SET {sets} WHERE id = ?",
        [(*r[1:], store_id) for r, (store_id, _, _) in zip(rows, changes)],
    )
    ids = [store_id for store_id, _, _ in changes]
    revised = set(ids)
    ids += [i for i in _rename_results(conn, sid, renamed) if i not in revised]
    if isinstance(conn, apsw.Connection):  # SQLite's FTS5 tables; PostgreSQL's are generated
        from quill.store.sqlite.indexer import reindex

        reindex(conn, ids)
    backdate_start(conn, sid, min(r[1:][_TS] for r in rows))
    check_tool_results(conn, sid, result_ids(rows))
    # each copy dated as its revised row (its time, else the stored one: never its arrival)
    carrying = [(i, {**m, "timestamp": v[_TS]}) for i, v, m in changes if usage.carries_usage(m)]
    usage.record_messages(conn, sid, carrying, source, batch_id, arrived_at, merge_message=True)
    return len(changes)


def _renamed_calls(conn: Any, revised: list[tuple[int, tuple]]) -> dict[str, tuple[str, str]]:
    """``{call id: (old tool name, new tool name)}`` of the tool calls whose name the
    revision of ``revised`` (``(store id, (None, *REVISED_COLUMNS values))``, read before
    the rows are rewritten) changes."""
    out: dict[str, tuple[str, str]] = {}
    calls = [(i, r[1:][_CALLS]) for i, r in revised if r[1:][_CALLS] is not None]
    for start in range(0, len(calls), _CHUNK):
        part = calls[start : start + _CHUNK]
        stored = dict(
            conn.execute(
                f"SELECT id, tool_calls FROM messages WHERE id IN ({', '.join('?' for _ in part)})",
                [i for i, _ in part],
            )
        )
        for i, new in part:
            before = tool_names.call_names(stored.get(i))
            for cid, name in tool_names.call_names(new).items():
                if cid in before and before[cid] != name:
                    out[cid] = (before[cid], name)
    return out


def _rename_results(conn: Any, sid: str, renamed: dict[str, tuple[str, str]]) -> list[int]:
    """Give the tool results of ``sid`` (any state) answering a call of ``renamed``
    (``_renamed_calls``) and named as its old copy the call's new name, as an import of the
    final copy names a result sent without a name (``tool_names.fill``): the result need not
    be sent again. Returns the ids renamed (their text changed: the caller re-indexes)."""
    out: list[int] = []
    for cid, (old, new) in sorted(renamed.items()):
        ids = [
            r[0]
            for r in conn.execute(
                "SELECT id FROM messages WHERE session_id = ? AND tool_call_id = ? "
                "AND tool_name = ? AND role IN ('tool', 'function') ORDER BY id",
                (sid, cid, old),
            )
        ]
        for i in ids:
            conn.execute("UPDATE messages SET tool_name = ? WHERE id = ?", (new, i))
        out += ids
    return out

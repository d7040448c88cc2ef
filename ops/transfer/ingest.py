"""Turning pushed or imported transcripts into spool ops, with stable batch ids.

Batch ids are derived (UUIDv5) from what a batch *is* — the session and its messages' ids —
so pushing or importing the same input twice yields the same batch ids and the store applies
them once. Messages also carry per-session ids, so a transcript that grew since the last
import adds only its new messages.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

#: UUIDv5 namespace of stable batch ids (a constant: changing it would re-import everything).
NAMESPACE = "6f1d8a52-3c1e-4b9e-9a57-0c3d3f6b1e42"
#: Messages per ``messages.append`` op for imports: a batch is all-or-nothing, so smaller
#: batches confine a bad message; 200 keeps records well under a megabyte for typical turns.
IMPORT_BATCH_MESSAGES = 200


def stable_batch_id(*parts: Any) -> str:
    """A UUIDv5 over the canonical JSON of ``parts``."""
    import hashlib  # here, not at the top: `quill push` (per agent turn) never derives ids
    import uuid

    digest = hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()
    return str(uuid.uuid5(uuid.UUID(NAMESPACE), digest))


def session_ops(
    session: dict[str, Any],
    messages: list[dict[str, Any]],
    batch_messages: int = IMPORT_BATCH_MESSAGES,
) -> Iterator[tuple[str, dict, str]]:
    """``(op, data, batch_id)`` for one imported session: a create, then its messages in
    batches. Message ids missing from the source are filled with their index."""
    import hashlib

    sid = session["session_id"]
    yield "session.create", session, stable_batch_id("create", session)
    for start in range(0, len(messages), batch_messages):
        chunk = [
            m if m.get("id") is not None else {**m, "id": f"#{start + i}"}
            for i, m in enumerate(messages[start : start + batch_messages])
        ]
        yield (
            "messages.append",
            {"session_id": sid, "messages": chunk},
            stable_batch_id(
                "append",
                sid,
                [m["id"] for m in chunk],
                hashlib.sha256(json.dumps(chunk, sort_keys=True).encode()).hexdigest(),
            ),
        )


def push_ops(
    items: Iterable[Any], session_id: str | None
) -> Iterator[tuple[str, dict, str | None]]:
    """Interpret pushed JSON values as ops.

    Accepted, per value: ``{"op": KIND, "data": {...}}`` (an op as is, optional ``"batch"``);
    ``{"session_id": S, "messages": [...]}`` (a messages.append); a bare message
    ``{"role": ...}`` or a list of them (appended to ``session_id``, required then).
    ``session_id`` (``--session``) also fills in an op's or batch's missing session id; a value
    naming another session is refused, so the option is never silently ignored.
    Raises ``ValueError`` naming the offending value's index.
    """
    loose: list[dict] = []
    for index, item in enumerate(items):
        if isinstance(item, dict) and "op" in item:
            data = item.get("data")
            if session_id and item["op"] == "sessions.delete":
                raise ValueError(f"value {index}: --session does not apply to a sessions.delete op")
            if session_id and isinstance(data, dict):
                data = {**data, "session_id": _same_session(data, session_id, index)}
            yield item["op"], data, item.get("batch")
        elif isinstance(item, dict) and "messages" in item:
            sid = _same_session(item, session_id, index) if session_id else item.get("session_id")
            if not sid:
                raise ValueError(f"value {index}: a messages batch needs session_id (or --session)")
            yield "messages.append", {**item, "session_id": sid}, item.get("batch")
        elif isinstance(item, dict) and "role" in item:
            loose.append(item)
        elif isinstance(item, list) and all(isinstance(m, dict) for m in item):
            loose.extend(item)
        else:
            shown = json.dumps(item, ensure_ascii=False)
            shown = shown if len(shown) <= 80 else shown[:77] + "..."
            hint = ' (a message needs a "role")' if isinstance(item, dict) else ""
            raise ValueError(
                f"value {index}: expected an op, a messages batch or a message{hint}, got {shown}"
            )
    if loose:
        if not session_id:
            raise ValueError("bare messages need --session SESSION_ID")
        yield "messages.append", {"session_id": session_id, "messages": loose}, None


def _same_session(data: dict, session_id: str, index: int) -> str:
    """``session_id`` if ``data`` names no session or the same one; else ``ValueError``."""
    given = data.get("session_id")
    if given not in (None, "", session_id):
        raise ValueError(f"value {index} is for session {given!r} but --session is {session_id!r}")
    return session_id

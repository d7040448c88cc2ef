"""Keyset pages of a session's messages in one projection (``read_page``): what
``GET /api/v1/sessions/{id}/messages`` and ``quill.Client.transcript(limit=, after=)`` read.
A page is the messages after a position in the projection's order (``pos`` for display,
``seq`` otherwise); positions only grow as messages are appended, so a page never repeats or
skips a message appended meanwhile. The rows are ``projections.read``'s.
"""

from __future__ import annotations

from typing import Any

import apsw

from quill.store.read.projections import _rows, states


def read_page(
    conn: apsw.Connection,
    session_id: str,
    projection: str,
    limit: int,
    *,
    after_pos: int | None = None,
    clip: int | None = None,
) -> tuple[list[dict[str, Any]], int | None]:
    """A keyset page of ``read``: at most ``limit`` (≥ 1) messages positioned after
    ``after_pos`` (a position in the projection's order, as this returns; None: from the
    first), oldest first, and the position to continue after (None when no message
    follows). Positions only grow as messages are appended, so a page never repeats or
    skips a message appended meanwhile. Raises ``ValueError`` as ``read``."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError("limit must be a whole number ≥ 1")
    states(projection)
    if clip is not None and (isinstance(clip, bool) or not isinstance(clip, int) or clip < 1):
        raise ValueError("clip must be a whole number of characters ≥ 1")
    where: list[int] = []
    rows = _rows(
        conn,
        session_id,
        projection,
        limit=limit + 1,
        offset=0,
        latest=False,
        pos_gt=after_pos,
        clip=clip,
        positions=where,
    )
    if len(rows) <= limit:
        return rows, None
    return rows[:limit], where[limit - 1]

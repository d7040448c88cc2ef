"""Whether the writer would refuse this store's cursor, or start without the history the
spool no longer holds.

A store whose cursor for this spool is not this spool's (a ``state.db`` copied in from
another data dir, a spool cut or deleted under it) is refused by the writer at its start
(``spool.cursor_proof.check``, ``store.errors.CursorMismatchError``); the refusal is published
only while that writer lives, so ``cursor_mismatch`` runs the same check for status and doctor.

A store with no cursor for this data dir's spool (a new PostgreSQL store after the switch
from SQLite, an empty file put in place) is filled from the spool's oldest segment. Once
``spool_gc`` has collected segment 1 the spool alone no longer holds every session, so the
writer refuses such a store (``store.errors.HistoryNotInSpoolError``) until the history is
carried over (export/import) and the start is accepted (``quill recover --accept-loss``,
``RunDir.accept_start``). ``status`` and ``doctor`` say so even while no writer runs.
"""

from __future__ import annotations

from typing import Any

from quill.home import RunDir
from quill.spool import Position, cursor_proof
from quill.spool.retention import collected_before
from quill.store.errors import CursorMismatchError, HistoryNotInSpoolError
from quill.store.factory import capabilities, location, own_spool_id


def cursor_mismatch(cfg: Any, figures: dict[str, Any]) -> dict[str, Any] | None:
    """``{"error": text, "next": command}`` when the writer would refuse the store's cursor
    for this spool (``figures``: a reader's ``figures()``, with ``cursor`` and
    ``cursor_proof``) as not this spool's; else None (no cursor: ``start_gap``'s case). The
    next step is the writer's (``CursorMismatchError.next_for``). Raises ``OSError`` only
    when the spool cannot be read."""
    if not figures.get("cursor"):
        return None
    proof_offset, proof = figures.get("cursor_proof") or (None, None)
    problem = cursor_proof.check(
        cfg.spool_dir,
        Position.parse(figures["cursor"]),
        proof_offset,
        proof,
        max_line=cfg.max_record_bytes,
    )
    if problem is None:
        return None
    return {
        "error": f"{location(cfg)}'s cursor is not this spool's: {problem}; the writer "
        "applies nothing to it",
        "next": CursorMismatchError.next_for(capabilities(cfg).cluster),
    }


def start_gap(cfg: Any, cursor: str | None) -> dict[str, Any] | None:
    """``{"first_segment": n, "error": text, "next": text}`` when the store holds no cursor
    for this spool (``cursor`` None: as ``figures()["cursor"]`` reads it, or no store yet)
    while the spool starts past segment 1 and that start was not accepted; else None."""
    if cursor is not None:
        return None
    first = collected_before(cfg.spool_dir)
    if first is None:
        return None
    accepted = RunDir(cfg.home).accepted_start(location(cfg), own_spool_id(cfg))
    if accepted is not None and accepted >= first:
        return None
    return {
        "first_segment": first,
        "error": (
            f"{location(cfg)} holds no cursor for this spool, which starts at segment "
            f"{first}: the segments before it were collected, so their sessions are not in "
            "the spool and the writer will not start this store from it"
        ),
        "next": HistoryNotInSpoolError.next_step,
    }

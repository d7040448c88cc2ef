"""What every op applier shares: field validation, atomicity, session rows, end reasons.

Appliers (``store.apply.sessions.APPLIERS``) have the signature
``applier(conn, data, batch_id, arrived_at) -> rows written`` and run inside the writer's
transaction. Invariant: an applier that raises changed nothing — ``atomic`` wraps each one in
its own SAVEPOINT, so this holds even when it is called outside ``apply_chunk``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import apsw

from quill.spool.record import MAX_ID_CHARS, id_size_problem
from quill.store.apply.later import later
from quill.store.errors import InvalidOpError
from quill.store.read.lineage import compression_chain

Applier = Callable[[apsw.Connection, dict, str, float], int]

#: End reasons a live writer may clear by appending to the session again: the session was
#: closed by machinery (disconnect, shutdown, reaping, eviction), not by a decision, so a
#: later append continues the session.
AUTOMATIC_END_REASONS = frozenset(
    {
        "agent_close",
        "ws_orphan_reap",
        "superseded_by_resume",
        "startup_orphan_reap",
        "stale_sweep",
        "tui_shutdown",
        "ws_disconnect",
        "idle_timeout",
        "lru_evict",
        "orphan_sweep",
    }
)
#: Deliberate end reasons (documented for producers); any reason *not* in
#: ``AUTOMATIC_END_REASONS`` is treated as deliberate, so an unknown reason is never cleared.
DELIBERATE_END_REASONS = frozenset(
    {
        "ended",
        "user_exit",
        "compression",
        "session_reset",
        "session_switch",
        "new_session",
        "idle",
        "daily",
        "suspended",
        "resume_pending_expired",
        "branch",
        "delegate_done",
    }
)


def atomic(applier: Applier) -> Applier:
    """Run ``applier`` in a SAVEPOINT: on any exception everything it wrote is rolled back."""

    @functools.wraps(applier)
    def run(conn: apsw.Connection, data: dict, batch_id: str, arrived_at: float) -> int:
        conn.execute("SAVEPOINT quill_applier")
        try:
            rows = applier(conn, data, batch_id, arrived_at)
        except BaseException:
            conn.execute("ROLLBACK TO quill_applier")
            conn.execute("RELEASE quill_applier")
            raise
        conn.execute("RELEASE quill_applier")
        return rows

    return run


#: Longest session id, in characters (and at most ``spool.record.MAX_ID_BYTES`` UTF-8 bytes).
MAX_SESSION_ID = MAX_ID_CHARS


def session_id_problem(sid: Any) -> str | None:
    """Why ``sid`` is not a valid session id, or None if it is. The one rule for every way in
    (docs/ops.md, "Common rules"): spool ops (``precheck`` and the writer), ``quill push``,
    the client and the HTTP API — a string of 1..512 characters (≤ 1024 bytes in UTF-8: ids
    are indexed, ``spool.record.MAX_ID_BYTES``) with no control character (C0, DEL, C1:
    they corrupt terminals and logs), no lone surrogate, and no leading or trailing
    whitespace (an id that looks like another). ``/``, ``%`` and inner spaces are ordinary
    characters; the HTTP API takes them percent-encoded in its paths."""
    if not isinstance(sid, str) or not sid or len(sid) > MAX_SESSION_ID:
        return f"session_id must be a non-empty string (≤{MAX_SESSION_ID} chars), got {sid!r}"
    too_long = id_size_problem(sid, "session_id")
    if too_long:
        return too_long
    if sid != sid.strip():
        return f"session_id must not start or end with whitespace, got {sid!r}"
    if any(ord(c) < 32 or 127 <= ord(c) < 160 for c in sid):
        return f"session_id must not contain control characters, got {sid!r}"
    if not is_unicode(sid):
        return f"session_id must be valid Unicode (no lone surrogate), got {sid!r}"
    return None


def is_unicode(text: str) -> bool:
    """Whether ``text`` encodes to UTF-8: False for a lone surrogate (half of a broken UTF-16
    pair, or a byte smuggled in by ``surrogateescape``), which no store or wire can carry."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def session_id(data: dict) -> str:
    """``data['session_id']`` if it is a valid session id (``session_id_problem``), else
    ``InvalidOpError('invalid-session-id')``."""
    sid = data.get("session_id")
    problem = session_id_problem(sid)
    if problem is not None:
        raise InvalidOpError("invalid-session-id", problem)
    return sid


def opt(data: dict, key: str, kind: type | tuple[type, ...]) -> Any:
    """``data[key]`` if absent/None or of type ``kind`` (a bool is never an int here), else
    ``InvalidOpError('invalid-field')``."""
    value = data.get(key)
    if value is None:
        return None
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        raise InvalidOpError(
            "invalid-field", f"{key!r} has the wrong type ({type(value).__name__})"
        )
    if (
        isinstance(value, int) and not isinstance(value, bool) and str not in kinds
    ):  # (str, int) ids are text
        # What a column can hold: an INTEGER is 64-bit; a number stored as REAL must convert to
        # a float. (Exactly the values that would fail in the SQL binding or float().)
        if (float not in kinds and abs(value) >= 2**63) or (
            float in kinds and abs(value) >= 2**1023
        ):
            raise InvalidOpError(
                "invalid-field", f"{key!r} is out of range ({len(str(abs(value)))} digits)"
            )
    return value


def no_nul(data: dict, *keys: str) -> None:
    """``InvalidOpError('invalid-field')`` when a string ``data[key]`` holds a NUL character.
    For the text fields stored as given (sources, models, hosts, provider ids, versions):
    PostgreSQL text cannot hold NUL (psycopg refuses the value before sending it), so one
    rule on both backends refuses it rather than the PostgreSQL writer alone. Message text,
    titles, keys and ``meta`` lose NULs instead (``normalize.scrub``)."""
    for key in keys:
        value = data.get(key)
        if isinstance(value, str) and "\x00" in value:
            raise InvalidOpError("invalid-field", f"{key!r} must not contain NUL characters")


def ensure_session(
    conn: apsw.Connection,
    sid: str,
    arrived_at: float,
    source: str | None = None,
    started_at: float | None = None,
) -> None:
    """Create a *placeholder* session row if ``sid`` has none (ops may arrive before
    session.create); a placeholder still without a source takes ``source``. The later
    ``session.create`` completes the placeholder (its fields win) and clears the mark, so an
    op that arrives first never decides what the session is. ``started_at``
    (epoch s; default ``arrived_at``) is for a restored placeholder: an export carries it, so
    a re-import keeps the original start. Queued (``store.apply.later``): no answer needed."""
    later(
        conn,
        "INSERT INTO sessions (id, source, created_at, started_at, placeholder) "
        "VALUES (?, ?, ?, ?, 1) "
        "ON CONFLICT (id) DO UPDATE SET source = coalesce(sessions.source, excluded.source) "
        "WHERE sessions.placeholder = 1",
        (sid, source, arrived_at, arrived_at if started_at is None else started_at),
    )


def reopen_if_automatic(conn: apsw.Connection, sid: str) -> None:
    """A live writer appending to a session ended for an automatic reason proves the session
    alive: clear the end. Deliberate ends (and unknown reasons) stay. Queued
    (``store.apply.later``)."""
    later(
        conn,
        "UPDATE sessions SET ended_at = NULL, end_reason = NULL "
        "WHERE id = ? AND ended_at IS NOT NULL "
        f"AND end_reason IN ({', '.join('?' for _ in AUTOMATIC_END_REASONS)})",
        (sid, *sorted(AUTOMATIC_END_REASONS)),
    )


def session_exists(conn: apsw.Connection, sid: str) -> bool:
    return conn.execute("SELECT 1 FROM sessions WHERE id = ?", (sid,)).fetchone() is not None


def backdate_start(conn: Any, sid: str, earliest: float) -> None:
    """Move session ``sid``'s ``started_at`` back to ``earliest`` (epoch s, its earliest new
    message's time) when that is earlier: a backfilled session starts when its messages say,
    not when they arrived, so date filters (started at or before ``--until``) find it. Both
    append paths (``messages.messages_append``, ``bulk.apply_run``) call it. Queued
    (``store.apply.later``)."""
    later(
        conn,
        "UPDATE sessions SET started_at = ? WHERE id = ? AND started_at > ?",
        (earliest, sid, earliest),
    )


def compressed_among(conn: Any, sids: set[str], asked: list | None = None) -> set[str]:
    """The ids among ``sids`` of sessions ended for compression, in one statement (the bulk
    path asks once per run, not once per op; ``refuse_if_compressed`` then says why).
    ``asked``: what ``ask_compressed(conn, more)`` returned for a superset ``more`` of
    ``sids`` (default: read now)."""
    asked = ask_compressed(conn, sids) if asked is None else asked
    return {row[0] for rows in asked for row in rows if row[0] in sids}


def ask_compressed(conn: Any, sids: set[str]) -> list:
    """``compressed_among``'s reads, queued (``store.apply.later``): pass to it."""
    ordered, out = sorted(sids), []
    for at in range(0, len(ordered), 500):  # bound on SQL variables per statement
        part = ordered[at : at + 500]
        marks = ", ".join("?" * len(part))
        out.append(
            later(
                conn,
                f"SELECT id FROM sessions WHERE end_reason = 'compression' AND id IN ({marks})",
                tuple(part),
            )
        )
    return out


def refuse_if_compressed(conn: Any, sid: str, what: str) -> None:
    """Raise ``InvalidOpError('session-compressed')`` when session ``sid`` was ended for
    compression (``end_reason`` ``compression``). Its conversation goes on in a continuation
    (a ``parent_kind`` ``compression`` child), and every listing, resume and default search
    shows the chain's tip, so rows added to the ended session would be stored where no user
    looks. The op (``what`` names it in the detail) is refused whole, so it is quarantined with
    this reason and its producer's ``wait`` reports it; the detail names the live
    continuation to send it to instead (or says none exists yet). Every transcript write
    (append with new rows, replace, compact, rewind) calls this; reading is unaffected."""
    row = conn.execute("SELECT end_reason FROM sessions WHERE id = ?", (sid,)).fetchone()
    if row is None or row[0] != "compression":
        return
    chain = compression_chain(conn, sid)
    tip = chain[-1] if chain and chain[-1] != sid else None
    where = (
        f"its live continuation is session {tip!r}: send the messages there"
        if tip is not None
        else "no continuation of it is stored yet: send the messages to the session that "
        "continues it"
    )
    raise InvalidOpError(
        "session-compressed",
        f"{what} refused: session {sid!r} was ended for compression, so rows added to it "
        f"would be hidden behind its continuation; {where}",
    )

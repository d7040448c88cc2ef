"""Every op kind's *content* rules, one check function per kind (``CHECKS``).

One rule, one place: each applier (``store.apply.sessions.APPLIERS``) calls its kind's check
before it touches the store, and ``store.apply.precheck`` calls the same function before a
producer (``quill.Client``, ``quill push``, the HTTP API) is acknowledged. So an op the writer
would quarantine for its content — a field of the wrong JSON type, a value no column can hold, a
missing required field, a title over the limit — is refused at the producer with the very
reason the writer would give. A check raises ``InvalidOpError`` and returns what the applier
needs. Rules that need the store's state stay with the appliers and are reported by
``ops.client.wait``: whether a session or a message exists (``unknown-session``,
``unknown-message``), its role or state (``not-a-user-message``, ``not-live``), the live
head (``stale-head``), turn counts (``no-such-turn`` beyond 0), title clashes
(``duplicate-title``), tool-result duplicates, restore order. Payloads: docs/ops.md.

Imports stay light (no SQLite connection, indexer or msgspec): ``quill push`` loads this.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from quill.spool.record import MAX_ID_BYTES, MAX_ID_CHARS, id_size_problem
from quill.store.apply.message_checks import (
    check_append,
    check_compact,
    check_replace,
    check_restore,
    check_rewind,
)
from quill.store.apply.normalize import scrub
from quill.store.apply.reprice import check_reprice
from quill.store.apply.rules import no_nul, opt, session_id, session_id_problem
from quill.store.apply.usage_fields import check_usage_record
from quill.store.errors import InvalidOpError

EDGE_KINDS = frozenset({"compression", "branch", "reset", "delegate"})
#: Titles longer than this (after sanitising) are refused, not truncated: a producer that
#: sends a 5 KB "title" has a bug worth seeing.
TITLE_MAX_CHARS = 200
END_REASON_MAX_CHARS = 64
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff]")
#: Most sessions one ``sessions.delete`` op may name (bounds the op's transaction).
MAX_DELETE_IDS = 10_000
REASON_MAX_CHARS = 64
ACTOR_MAX_CHARS = 200
#: ``only_if`` keys and their JSON types.
_CONDITIONS: dict[str, type | tuple[type, ...]] = {
    "inactive_before": (
        int,
        float,
    ),  # skip if start or any message (ts or arrival) is at/after this
    "ended_before": (int, float),  # skip unless ended strictly before this
    "empty": bool,  # true: skip if the session has any message row, any state
    "unpinned": bool,  # true: skip pinned or archived sessions
    "open": bool,  # true: skip ended sessions
    "owner_pid": int,  # skip unless the recorded owner pid is this one
    "owner_started": (int, float),  # ... and the recorded owner start time is this one
    "sources": list,  # skip unless the session's source is one of these strings
}


def clean_title(title: str | None) -> str | None:
    """Sanitise a title: control and invisible format characters become spaces, whitespace
    runs collapse, ends are trimmed. ``None`` for an empty result (= no title).
    Raises ``InvalidOpError('title-too-long')`` above ``TITLE_MAX_CHARS``."""
    if title is None:
        return None
    title = " ".join(_CONTROL.sub(" ", scrub(title)).split())
    if len(title) > TITLE_MAX_CHARS:
        raise InvalidOpError(
            "title-too-long", f"title has {len(title)} characters; the limit is {TITLE_MAX_CHARS}"
        )
    return title or None


def key_field(data: dict) -> str | None:
    """``data['key']``: a non-empty string of ≤512 characters (scrubbed), or None."""
    key = opt(data, "key", str)
    if key is not None and (not key.strip() or id_size_problem(key, "key")):
        raise InvalidOpError(
            "invalid-field",
            f"key must be a non-empty string of at most {MAX_ID_CHARS} characters and "
            f"{MAX_ID_BYTES} bytes (UTF-8)",
        )
    return scrub(key) if key is not None else None


def check_create(data: dict) -> None:
    """``session.create``: every field's JSON type, ``parent_kind``, the parent pair, a
    self-parent, ``owner`` (integers within 64 bits), ``system_prompt``/``tools``, the
    title's length, ``key``. Raises ``InvalidOpError`` (``invalid-field``,
    ``invalid-session-id``, ``title-too-long``, ``self-parent``)."""
    from quill.store.apply import context

    sid = session_id(data)
    for key in ("source", "model", "cwd"):
        opt(data, key, str)
    no_nul(data, "source", "model", "cwd", "parent_id")
    opt(data, "meta", dict)
    opt(data, "revise", bool)
    opt(data, "started_at", (int, float))
    opt(data, "context_from_start", bool)
    kind, parent = opt(data, "parent_kind", str), opt(data, "parent_id", str)
    if kind is not None and kind not in EDGE_KINDS:
        raise InvalidOpError("invalid-field", f"parent_kind must be one of {sorted(EDGE_KINDS)}")
    if (kind is None) != (parent is None):
        raise InvalidOpError("invalid-field", "parent_id and parent_kind go together")
    too_long = None if parent is None else id_size_problem(parent, "parent_id")
    if too_long:
        raise InvalidOpError("invalid-field", too_long)
    if parent == sid:
        raise InvalidOpError("self-parent", f"session {sid!r} cannot be its own parent")
    owner = opt(data, "owner", dict) or {}
    pid, started = owner.get("pid"), owner.get("create_time")
    boot, ticks = owner.get("boot_id"), owner.get("start_ticks")
    if (
        not isinstance(pid, (int, type(None)))
        or not isinstance(started, (int, float, type(None)))
        or not isinstance(boot, (str, type(None)))
        or not isinstance(owner.get("host"), (str, type(None)))
        or not isinstance(ticks, (int, type(None)))
        or any(isinstance(v, bool) for v in (pid, ticks))
        or any(isinstance(v, int) and abs(v) >= 2**63 for v in (pid, started, ticks))
        or (isinstance(boot, str) and len(boot) > 64)
    ):  # INTEGER columns
        raise InvalidOpError(
            "invalid-field",
            "owner must be {host: str, pid: int, create_time: number, boot_id: str (at most 64), "
            "start_ticks: int} (integers within 64 bits)",
        )
    no_nul(owner, "host")
    no_nul(owner, "boot_id")
    context.validate(data)
    clean_title(opt(data, "title", str))
    key_field(data)


def parse_conditions(data: dict) -> dict[str, Any]:
    """The op's ``only_if`` object (``_CONDITIONS``), validated. Raises
    ``InvalidOpError('invalid-field')``."""
    cond = opt(data, "only_if", dict) or {}
    for key, value in cond.items():
        kind = _CONDITIONS.get(key)
        if kind is None:
            raise InvalidOpError(
                "invalid-field", f"only_if has unknown key {key!r}; known: {sorted(_CONDITIONS)}"
            )
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            raise InvalidOpError(
                "invalid-field", f"only_if.{key} has the wrong type ({type(value).__name__})"
            )
        if isinstance(value, float) and not math.isfinite(value):
            raise InvalidOpError("invalid-field", f"only_if.{key} must be finite")
        if isinstance(value, list) and not all(isinstance(v, str) for v in value):
            raise InvalidOpError("invalid-field", f"only_if.{key} must be a list of strings")
    return cond


def check_end(data: dict) -> tuple[str, str, float | int | None, dict[str, Any]]:
    """``session.end``: ``reason`` (≤64 printable characters, default ``ended``), ``ended_at``
    (a number), ``actor`` (a string), ``only_if``. Returns ``(session id, reason, ended_at,
    conditions)``. Raises ``InvalidOpError`` (``invalid-session-id``, ``invalid-field``)."""
    sid = session_id(data)
    reason = opt(data, "reason", str) or "ended"
    if len(reason) > END_REASON_MAX_CHARS or _CONTROL.search(reason):
        raise InvalidOpError(
            "invalid-field", f"end reason must be ≤{END_REASON_MAX_CHARS} printable characters"
        )
    ended = opt(data, "ended_at", (int, float))
    opt(data, "actor", str)
    return sid, reason, ended, parse_conditions(data)


def check_title(data: dict) -> tuple[str, str | None]:
    """``session.title``: ``title`` present, a string or null, ≤ ``TITLE_MAX_CHARS`` once
    cleaned. Returns ``(session id, cleaned title or None)``. Raises ``InvalidOpError``
    (``invalid-session-id``, ``invalid-field``, ``title-too-long``); ``duplicate-title`` needs
    the store (the applier)."""
    sid = session_id(data)
    if "title" not in data:
        raise InvalidOpError(
            "invalid-field", "session.title needs 'title' (empty string or null clears)"
        )
    return sid, clean_title(opt(data, "title", str))


def check_flags(data: dict) -> tuple[str, dict[str, bool]]:
    """``session.flags``: at least one of ``archived``/``pinned``/``hidden``, each a boolean.
    Returns ``(session id, flags)``. Raises ``InvalidOpError`` (``invalid-session-id``,
    ``invalid-field``)."""
    sid = session_id(data)
    flags = {k: data[k] for k in ("archived", "pinned", "hidden") if k in data}
    if not flags or not all(isinstance(v, bool) for v in flags.values()):
        raise InvalidOpError("invalid-field", "session.flags needs boolean archived/pinned/hidden")
    return sid, flags


def check_read(data: dict) -> tuple[str, int | None]:
    """``session.read``: ``message_id`` an integer within 64 bits, or absent. Returns
    ``(session id, message id)``. ``unknown-message`` needs the store (the applier)."""
    return session_id(data), opt(data, "message_id", int)


def _label(data: dict, key: str, limit: int, default: str) -> str:
    value = opt(data, key, str) or default
    if len(value) > limit or not value.isprintable():
        raise InvalidOpError("invalid-field", f"{key!r} must be ≤{limit} printable characters")
    return value


#: The op field a producer sets to the number of deletions of the op's session id its view of
#: the store knew of (``Reader.deletions``): the fact its decision rested on
#: (``store.apply.deletes.stale``). On ``sessions.delete``, which names many sessions, it is a
#: map ``{session id: deletions}`` (``check_delete``).
DELETIONS_SEEN = "deletions_seen"


def deletions_seen_map(data: dict, ids: list[str]) -> dict[str, int]:
    """``sessions.delete``'s ``deletions_seen``: ``{session id: deletions ≥ 0}``, each key one
    of ``ids``; ``{}`` when absent. Raises ``InvalidOpError('invalid-field')``."""
    seen = opt(data, DELETIONS_SEEN, dict) or {}
    named = set(ids)
    for sid, count in seen.items():
        if sid not in named:
            raise InvalidOpError(
                "invalid-field", f"{DELETIONS_SEEN} names {sid!r}, which session_ids does not"
            )
        if not isinstance(count, int) or isinstance(count, bool) or not 0 <= count < 2**63:
            raise InvalidOpError(
                "invalid-field", f"{DELETIONS_SEEN}[{sid!r}] must be an integer ≥ 0, got {count!r}"
            )
    return seen


def check_delete(data: dict) -> tuple[list[str], dict[str, Any], dict[str, int]]:
    """``sessions.delete``: ``session_ids`` (1..``MAX_DELETE_IDS`` valid ids), ``reason`` and
    ``actor`` (short printable strings), ``purge`` a boolean, ``only_if``, ``deletions_seen``
    (``deletions_seen_map``). Returns ``(unique session ids, conditions, deletions seen by
    id)``. Raises ``InvalidOpError('invalid-field')``."""
    ids = data.get("session_ids")
    if (
        not isinstance(ids, list)
        or not ids
        or len(ids) > MAX_DELETE_IDS
        or any(session_id_problem(s) for s in ids)
    ):
        raise InvalidOpError(
            "invalid-field", f"session_ids must be a list of 1..{MAX_DELETE_IDS} session ids"
        )
    _label(data, "reason", REASON_MAX_CHARS, "deleted")
    _label(data, "actor", ACTOR_MAX_CHARS, "unknown")
    opt(data, "purge", bool)
    unique = list(dict.fromkeys(ids))
    return unique, parse_conditions(data), deletions_seen_map(data, unique)


#: The content check of every op kind in ``spool.record.OP_KINDS`` (tests/test_op_checks.py
#: fails for a kind without one). Each takes the op's data (a dict) and raises
#: ``InvalidOpError``; its applier calls the same function first.
CHECKS: dict[str, Callable[[dict], Any]] = {
    "session.create": check_create,
    "session.end": check_end,
    "session.title": check_title,
    "session.flags": check_flags,
    "session.read": check_read,
    "messages.append": check_append,
    "messages.compact": check_compact,
    "messages.rewind": check_rewind,
    "messages.replace": check_replace,
    "messages.restore": check_restore,
    "sessions.delete": check_delete,
    "usage.record": check_usage_record,
    "usage.reprice": check_reprice,
}

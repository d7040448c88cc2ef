"""The event stream every format module yields, and collecting it into sessions.

Importing is streaming: a format module yields events in file order and never holds a
whole transcript, so import memory is bounded by the largest record plus one spool batch per
open session (bench/importer_memory.py). Events, per session id:

* ``SessionStart(session)``: the ``session.create`` payload, always before the session's
  other events (``parent_id``/``parent_kind`` link a ``delegate`` child to its parent;
  ``meta.parent_tool_call_id`` names the parent's tool call that started it);
* ``Message(session_id, message, rewound)``: one message; ``rewound`` = on an abandoned
  branch (appended, then flipped);
* ``Compact(session_id, messages, tail_count)``: a compaction here; ``messages`` is what the
  model was fed from now on (a summary, or Codex's replacement history);
* ``Rewind(session_id, ext_ids)``: earlier messages taken back (Codex ``thread_rolled_back``);
* ``Usage(session_id, data)``: a model call's usage with no message of its own (Codex
  ``token_count``), a ``usage.record`` payload.

``collect`` turns a stream into ``ImportedSession`` objects (for tests and small files):
``messages`` = every ``Message`` in order, plus ``rewound`` ids and ``compactions``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from quill.ops.importers.jsonlines import INJECTED, ImportedSession, injected_text, mark_injected


@dataclass
class SessionStart:
    """A session begins: ``session`` is its ``session.create`` payload.

    ``legacy_id``: the id an older importer derived from the file name (or line) for a
    format with no conversation id of its own; ``opening``: this conversation's first
    messages as parsed. The import uses ``legacy_id`` instead of ``session["session_id"]``
    when the store's session under it holds ``opening`` (same producer ids and
    messages, ``store.apply.normalize.COMPARED_COLUMNS``; an entry that is only ``{"id": uuid}``
    matches by id): that file was imported before the ids became content-derived."""

    session: dict
    legacy_id: str | None = None
    opening: list[dict] = field(default_factory=list)


@dataclass
class Message:
    """One message of ``session_id`` in source order."""

    session_id: str
    message: dict
    rewound: bool = False

    def __post_init__(self) -> None:
        mark_if_injected(self.message)


@dataclass
class Compact:
    """A compaction: ``messages`` replace every live message so far (``tail_count`` of them
    are verbatim copies of the last live ones)."""

    session_id: str
    messages: list[dict]
    tail_count: int = 0
    info: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        for message in self.messages:
            mark_if_injected(message)


@dataclass
class Rewind:
    """Messages (producer ids) of ``session_id`` taken back after they were sent."""

    session_id: str
    ext_ids: list[str]


@dataclass
class Usage:
    """One model call of ``session_id`` that stored no message of its own: a ``usage.record``
    payload without ``session_id`` (docs/ops.md, Usage)."""

    session_id: str
    data: dict


Event = SessionStart | Message | Compact | Rewind | Usage


def collect(events: Iterable[Event]) -> list[ImportedSession]:
    """All sessions of an event stream, in first-seen order, with their messages in memory."""
    sessions: dict[str, ImportedSession] = {}
    for ev in events:
        if isinstance(ev, SessionStart):
            sid = ev.session["session_id"]
            if sid not in sessions:
                sessions[sid] = ImportedSession(
                    session=ev.session,
                    legacy_id=ev.legacy_id,
                    opening=[str(m["id"]) for m in ev.opening],
                )
            continue
        s = sessions[ev.session_id]
        if isinstance(ev, Message):
            s.messages.append(ev.message)
            if ev.rewound:
                s.rewound.append(str(ev.message["id"]))
        elif isinstance(ev, Usage):
            s.usage.append(ev.data)
        elif isinstance(ev, Compact):
            s.compactions.append(
                {
                    "after": len(s.messages),
                    "messages": ev.messages,
                    "tail_count": ev.tail_count,
                    **ev.info,
                }
            )
        else:
            s.rewound.extend(ev.ext_ids)
    return list(sessions.values())


def mark_if_injected(message: dict) -> None:
    """Mark a user message whose text is injected context as a whole (``INJECTED``), for
    every format alike: an agent's own wrapper text never becomes a session's preview."""
    if (
        message.get("role") == "user"
        and not (message.get("extra") or {}).get(INJECTED)
        and injected_text(message.get("content"))
    ):
        mark_injected(message)

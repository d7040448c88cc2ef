"""OpenHands condensation events -> Quill compactions.

OpenHands (V0 event stream, ``openhands/events/action/agent.py`` and
``openhands/memory/view.py``) records a condensation as an action the agent adds to the
stream::

    {"id": 42, "source": "agent", "action": "condensation", "message": "Summary: …",
     "args": {"forgotten_event_ids": [3, 5] | null,
              "forgotten_events_start_id": 3 | null, "forgotten_events_end_id": 20 | null,
              "summary": "…" | null, "summary_offset": 1 | null}}

Exactly one of ``forgotten_event_ids`` and the ``start``/``end`` pair (inclusive range) is
set; ``summary`` and ``summary_offset`` are both set or both null. What the model is fed
afterwards (``View.from_events``) is every event so far minus all events any condensation
forgot (and minus every ``condensation`` and ``condensation_request`` action itself), with
the summary of the *latest* condensation that has one inserted as a user message at
``summary_offset`` in that event list. This module replays that rule over the messages the
importer made of each event:

* at a ``condensation`` action, the view's messages in order are the compacted set of a
  ``Compact`` (Quill's ``messages.compact``): kept messages are copies (id ``<id>#<n>``, the
  n-th incarnation), the summary a ``user`` message ``event:<condensation id>`` marked
  ``extra.compaction_summary``; trailing copies of the last live messages are the
  ``tail_count``;
* a condensation that changes nothing the model sees (it forgot only events without
  messages, and brings no summary) yields nothing; one that would leave the model nothing is
  reported (``skipped``), never applied as an empty compaction.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from quill.ops.importers.events import Compact
from quill.ops.importers.jsonlines import ShapeError, make_message, parse_timestamp

CONDENSATION = "condensation"
CONDENSATION_REQUEST = "condensation_request"


def _ids(value: Any, key: str) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise ShapeError(f"condensation {key} must be an event id (integer)")


def forgotten(args: dict) -> list[int]:
    """The event ids a condensation's ``args`` forget (OpenHands' ``CondensationAction
    .forgotten``). Raises ``ShapeError`` for a configuration OpenHands refuses (both or
    neither of the id list and the range; a summary without an offset or the reverse)."""
    listed, start, end = (
        args.get("forgotten_event_ids"),
        args.get("forgotten_events_start_id"),
        args.get("forgotten_events_end_id"),
    )
    for key, value in (("forgotten_events_start_id", start), ("forgotten_events_end_id", end)):
        _ids(value, key)
    if listed is not None:
        if not isinstance(listed, list):
            raise ShapeError("condensation forgotten_event_ids must be a list")
        for v in listed:
            _ids(v, "forgotten_event_ids")
    by_range = start is not None and end is not None
    if (listed is not None) == by_range:
        raise ShapeError("condensation needs either forgotten_event_ids or a start/end range")
    if (args.get("summary") is None) != (args.get("summary_offset") is None):
        raise ShapeError("condensation summary and summary_offset must come together")
    if args.get("summary") is not None and not isinstance(args["summary"], str):
        raise ShapeError("condensation summary must be a string")
    _ids(args.get("summary_offset"), "summary_offset")
    return list(listed) if listed is not None else list(range(start, end + 1))


@dataclass
class _Slot:
    """One event of the stream with the messages the importer made of it."""

    event_id: Any
    messages: list[dict]


@dataclass
class View:
    """The model's view of one OpenHands event list, replayed as events arrive."""

    sid: str
    events: list[_Slot] = field(default_factory=list)
    dropped: set = field(default_factory=set)  # event ids no view shows again
    summary: dict | None = None  # the latest summary message (as first stored)
    summary_offset: int = 0
    live: list[str] = field(default_factory=list)  # source ids of the live messages, in order
    copies: dict[str, int] = field(default_factory=dict)  # source id -> incarnations so far

    def add(self, ev: dict, messages: list[dict]) -> Compact | None:
        """Record ``ev`` (already checked) and the messages made of it; return the
        compaction a ``condensation`` action makes, else None. Raises ``ShapeError`` for
        condensation args OpenHands would refuse (the event is then not applied)."""
        kind = ev.get("action")
        if kind == CONDENSATION:
            args = ev.get("args") or {}
            lost = forgotten(args)
            self.dropped.update(lost)
            self.dropped.add(ev["id"])
            if args.get("summary") is not None:
                self.summary = make_message(
                    f"event:{ev['id']}",
                    "user",
                    args["summary"],
                    timestamp=parse_timestamp(ev.get("timestamp")),
                    extra={
                        "openhands_event": {"id": ev["id"], "source": ev["source"], "kind": kind},
                        "compaction_summary": True,
                        "condensation": {k: v for k, v in args.items() if k != "summary"},
                    },
                )
                self.summary_offset = args["summary_offset"]
            return self._compact(ev)
        if kind == CONDENSATION_REQUEST:
            self.dropped.add(ev["id"])
        self.events.append(_Slot(ev["id"], messages))
        self.live += [str(m["id"]) for m in messages]
        return None

    def _compact(self, ev: dict) -> Compact | None:
        kept: list[_Slot | None] = [s for s in self.events if s.event_id not in self.dropped]
        if self.summary is not None:
            kept.insert(self.summary_offset, None)  # list.insert clamps, as OpenHands' does
        sources = [
            m
            for slot in kept
            for m in ([self.summary] if slot is None else slot.messages)  # type: ignore[list-item]
        ]
        ids = [str(m["id"]) for m in sources]
        if ids == self.live:
            return None  # nothing the model sees changed
        if not sources:
            raise ShapeError(
                f"condensation {ev['id']} leaves the model no message; not applied as a compaction"
            )
        out = [self._copy(m) for m in sources]
        tail = 0
        # Trailing copies of the last live messages, in order: a verbatim carried tail (a
        # fresh summary is never live, so it ends the tail).
        while tail < min(len(ids), len(self.live)) and ids[-1 - tail] == self.live[-1 - tail]:
            tail += 1
        self.live = ids
        return Compact(self.sid, out, tail, info={"event": ev["id"]})

    def _copy(self, message: dict) -> dict:
        """``message`` as the compacted set carries it: the first incarnation of the summary
        as it is, every later one (and every kept message) as a copy ``<id>#<n>``."""
        src = str(message["id"])
        # A kept message's first incarnation is the one appended; a summary's is this one.
        n = self.copies[src] = self.copies.get(src, 0 if message is self.summary else 1) + 1
        return message if n == 1 else {**message, "id": f"{src}#{n}"}

"""Codex CLI rollout JSONL -> one Quill session per file.

Only the ``response_item`` stream (what the model saw) becomes messages; the
``event_msg`` stream duplicates it for the UI and is only counted. Mapping, one
message per item, id = "line:<n>" (source line number):

* ``message`` -> its role (developer/user/assistant), text parts joined;
* ``function_call`` / ``custom_tool_call`` / ``web_search_call`` -> an assistant
  message with one tool call (custom tool input wrapped as {"input": ...});
* ``*_output`` -> a ``tool`` message with ``tool_call_id`` and the call's name;
* ``reasoning`` summary/content text is attached to the next assistant-side
  message (empty/encrypted-only reasoning is counted, not emitted).

Structure, streamed in two passes (pass 1 reads only record types,
the session meta, turn models and thread names):

* a ``compacted`` record is a compaction: its ``replacement_history`` (mapped item by item
  as above, a ``compaction`` item becoming an assistant message holding the encrypted
  summary in extra) is the compacted set, i.e. what the model was fed afterwards; an older
  record with only ``message`` gives a one-message summary. Summarised in
  ``meta.compactions`` too;
* an ``event_msg`` ``thread_rolled_back {num_turns}`` rewinds the messages of the last
  ``num_turns`` user turns. A turn starts at the user message an ``event_msg user_message``
  echoes, and at the first typed prompt after a ``turn_context`` of a new ``turn_id`` (a turn
  whose prompt has no echo); injected context such as AGENTS.md or an
  ``<environment_context>`` block is not a turn;
* ``event_msg`` ``thread_name_updated`` gives the title (the last one wins);
* ``event_msg`` ``token_count`` -> a ``Usage`` event per model call: the change of the
  running ``total_token_usage`` (``last_token_usage`` only when the total went down;
  ``_token_count``);
* rollouts written before the envelope (a bare ``{id, timestamp, instructions, git}`` header,
  ``{"record_type": "state"}`` lines, bare response items without timestamps) are read as
  their envelope form (``envelope``): header -> ``session_meta``, state -> counted;
* record types this version does not know are ignored and counted (``meta.counts``).

Session id: "codex:<session_meta id>"; a rollout without one gets "codex:<file name>:<hash
of its first record>" (the file name alone, what older versions used, is offered as
``legacy_id`` with the first message, for stores that hold it).

Pass 1 is ``codex_scan.py``, the record-by-record mapping of pass 2 ``codex_items.py``; this
module recognises rollout lines and runs the two passes over a file (``stream``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from quill.ops.importers.codex_items import FORMAT, ITEM_TYPES, State, record_events
from quill.ops.importers.codex_scan import RECORD_TYPES, Scan, session_of
from quill.ops.importers.events import Event, Message, SessionStart
from quill.ops.importers.jsonlines import Problem, make_message, name_in_id, shape_problem

Records = Callable[[list[Problem]], Iterable[tuple[int | None, Any]]]

__all__ = [
    "FORMAT",
    "enveloped",
    "looks_like_line",
    "looks_like_record",
    "looks_like_transcript",
    "stream",
]

#: Keys of the bare session header rollouts had before ``session_meta`` (openai/codex
#: codex-rs/core/src/rollout.rs: ``SessionMeta {id, timestamp, instructions}``, later with
#: ``git``, then ``cwd``/``originator``/``cli_version``).
_HEADER_KEYS = frozenset(
    {"id", "timestamp", "instructions", "git", "cwd", "originator", "cli_version", "model"}
)
#: Bare response items a pre-envelope rollout holds, with the key each one must have.
_BARE_ITEMS = {
    "message": "role",
    "reasoning": "summary",
    "function_call": "call_id",
    "function_call_output": "call_id",
    "local_shell_call": "action",
    "custom_tool_call": "call_id",
    "custom_tool_call_output": "call_id",
}


def _legacy_header(obj: Any) -> bool:
    return (
        isinstance(obj, dict)
        and isinstance(obj.get("id"), str)
        and isinstance(obj.get("timestamp"), str)
        and set(obj) <= _HEADER_KEYS
    )


def _bare_item(obj: Any) -> bool:
    return (
        isinstance(obj, dict)
        and "payload" not in obj
        and isinstance(obj.get("type"), str)
        and _BARE_ITEMS.get(obj["type"]) in obj
    )


def envelope(obj: Any) -> Any:
    """A line of the pre-envelope layout in today's ``{timestamp, type, payload}`` form (the
    bare header -> ``session_meta``, a ``{"record_type": "state"}`` line -> ``state``, a bare
    response item -> ``response_item`` with no timestamp); any other value unchanged."""
    if _legacy_header(obj):
        return {"timestamp": obj["timestamp"], "type": "session_meta", "payload": obj}
    if isinstance(obj, dict) and obj.get("record_type") == "state" and "type" not in obj:
        return {"type": "state", "payload": {k: v for k, v in obj.items() if k != "record_type"}}
    if _bare_item(obj):
        return {"timestamp": obj.get("timestamp"), "type": "response_item", "payload": obj}
    return obj


def enveloped(records: Records) -> Records:
    """``records`` with every line passed through ``envelope`` (both layouts read alike)."""

    def read(problems: list[Problem]) -> Iterator[tuple[int | None, Any]]:
        return ((line, envelope(rec)) for line, rec in records(problems))

    return read


def looks_like_record(obj: Any) -> bool:
    """True for a dict shaped like one Codex rollout line of a known type (either layout)."""
    obj = envelope(obj)
    return looks_like_line(obj) and obj["type"] in RECORD_TYPES


def looks_like_line(obj: Any) -> bool:
    """True for any ``{type, payload: {...}}`` line (known type or one added later)."""
    return (
        isinstance(obj, dict)
        and isinstance(obj.get("type"), str)
        and isinstance(obj.get("payload"), dict)
    )


def looks_like_transcript(obj: Any) -> bool:
    """True for a line that carries the transcript (what detection keys on), in either
    layout (``envelope``)."""
    obj = envelope(obj)
    return looks_like_line(obj) and obj["type"] in ("session_meta", "response_item")


def _opening(path: Path, records: Records, sid: str) -> list[dict]:
    """The first message of a rollout (read up to it, problems discarded): what a store
    made by an older version must hold under the file-name id for the import to keep it."""
    st = State(sid, path, [])
    for line, rec in records([]):
        if not looks_like_line(rec):
            continue
        try:
            for ev in record_events(st, line, rec):
                if isinstance(ev, Message):
                    return [ev.message]
        except (TypeError, AttributeError, ValueError, KeyError, RecursionError):
            continue
    return []


def stream(path: Path, records: Records, problems: list[Problem]) -> Iterator[Event]:
    """Events of one rollout file (at most one session); ``records(problems)`` re-reads it.
    Pre-envelope lines are read as their envelope form (``envelope``)."""
    records = enveloped(records)
    scan = Scan()
    for line, rec in records([]):
        if looks_like_line(rec):
            scan.note(line, rec)
    if scan.meta_payload is None and not any(k.startswith("response_item:") for k in scan.counts):
        for line, rec in records(problems):  # report the damage; nothing to import
            if not looks_like_line(rec):
                problems.append(
                    Problem(
                        str(path), line, "skipped", "not a Codex {timestamp, type, payload} record"
                    )
                )
        return
    session = session_of(path, scan, problems)
    if session["meta"].get("session_id_synthesized"):  # older versions named it by the file alone
        yield SessionStart(
            session,
            f"{FORMAT}:{name_in_id(Path(path).name)}",
            _opening(path, records, session["session_id"]),
        )
    else:
        yield SessionStart(session)
    st = State(session["session_id"], path, problems)
    for line, rec in records(problems):
        if not looks_like_line(rec):
            problems.append(
                Problem(str(path), line, "skipped", "not a Codex {timestamp, type, payload} record")
            )
            continue
        try:
            yield from record_events(st, line, rec)
        except (TypeError, AttributeError, ValueError, KeyError, RecursionError) as exc:
            problems.append(
                Problem(str(path), line, "skipped", f"{rec['type']} record: {shape_problem(exc)}")
            )
    if st.pending_reasoning:  # reasoning with nothing after it: keep it as its own message
        yield Message(
            st.sid, make_message(st.next_id(None), "assistant", None, reasoning=st.take_reasoning())
        )
    if scan.counts.get("ignored_items"):
        kinds = sorted(
            k.split(":", 1)[1]
            for k in scan.counts
            if k.startswith("response_item:") and k.split(":", 1)[1] not in ITEM_TYPES
        )
        problems.append(
            Problem(
                str(path),
                None,
                "ignored",
                f"{scan.counts['ignored_items']} response item(s) of "
                f"unknown type(s) {', '.join(kinds)} ignored",
            )
        )
    if scan.counts.get("ignored_records"):
        problems.append(
            Problem(
                str(path),
                None,
                "ignored",
                f"{scan.counts['ignored_records']} record(s) of unknown type(s) ignored",
            )
        )

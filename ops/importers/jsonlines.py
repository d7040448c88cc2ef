"""Shared record types and a tolerant JSON-lines reader for the importers.

The reader never gives up on a file because of one bad line:

* each physical line (split on ``\\n`` only) is decoded with a
  ``json.JSONDecoder().raw_decode`` loop, so two objects glued together on one
  line are both recovered (the line is reported as a ``"repaired"`` problem);
* a line where nothing decodes is reported as ``"skipped"`` with the decoder's
  reason; a line that decodes partially keeps what decoded (``"repaired"``);
* blank lines are ignored; there is no line-length limit.

This module also holds the small dataclasses and helpers every format module
shares (they live here, not in ``__init__``, to avoid import cycles).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from quill.ops.importers.source import Source, opened


class ShapeError(ValueError):
    """A record field of the wrong JSON type (a list where an object belongs …); the message
    names the field and the type found. The record is reported as a ``skipped`` problem of
    its line with this message, not with a Python exception name."""


def member_object(record: dict[str, Any], key: str) -> dict[str, Any]:
    """``record[key]`` when that member is a JSON object, else an empty one: an optional
    nested object read leniently (a missing or mistyped one reads as no fields)."""
    value = record.get(key)
    return value if isinstance(value, dict) else {}


def shape_problem(exc: Exception) -> str:
    """The problem text for an exception raised while mapping one record: a ``ShapeError``'s
    own message; anything else (a mapping bug the format module missed) with its type."""
    return (
        str(exc)
        if isinstance(exc, ShapeError)
        else f"unexpected shape: {type(exc).__name__}: {exc}"
    )


@dataclass(frozen=True)
class Problem:
    """Something in an input file: ``kind`` "skipped" (not imported), "repaired" (recovered)
    or "ignored" (records of types the importer does not know, counted)."""

    path: str
    line: int | None
    kind: str
    reason: str


@dataclass
class ImportedSession:
    """One session: the ``session.create`` payload plus its messages in source order,
    the producer ids of messages on abandoned branches (``rewound``) and its compactions
    (``{"after": messages before it, "messages": compacted set, "tail_count", ...}``)."""

    session: dict
    messages: list[dict] = field(default_factory=list)
    rewound: list[str] = field(default_factory=list)
    compactions: list[dict] = field(default_factory=list)
    #: ``usage.record`` payloads (without session_id) of calls with no message of their own
    usage: list[dict] = field(default_factory=list)
    #: the file-name-derived id older importers gave it, if any (``SessionStart.legacy_id``)
    legacy_id: str | None = None
    #: producer ids of the messages that identify it for ``legacy_id`` (empty: all of them)
    opening: list[str] = field(default_factory=list)


@dataclass
class ParsedFile:
    """The result of parsing one file (``format`` None = not a supported transcript)."""

    path: str
    format: str | None
    sessions: list[ImportedSession] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)


_WS = " \t\r\n\ufeff"


def decode_line(text: str) -> tuple[list[Any], str | None]:
    """Decode every JSON value found back to back in ``text``.

    Returns ``(values, error)``: ``error`` is None when the whole line was
    consumed, else the reason decoding stopped (values decoded before that
    point are still returned).
    """
    decoder = json.JSONDecoder()
    values: list[Any] = []
    pos, end = 0, len(text)
    while True:
        while pos < end and text[pos] in _WS:
            pos += 1
        if pos >= end:
            return values, None
        try:
            value, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            return values, f"{exc.msg} at column {exc.colno}"
        except RecursionError:
            return values, f"nesting too deep at column {pos + 1}"
        values.append(value)


def iter_jsonl(src: Source | Path, problems: list[Problem]) -> Iterator[tuple[int, Any]]:
    """Yield ``(line_number, value)`` for every JSON value in a JSON-lines file: a ``Source``
    (one version, read up to its size) or a path (opened once here).

    Line numbers are 1-based physical lines. Problems are appended to
    ``problems`` as they are found; iteration always continues to the end.
    A ``live`` source (a file an agent is still appending to): a line its size ends inside
    of, or an unterminated last line that does not decode, is still being written: left out,
    unreported. Raises ``OSError`` when a path cannot be opened.
    """
    with opened(src) as source, source.reader() as fh:
        path, live = source.path, source.live
        for lineno, raw in enumerate(fh, 1):
            text = raw.decode("utf-8", errors="replace")
            if not text.strip(_WS):
                continue
            values, error = decode_line(text)
            if error is not None and live and not raw.endswith(b"\n"):
                return
            if error is None and len(values) > 1:
                problems.append(
                    Problem(
                        str(path),
                        lineno,
                        "repaired",
                        f"{len(values)} JSON objects on one line; all recovered",
                    )
                )
            elif error is not None and values:
                problems.append(
                    Problem(
                        str(path),
                        lineno,
                        "repaired",
                        f"recovered {len(values)} object(s), dropped the rest: {error}",
                    )
                )
            elif error is not None:
                problems.append(Problem(str(path), lineno, "skipped", f"invalid JSON: {error}"))
            for value in values:
                yield lineno, value


def iter_json_array(text: str, path: Path, problems: list[Problem]) -> Iterator[tuple[int, Any]]:
    """Yield ``(line_number, element)`` for each element of a top-level JSON array.

    Tolerant: when an element does not decode, it is reported as "skipped" and
    reading resumes at the next line that starts a new element at the same
    indentation as the first one (pretty-printed dumps), so one damaged record
    does not lose the rest of the file. A missing closing ``]`` is "repaired".
    """
    decoder = json.JSONDecoder()
    end = len(text)
    pos = _skip(text, 0, _WS)
    if pos >= end or text[pos] != "[":
        return
    line, counted = 1, 0

    def line_at(p: int) -> int:
        nonlocal line, counted
        line += text.count("\n", counted, p)
        counted = p
        return line

    pos = _skip(text, pos + 1, _WS)
    indent = text[text.rfind("\n", 0, pos) + 1 : pos] if "\n" in text[:pos] else None
    while True:
        pos = _skip(text, pos, _WS + ",")
        if pos >= end:
            problems.append(Problem(str(path), line_at(end), "repaired", "JSON array not closed"))
            return
        if text[pos] == "]":
            return
        start_line = line_at(pos)
        try:
            value, pos = decoder.raw_decode(text, pos)
        except (json.JSONDecodeError, RecursionError) as exc:
            reason = getattr(exc, "msg", "nesting too deep")
            nxt = text.find("\n" + indent + "{", pos + 1) if indent is not None else -1
            if nxt < 0:
                problems.append(
                    Problem(
                        str(path),
                        start_line,
                        "skipped",
                        f"array element unreadable ({reason}); rest of the array dropped",
                    )
                )
                return
            problems.append(
                Problem(
                    str(path),
                    start_line,
                    "skipped",
                    f"array element unreadable ({reason}); resumed at line {line_at(nxt + 1)}",
                )
            )
            pos = nxt + 1
            continue
        yield start_line, value


def _skip(text: str, pos: int, chars: str) -> int:
    while pos < len(text) and text[pos] in chars:
        pos += 1
    return pos


def read_text(src: Source | Path) -> str:
    """A whole file as text (UTF-8, BOM stripped, bad bytes replaced): a ``Source``'s
    version, or a path opened once. Raises ``OSError``."""
    with opened(src) as source:
        return source.read_bytes().decode("utf-8-sig", errors="replace")


def line_session_id(fmt: str, file_name: str, line: int | None, seen: dict[int | None, int]) -> str:
    """The session id a record of a file had before content ids (``fmt:file:line``, plus
    ``:k`` for the k-th extra record recovered from the same glued line; ``seen`` counts per
    line). Not unique to a conversation (same-named files in two folders share it): only
    offered as ``SessionStart.legacy_id``, so stores made by the old scheme keep working."""
    k = seen.get(line, 0)
    seen[line] = k + 1
    return f"{fmt}:{file_name}:{line}" + (f":{k}" if k else "")


#: Characters a session id may not hold (``store.apply.rules.session_id_problem``) that a file
#: or folder name may: C0 controls, DEL, C1 controls, and lone surrogates (the bytes of a name
#: that is not UTF-8, as Python decodes them).
_NOT_IN_IDS = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def name_in_id(name: str) -> str:
    """A file or folder name as a part of a session id: every character no id may hold
    (``_NOT_IN_IDS``) becomes U+FFFD, which the spool's encoder already made of a lone
    surrogate, so an id stored before keeps its value. A name with a tab or a newline (legal
    on Linux) otherwise gives an id the store refuses, and the whole session is quarantined."""
    return _NOT_IN_IDS.sub("\ufffd", name)


def content_session_id(fmt: str, file_name: str, source: Any) -> str:
    """``fmt:file:<16 hex>``: a session id for a conversation whose format carries no id of
    its own, the first 64 bits of a SHA-256 over ``source`` as canonical JSON. ``source`` is
    raw source data that never changes as the file grows: a whole record for one-record
    conversations (ShareGPT line), the opening messages for a file that grows by appended
    messages (``opening_length``). Hashing raw source, not parsed messages, keeps ids
    stable across importer versions. The file name stays in the id for the reader only
    (``name_in_id``)."""
    import hashlib

    raw = json.dumps(source, sort_keys=True, ensure_ascii=False, default=str)
    digest = hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{fmt}:{name_in_id(file_name)}:{digest}"


def opening_length(roles: list[Any]) -> int:
    """How many leading messages identify a conversation that grows by appending: the
    system/developer messages it starts with plus the first other message (all of them
    when there is no other yet)."""
    for i, role in enumerate(roles):
        if role not in ("system", "developer"):
            return i + 1
    return len(roles)


def parse_timestamp(value: Any) -> float | None:
    """ISO-8601 string or epoch number -> epoch seconds (naive strings read as UTC)."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        v = float(value)
        return v / 1000.0 if v > 1e11 else v  # milliseconds -> seconds
    if not isinstance(value, str) or not value.strip():
        return None
    s = value.strip()
    try:
        return parse_timestamp(float(s))
    except ValueError:
        pass
    if s.endswith(("Z", "z")):
        s = s[:-1] + "+00:00"
    try:
        dt = datetime.fromisoformat(s)
    except ValueError:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


def make_message(
    id: str,
    role: str,
    content: Any = None,
    *,
    tool_calls: list | None = None,
    tool_call_id: str | None = None,
    name: str | None = None,
    reasoning: str | None = None,
    timestamp: float | None = None,
    extra: dict | None = None,
) -> dict:
    """Build a message dict, leaving out keys whose value is None/empty extra."""
    msg: dict[str, Any] = {"id": id, "role": role, "content": content}
    for key, value in (
        ("tool_calls", tool_calls or None),
        ("tool_call_id", tool_call_id),
        ("name", name),
        ("reasoning", reasoning),
        ("timestamp", timestamp),
    ):
        if value is not None:
            msg[key] = value
    if extra:
        msg["extra"] = {k: v for k, v in extra.items() if v is not None}
    return msg


def make_tool_call(call_id: str, name: str, arguments: Any) -> dict:
    """An OpenAI-style tool call; ``arguments`` is always a JSON string."""
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name or "", "arguments": arguments},
    }


def join_text(parts: list[str]) -> str | None:
    """Join non-empty text pieces with blank lines; None when nothing is left."""
    kept = [p for p in parts if isinstance(p, str) and p != ""]
    return "\n\n".join(kept) if kept else None


class CallIds:
    """Tool call ids made unique within one session, for a source that reuses them.

    The store keeps at most one live tool result per (session, tool_call_id)
    (``duplicate-tool-result``, docs/ops.md), so a call id that comes again (SWE-agent
    demonstration replays repeat ids) must get a fresh one or its whole batch is refused.
    ``call(id)`` -> the id to store: the source id the first time, ``<id>#<n>`` for its n-th
    reuse; ``result(id)`` -> the stored id of the latest call with that source id (the one a
    result answers), or ``id`` itself when no call had it."""

    def __init__(self) -> None:
        self._seen: dict[str, int] = {}
        self._latest: dict[str, str] = {}

    def call(self, source_id: str) -> str:
        n = self._seen.get(source_id, 0)
        self._seen[source_id] = n + 1
        self._latest[source_id] = source_id if n == 0 else f"{source_id}#{n}"
        return self._latest[source_id]

    def result(self, source_id: str) -> str:
        return self._latest.get(source_id, source_id)


#: The ``extra`` key (value ``true``) of a user-role message the agent injected rather than
#: the user typed: an instructions file (AGENTS.md), an environment or permissions block, a
#: slash command's wrapper and output, a hook's or a reminder's text, Claude Code's
#: ``isMeta`` records. It stays a user message (the model saw it as one); listings take a
#: session's preview from the first user message without it (``store/read/listing.py``).
INJECTED = "injected"
#: Text that is injected context as a whole: the AGENTS.md preamble Codex writes, or one or
#: more whole tag blocks and nothing else (``<environment_context>…</environment_context>``,
#: ``<command-name>…</command-name><local-command-stdout>…``, ``<system-reminder>…``).
_INJECTED_TEXT = re.compile(
    r"\A\s*(?:# AGENTS\.md instructions|(?:<([a-z][a-z_-]*)>[\s\S]*?</\1>\s*)+\Z)"
)
#: Longer texts are not checked as tag blocks (a typed prompt can be long; the pattern's
#: cost grows with the text): only the AGENTS.md preamble, by its start.
_INJECTED_SCAN_CHARS = 256 * 1024


def injected_text(content: Any) -> bool:
    """Whether ``content`` (a string, or a list of parts with ``text``) is injected context as
    a whole (``_INJECTED_TEXT``) rather than a prompt the user typed."""
    if isinstance(content, list):
        content = "".join(p.get("text") or "" for p in content if isinstance(p, dict))
    if not isinstance(content, str):
        return False
    if len(content) > _INJECTED_SCAN_CHARS:
        return content.lstrip().startswith("# AGENTS.md instructions")
    return bool(_INJECTED_TEXT.match(content))


def mark_injected(msg: dict) -> dict:
    """``msg`` (a ``make_message`` dict) with ``extra[INJECTED] = True``; returns it."""
    msg.setdefault("extra", {})[INJECTED] = True
    return msg

"""Importers: parse real agent transcript files into Quill's event stream.

Public API::

    detect_format(path) -> "claude-code" | "codex" | "gemini-cli" | "copilot-cli" | "opencode"
                           | "sharegpt" | "openai-chat" | "openhands" | "swe-agent" | "aider"
                           | None
    stream_file(path, problems) -> (format, iterator of events)   # streaming, bounded memory
    parse_file(path) -> ParsedFile(path, format, sessions=[ImportedSession], problems=[Problem])
    iter_transcript_files(paths) -> files as given, folders walked recursively (sorted), no *.md
                                    but aider chat histories

Events (``events.py``): ``SessionStart``, ``Message``, ``Compact``, ``Rewind``; the CLI spools
them as ops (ops/transfer/import_spool.py); ``parse_file`` collects them (tests, small files).

The format is sniffed from the CONTENT, never the extension:

* JSON lines (the first line decodes to one object): detection keys on the records that
  carry the transcript - Claude Code user/assistant records, Codex ``session_meta`` /
  ``response_item`` lines, Gemini CLI log metadata/message lines, Copilot CLI events,
  ShareGPT ``{conversations}``, OpenAI chat messages or
  ``{"messages": [...]}`` - found within the first ``SNIFF_LINES`` lines, whatever
  bookkeeping records (summaries, titles, snapshots, types that do not exist yet) come first;
  the format with most such records wins. A file with none falls back to "most of the first
  records are known types of one format" (e.g. a Claude file holding only a title);
* a top-level JSON array (first byte ``[``, e.g. pretty-printed): every readable element
  must be a Claude Code record, or every one an OpenAI chat message;
* a JSON object document: a Gemini CLI session, an opencode export, or ``{"messages":
  [OpenAI messages]}``;
* a JSON array of OpenHands events, or OpenHands evaluation records (JSON lines or one
  object ``{instance_id, history}``); a SWE-agent ``.traj`` document ``{history, trajectory}``;
* text with an ``# aider chat started at`` header line in its first lines: aider history;
* anything else (other Markdown, other agents' JSON) -> None.

Session and message ids are deterministic, so re-importing a file yields the same ids. A
format with no conversation id of its own gets a content-derived one
(``jsonlines.content_session_id``: file name + hash of the record or of the opening
messages), never one made of the file name or line alone, which same-named files in two
folders would share; the old name-derived id is offered as ``SessionStart.legacy_id``.
Parsing never raises on bad content (problems are reported: "skipped", "repaired",
"ignored"); only an unreadable file (OSError) raises.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from quill.ops.importers import (
    aider,
    claude_code,
    codex,
    copilot,
    gemini,
    gemini_log,
    openai_chat,
    opencode,
    openhands,
    sharegpt,
    swe_agent,
)
from quill.ops.importers.events import Compact, Event, Message, Rewind, SessionStart, Usage, collect
from quill.ops.importers.jsonlines import (
    ImportedSession,
    ParsedFile,
    Problem,
    decode_line,
    iter_json_array,
    iter_jsonl,
    read_text,
)

__all__ = [
    "Problem",
    "ImportedSession",
    "ParsedFile",
    "Usage",
    "detect_format",
    "parse_file",
    "stream_file",
    "iter_transcript_files",
    "FORMATS",
    "Event",
    "SessionStart",
    "Message",
    "Compact",
    "Rewind",
]

FORMATS = (
    "claude-code",
    "codex",
    "gemini-cli",
    "copilot-cli",
    "opencode",
    "sharegpt",
    "openai-chat",
    "openhands",
    "swe-agent",
    "aider",
)
_SAMPLE = 20  # transcript-carrying records that settle detection
#: Non-blank lines read at most while looking for transcript-carrying records: a real Claude
#: Code file had 160 progress records before its 33 messages; bookkeeping runs are short.
SNIFF_LINES = 5000
_NO_DOC = object()


def _first_char(path: Path) -> str:
    with open(path, "rb") as fh:
        while chunk := fh.read(4096):
            text = chunk.decode("utf-8", errors="replace").lstrip(" \t\r\n\ufeff")
            if text:
                return text[0]
    return ""


def _first_line_is_object(path: Path) -> bool:
    """True when the first non-blank line decodes completely to JSON object(s)."""
    with open(path, "rb") as fh:
        for raw in fh:
            text = raw.decode("utf-8", errors="replace")
            if text.strip(" \t\r\n\ufeff"):
                values, _ = decode_line(text)
                return bool(values) and isinstance(values[0], dict)
    return False


def _sample_jsonl(path: Path) -> tuple[list[Any], list[Any]]:
    """``(carriers, head)``: up to _SAMPLE transcript-carrying values within the first
    SNIFF_LINES non-blank lines, and the first _SAMPLE decodable values (fallback)."""
    carriers: list[Any] = []
    head: list[Any] = []
    with open(path, "rb") as fh:
        seen = 0
        for raw in fh:
            text = raw.decode("utf-8", errors="replace")
            if not text.strip():
                continue
            seen += 1
            for value in decode_line(text)[0]:
                if len(head) < _SAMPLE:
                    head.append(value)
                if _carrier_format(value):
                    carriers.append(value)
            if len(carriers) >= _SAMPLE or seen >= SNIFF_LINES:
                break
    return carriers, head


def _carrier_format(value: Any) -> str | None:
    """The format whose transcript a record carries, or None for bookkeeping/unknown."""
    if claude_code.looks_like_transcript(value):
        return claude_code.FORMAT
    if codex.looks_like_transcript(value):
        return codex.FORMAT
    if gemini_log.looks_like_record(value):
        return gemini_log.FORMAT
    if copilot.looks_like_record(value):
        return copilot.FORMAT
    if sharegpt.looks_like_record(value):
        return sharegpt.FORMAT
    if openhands.looks_like_instance(value):
        return openhands.FORMAT
    if openai_chat.looks_like_conversation(value) or openai_chat.looks_like_message(value):
        return openai_chat.FORMAT
    return None


def _best(records: list[dict], tests: list[tuple[str, Any]]) -> str | None:
    """The first format whose test accepts at least 80% of the sampled records."""
    if not records:
        return None
    for fmt, test in tests:
        if sum(1 for r in records if test(r)) >= 0.8 * len(records):
            return fmt
    return None


def _classify_records(carriers: list[Any], head: list[Any]) -> str | None:
    """JSON lines: the format most transcript-carrying records belong to; with none, the
    first format most of the head records are known types of (non-objects ignored)."""
    if carriers:
        votes: dict[str, int] = {}
        for v in carriers:
            fmt = _carrier_format(v)
            votes[fmt] = votes.get(fmt, 0) + 1
        return max(votes, key=lambda f: votes[f])
    return _best(
        [v for v in head if isinstance(v, dict)],
        [
            (claude_code.FORMAT, claude_code.looks_like_record),
            (codex.FORMAT, codex.looks_like_record),
        ],
    )


def _classify_array(values: list[Any]) -> str | None:
    """A top-level JSON array: every readable element must fit."""
    if not values:
        return None
    if all(claude_code.looks_like_record(v) for v in values):
        return claude_code.FORMAT
    if openai_chat.looks_like_message_list(values):
        return openai_chat.FORMAT
    if openhands.looks_like_events(values):
        return openhands.FORMAT
    return None


def _sniff(path: Path) -> tuple[str | None, Any]:
    """-> (format, parsed content): ``_NO_DOC`` for JSON lines, a dict for an
    object document, or ``(elements, problems)`` for a top-level array."""
    first = _first_char(path)
    if first not in ("[", "{"):
        return (aider.FORMAT if aider.looks_like_history(path) else None), _NO_DOC
    if _first_line_is_object(path):
        carriers, head = _sample_jsonl(path)
        if len(head) == 1 and gemini.looks_like_document(head[0]):  # a one-line document
            return gemini.FORMAT, head[0]
        if len(head) == 1 and opencode.looks_like_document(head[0]):
            return opencode.FORMAT, head[0]
        if len(head) == 1 and swe_agent.looks_like_document(head[0]):
            return swe_agent.FORMAT, head[0]
        return _classify_records(carriers, head), _NO_DOC
    if first == "[":
        problems: list[Problem] = []
        elements = list(iter_json_array(read_text(path), path, problems))
        return _classify_array([v for _, v in elements]), (elements, problems)
    try:
        doc = json.loads(read_text(path))
    except (ValueError, RecursionError):
        return _classify_records(*_sample_jsonl(path)), _NO_DOC
    if gemini.looks_like_document(doc):
        return gemini.FORMAT, doc
    if opencode.looks_like_document(doc):
        return opencode.FORMAT, doc
    if swe_agent.looks_like_document(doc):
        return swe_agent.FORMAT, doc
    if openhands.looks_like_instance(doc):
        return openhands.FORMAT, doc
    return (openai_chat.FORMAT if openai_chat.looks_like_conversation(doc) else None), doc


def detect_format(path: Path) -> str | None:
    """The transcript format of ``path`` sniffed from its content, or None."""
    return _sniff(Path(path))[0]


def _sessions_as_events(sessions: list[ImportedSession]) -> Iterator[Event]:
    for s in sessions:
        wanted = set(s.opening)
        yield SessionStart(
            s.session, s.legacy_id, [m for m in s.messages if not wanted or str(m["id"]) in wanted]
        )
        for m in s.messages:
            yield Message(s.session["session_id"], m)


def stream_file(
    path: Path, problems: list[Problem], limit: int | None = None
) -> tuple[str | None, Iterator[Event]]:
    """``(format, events)`` for one file; problems are appended to ``problems`` while the
    events are consumed. Claude Code and Codex JSONL stream (two passes over the file, memory
    bounded by the largest record); other formats are small and parsed whole. ``limit``: the
    bytes of a JSON-lines file that is still growing to read (``iter_jsonl``), so both passes
    see the same records (live capture; a whole document is read in one pass anyway)."""
    path = Path(path)
    fmt, doc = _sniff(path)
    if fmt is None:
        return None, iter(())
    if fmt == aider.FORMAT:
        return fmt, aider.stream(path, problems)
    if isinstance(doc, tuple):  # top-level JSON array
        elements, array_problems = doc
        problems.extend(array_problems)
        if fmt == claude_code.FORMAT:
            return fmt, claude_code.stream(path, lambda _p: elements, problems, "json-array")
        if fmt == openhands.FORMAT:
            return fmt, openhands.stream_events(path, [v for _, v in elements], problems)
        return fmt, _sessions_as_events(
            openai_chat.parse_document(path, [v for _, v in elements], problems)
        )
    if fmt == gemini.FORMAT and doc is not _NO_DOC:  # a whole document (older .json)
        return fmt, gemini.stream(path, doc, problems)
    if fmt == opencode.FORMAT:
        return fmt, opencode.stream(path, doc, problems)
    if fmt == swe_agent.FORMAT:
        return fmt, swe_agent.stream(path, doc, problems)
    if fmt == openhands.FORMAT and doc is not _NO_DOC:
        return fmt, openhands.stream_instances(path, [(None, doc)], problems)
    if doc is not _NO_DOC:
        return fmt, _sessions_as_events(openai_chat.parse_document(path, doc, problems))

    def records(probs: list[Problem], p: Path = path) -> Iterator[tuple[int, Any]]:
        return iter_jsonl(p, probs, limit)

    if fmt == claude_code.FORMAT:
        # live (``limit``): a subagent file grows too; both passes read its size at the start
        sizes = {
            a: (os.stat(a).st_size if limit is not None else None)
            for a in claude_code.subagent_files(path)
        }
        agents = [(a, lambda probs, a=a: iter_jsonl(a, probs, sizes[a])) for a in sizes]
        main = claude_code.session_file_of(path)
        links = (lambda probs, m=main: iter_jsonl(m, probs)) if main else None
        return fmt, claude_code.stream(path, records, problems, "jsonl", agents, links)
    if fmt == codex.FORMAT:
        return fmt, codex.stream(path, records, problems)
    if fmt == gemini_log.FORMAT:
        return fmt, gemini_log.stream(path, problems)
    if fmt == copilot.FORMAT:
        return fmt, copilot.stream(path, problems)
    if fmt == openhands.FORMAT:
        return fmt, openhands.stream_instances(path, iter_jsonl(path, problems), problems)
    if fmt == sharegpt.FORMAT:
        return fmt, _sessions_as_events(
            sharegpt.parse_records(path, iter_jsonl(path, problems), problems)
        )
    return fmt, _sessions_as_events(
        openai_chat.parse_records(path, iter_jsonl(path, problems), problems)
    )


def parse_file(path: Path) -> ParsedFile:
    """Parse one file into sessions held in memory; unsupported formats give
    ``format=None`` and nothing else."""
    result = ParsedFile(path=str(path), format=None, sessions=[], problems=[])
    result.format, events = stream_file(Path(path), result.problems)
    result.sessions = collect(events)
    return result


def iter_transcript_files(
    paths: Iterable[Path], skipped: list[Path] | None = None
) -> Iterator[Path]:
    """Files as given; folders walked recursively in sorted order, skipping ``*.md`` other than
    aider chat histories (the skipped ones appended to ``skipped`` when given, so the caller
    can say so) and subagent files whose session file is there to import them
    (claude_code / gemini_log ``subagent_files``)."""
    for p in paths:
        p = Path(p)
        if not p.is_dir():
            yield p
            continue
        found: list[Path] = []
        for root, dirs, files in os.walk(p):
            dirs.sort()
            md = {f for f in files if f.lower().endswith(".md")}
            md -= {f for f in md if aider.looks_like_history(Path(root) / f)}
            found.extend(Path(root) / f for f in files if f not in md)
            if skipped is not None:
                skipped.extend(sorted(Path(root) / f for f in md))
        yield from (
            f
            for f in sorted(found)
            if claude_code.session_file_of(f) is None and gemini_log.session_file_of(f) is None
        )

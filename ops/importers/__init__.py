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
from quill.ops.importers.source import Source, opened

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
    "Source",
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


def _first_char(src: Source) -> str:
    with src.reader() as fh:
        while chunk := fh.read(4096):
            text = chunk.decode("utf-8", errors="replace").lstrip(" \t\r\n\ufeff")
            if text:
                return text[0]
    return ""


def _first_line_is_object(src: Source) -> bool:
    """True when the first non-blank line decodes completely to JSON object(s)."""
    with src.reader() as fh:
        for raw in fh:
            text = raw.decode("utf-8", errors="replace")
            if text.strip(" \t\r\n\ufeff"):
                values, _ = decode_line(text)
                return bool(values) and isinstance(values[0], dict)
    return False


def _sample_jsonl(src: Source) -> tuple[list[Any], list[Any]]:
    """``(carriers, head)``: up to _SAMPLE transcript-carrying values within the first
    SNIFF_LINES non-blank lines, and the first _SAMPLE decodable values (fallback)."""
    carriers: list[Any] = []
    head: list[Any] = []
    with src.reader() as fh:
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


def _sniff(src: Source) -> tuple[str | None, Any]:
    """-> (format, parsed content): ``_NO_DOC`` for JSON lines, a dict for an
    object document, or ``(elements, problems)`` for a top-level array."""
    first = _first_char(src)
    if first not in ("[", "{"):
        return (aider.FORMAT if aider.looks_like_history(src) else None), _NO_DOC
    if _first_line_is_object(src):
        carriers, head = _sample_jsonl(src)
        if len(head) == 1 and gemini.looks_like_document(head[0]):  # a one-line document
            return gemini.FORMAT, head[0]
        if len(head) == 1 and opencode.looks_like_document(head[0]):
            return opencode.FORMAT, head[0]
        if len(head) == 1 and swe_agent.looks_like_document(head[0]):
            return swe_agent.FORMAT, head[0]
        return _classify_records(carriers, head), _NO_DOC
    if first == "[":
        problems: list[Problem] = []
        elements = list(iter_json_array(read_text(src), src.path, problems))
        return _classify_array([v for _, v in elements]), (elements, problems)
    try:
        doc = json.loads(read_text(src))
    except (ValueError, RecursionError):
        return _classify_records(*_sample_jsonl(src)), _NO_DOC
    if gemini.looks_like_document(doc):
        return gemini.FORMAT, doc
    if opencode.looks_like_document(doc):
        return opencode.FORMAT, doc
    if swe_agent.looks_like_document(doc):
        return swe_agent.FORMAT, doc
    if openhands.looks_like_instance(doc):
        return openhands.FORMAT, doc
    return (openai_chat.FORMAT if openai_chat.looks_like_conversation(doc) else None), doc


def detect_format(path: Path | Source) -> str | None:
    """The transcript format of ``path`` sniffed from its content, or None. Raises
    ``OSError``."""
    with opened(path) as src:
        return _sniff(src)[0]


def _sessions_as_events(sessions: list[ImportedSession]) -> Iterator[Event]:
    for s in sessions:
        wanted = set(s.opening)
        yield SessionStart(
            s.session, s.legacy_id, [m for m in s.messages if not wanted or str(m["id"]) in wanted]
        )
        for m in s.messages:
            yield Message(s.session["session_id"], m)


def stream_file(path: Path | Source, problems: list[Problem]) -> tuple[str | None, Iterator[Event]]:
    """``(format, events)`` for one file; problems are appended to ``problems`` while the
    events are consumed. ``path``: a ``Source`` (one version of the file, opened by the
    caller, who closes it after the events) or a path, opened here once and closed when the
    events are exhausted or dropped. Every read, from sniffing to the last pass, comes from
    that one descriptor up to its size (``source.py``), so a file replaced or grown meanwhile
    is never read as a mix of versions. Claude Code and Codex JSONL stream (two passes,
    memory bounded by the largest record); other formats are small and parsed whole. Raises
    ``OSError`` when the file cannot be opened."""
    if isinstance(path, Source):
        return _stream(path, problems)
    src = Source.open(path)
    try:
        fmt, events = _stream(src, problems)
    except BaseException:
        src.close()
        raise
    if fmt is None:
        src.close()
        return None, events
    return fmt, _closing(events, src)


def _closing(events: Iterator[Event], src: Source) -> Iterator[Event]:
    try:
        yield from events
    finally:
        src.close()


def _stream(src: Source, problems: list[Problem]) -> tuple[str | None, Iterator[Event]]:
    path = src.path
    fmt, doc = _sniff(src)
    if fmt is None:
        return None, iter(())
    if fmt == aider.FORMAT:
        return fmt, aider.stream(src, problems)
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

    def records(probs: list[Problem]) -> Iterator[tuple[int, Any]]:
        return iter_jsonl(src, probs)

    if fmt == claude_code.FORMAT:
        agents = []
        for a in claude_code.subagent_files(path):
            try:
                agent = src.sibling(a)
            except FileNotFoundError:
                continue  # deleted since the folder was listed
            agents.append((a, lambda probs, s=agent: iter_jsonl(s, probs)))
        main = claude_code.session_file_of(path)
        links = (lambda probs, m=src.sibling(main): iter_jsonl(m, probs)) if main else None
        return fmt, claude_code.stream(path, records, problems, "jsonl", agents, links)
    if fmt == codex.FORMAT:
        return fmt, codex.stream(path, records, problems)
    if fmt == gemini_log.FORMAT:
        return fmt, gemini_log.stream(src, problems)
    if fmt == copilot.FORMAT:
        return fmt, copilot.stream(src, problems)
    if fmt == openhands.FORMAT:
        return fmt, openhands.stream_instances(path, iter_jsonl(src, problems), problems)
    if fmt == sharegpt.FORMAT:
        return fmt, _sessions_as_events(
            sharegpt.parse_records(path, iter_jsonl(src, problems), problems)
        )
    return fmt, _sessions_as_events(
        openai_chat.parse_records(path, iter_jsonl(src, problems), problems)
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

"""Importers: parse real agent transcript files into Quill's message shape.

Public API::

    detect_format(path) -> "claude-code" | "codex" | "sharegpt" | "openai-chat" | None
    parse_file(path) -> ParsedFile(path, format, sessions=[ImportedSession], problems=[Problem])
    iter_transcript_files(paths) -> files as given, folders walked recursively (sorted), no *.md

The format is sniffed from the CONTENT, never the extension:

* JSON lines (the first line decodes to one object): the first 20 records
  decide - Claude Code records, Codex ``{type, payload}`` rollout lines,
  ShareGPT ``{conversations}`` trajectories, or OpenAI chat (one message per
  line, or ``{"messages": [...]}`` per line); at least 80% of the sampled
  objects must fit (so one damaged line near the top does not hide a file);
* a top-level JSON array (first byte ``[``, e.g. pretty-printed): every
  readable element must be a Claude Code record, or every one an OpenAI chat
  message (elements are read tolerantly, see ``jsonlines.iter_json_array``);
* a JSON object document: only ``{"messages": [OpenAI messages]}``;
* anything else (Markdown, other agents' JSON) -> None.

Each ``ImportedSession.session`` is a ``session.create`` payload
``{session_id, source, title, model, cwd, started_at, meta}``; each message is
an OpenAI-chat-shaped dict ``{id, role, content, tool_calls?, tool_call_id?,
name?, reasoning?, timestamp?, extra?}`` (see the per-format modules). Session
and message ids are deterministic, so re-importing a file yields the same ids.

Parsing never raises on bad content (problems are reported in
``ParsedFile.problems``); only an unreadable file (OSError) raises.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable, Iterator

from . import claude_code, codex, openai_chat, sharegpt
from .jsonlines import (ImportedSession, ParsedFile, Problem, decode_line, iter_json_array, iter_jsonl,
                         read_text)

__all__ = ["Problem", "ImportedSession", "ParsedFile", "detect_format", "parse_file",
           "iter_transcript_files", "FORMATS"]

FORMATS = ("claude-code", "codex", "sharegpt", "openai-chat")
_SAMPLE = 20  # JSONL records looked at when sniffing
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


def _sample_jsonl(path: Path) -> list[Any]:
    """Up to _SAMPLE decodable values from the first non-blank lines."""
    values: list[Any] = []
    with open(path, "rb") as fh:
        seen = 0
        for raw in fh:
            text = raw.decode("utf-8", errors="replace")
            if not text.strip():
                continue
            seen += 1
            values.extend(decode_line(text)[0])
            if len(values) >= _SAMPLE or seen >= 2 * _SAMPLE:
                break
    return values[:_SAMPLE]


def _best(records: list[dict], tests: list[tuple[str, Any]]) -> str | None:
    """The first format whose test accepts at least 80% of the sampled records."""
    if not records:
        return None
    for fmt, test in tests:
        if sum(1 for r in records if test(r)) >= 0.8 * len(records):
            return fmt
    return None


def _classify_records(values: list[Any]) -> str | None:
    """JSON lines: non-object values (damaged lines) are ignored."""
    return _best([v for v in values if isinstance(v, dict)], [
        (claude_code.FORMAT, claude_code.looks_like_record),
        (codex.FORMAT, codex.looks_like_record),
        (sharegpt.FORMAT, sharegpt.looks_like_record),
        (openai_chat.FORMAT, openai_chat.looks_like_conversation),
        (openai_chat.FORMAT, openai_chat.looks_like_message)])


def _classify_array(values: list[Any]) -> str | None:
    """A top-level JSON array: every readable element must fit."""
    if not values:
        return None
    if all(claude_code.looks_like_record(v) for v in values):
        return claude_code.FORMAT
    if openai_chat.looks_like_message_list(values):
        return openai_chat.FORMAT
    return None


def _sniff(path: Path) -> tuple[str | None, Any]:
    """-> (format, parsed content): ``_NO_DOC`` for JSON lines, a dict for an
    object document, or ``(elements, problems)`` for a top-level array."""
    first = _first_char(path)
    if first not in ("[", "{"):
        return None, _NO_DOC
    if _first_line_is_object(path):
        return _classify_records(_sample_jsonl(path)), _NO_DOC
    if first == "[":
        problems: list[Problem] = []
        elements = list(iter_json_array(read_text(path), path, problems))
        return _classify_array([v for _, v in elements]), (elements, problems)
    try:
        doc = json.loads(read_text(path))
    except (ValueError, RecursionError):
        return _classify_records(_sample_jsonl(path)), _NO_DOC
    return (openai_chat.FORMAT if openai_chat.looks_like_conversation(doc) else None), doc


def detect_format(path: Path) -> str | None:
    """The transcript format of ``path`` sniffed from its content, or None."""
    return _sniff(Path(path))[0]


def parse_file(path: Path) -> ParsedFile:
    """Parse one file; unsupported formats give ``format=None`` and nothing else."""
    path = Path(path)
    fmt, doc = _sniff(path)
    result = ParsedFile(path=str(path), format=fmt, sessions=[], problems=[])
    if fmt is None:
        return result
    problems = result.problems
    if isinstance(doc, tuple):  # top-level JSON array
        elements, array_problems = doc
        problems.extend(array_problems)
        if fmt == claude_code.FORMAT:
            result.sessions = claude_code.parse_records(path, elements, problems, "json-array")
        else:
            result.sessions = openai_chat.parse_document(path, [v for _, v in elements], problems)
        return result
    if doc is not _NO_DOC:
        result.sessions = openai_chat.parse_document(path, doc, problems)
        return result
    records = iter_jsonl(path, problems)
    if fmt == claude_code.FORMAT:
        result.sessions = claude_code.parse_records(path, records, problems, "jsonl")
    elif fmt == codex.FORMAT:
        result.sessions = codex.parse_records(path, records, problems)
    elif fmt == sharegpt.FORMAT:
        result.sessions = sharegpt.parse_records(path, records, problems)
    else:
        result.sessions = openai_chat.parse_records(path, records, problems)
    return result


def iter_transcript_files(paths: Iterable[Path]) -> Iterator[Path]:
    """Files as given; folders walked recursively in sorted order, skipping ``*.md``."""
    for p in paths:
        p = Path(p)
        if not p.is_dir():
            yield p
            continue
        found: list[Path] = []
        for root, dirs, files in os.walk(p):
            dirs.sort()
            found.extend(Path(root) / f for f in files if not f.lower().endswith(".md"))
        yield from sorted(found)

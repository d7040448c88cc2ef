"""Aider chat history (``.aider.chat.history.md``) -> one Quill session per aider run.

The file is Markdown appended forever by aider's ``InputOutput`` (aider/io.py), one write per
event, and is read here line by line against that writer's rules rather than with a Markdown
parser: the writer is line-oriented and a parser would re-shape exactly what we need verbatim
(it joins ``>`` lines into paragraphs, turns ``####`` lines into headings and drops the
two-space line breaks). The writer's rules:

* ``\\n# aider chat started at YYYY-MM-DD HH:MM:SS\\n\\n`` starts a run (local time of the
  writing machine, no zone) -> a new session, ``started_at`` read as UTC;
* ``user_input``: ``\\n#### line1  \\n#### line2  \\n`` (every input line prefixed ``#### ``,
  ``####   `` for an empty one) -> one ``user`` message per block;
* ``tool_output``/``tool_error``/``tool_warning``/confirmations: ``> text  \\n`` (``>  `` for an
  empty line). A multi-line ``tool_output`` only prefixes its first line, so lines that
  follow a ``>`` line with no blank line between belong to it (Markdown's lazy
  continuation) -> one ``tool`` message named ``aider`` per block (no call: aider's own
  output - commands run, lint results, "Applied edit to ...", token reports);
* ``ai_output``: ``\\n<reply>\\n\\n`` -> everything else is an ``assistant`` message; lines in a
  fenced block of a reply (```` ``` ```` or ``<source>``) stay in the reply even when they
  start with ``#### `` or ``> `` (SEARCH/REPLACE edit blocks) - except after a blank line:
  a reply cut off by ^C leaves its fence open, and aider's next write (input, output) always
  follows the blank line ``ai_output`` ends with, so there the fence is taken as closed.

Usage: ``> Tokens: 5,244 sent, 604 received. Cost: ...`` reports one model call ->
``usage.record`` (``prompt_tokens``/``completion_tokens``; ``response_id`` =
``<session>:<message id>:<line in the message>``, as one output block can report several
calls; ``ts`` = the run's start, the only time the file has). Not recorded, and counted in
``meta.usage_not_recorded``, never guessed: reports with rounded counts (``2.3k``) or with
cache figures (whose meaning changed between aider versions), and 0 sent / 0 received (a
failed call: nothing to record).
The session's model is the first ``Model: <name>`` / ``Main model: <name>`` line.
Session id: ``aider:<file>:<hash of the header line and the first line after it>``; text
before the first header (if any) is a session of its own. Message id = its index in the run.
Limits: a reply's own ``> `` quote or ``#### `` heading outside a fence is read as aider
output or user input (the writer does not escape them).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from quill.ops.importers.events import Event, Message, SessionStart, Usage
from quill.ops.importers.jsonlines import (
    Problem,
    content_session_id,
    make_message,
    parse_timestamp,
)
from quill.ops.importers.source import Source, opened

FORMAT = "aider"
HEADER = re.compile(r"^# aider chat started at (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\s*$")
# aider marks a model with prompt caching on by a "⚡" after its name: not part of the id
MODEL = re.compile(r"^(?:Main )?[Mm]odels?: (\S+?)⚡?(?:\s|$)")
TOKENS = re.compile(r"^Tokens: (.*?\breceived)\b")
SNIFF_LINES = 5000
_FENCE_OPEN = ("```", "<source")
_FENCE_CLOSE = ("```", "</source")


def looks_like_history(path: Path | Source) -> bool:
    """True when one of the first ``SNIFF_LINES`` lines is an aider session header."""
    with opened(path) as src, src.reader() as fh:
        for n, raw in enumerate(fh):
            if n >= SNIFF_LINES:
                return False
            if HEADER.match(raw.decode("utf-8", errors="replace").rstrip("\r\n")):
                return True
    return False


def _count(text: str) -> int | None:
    """``5,244`` -> 5244; a rounded ``2.3k``/``12k`` or anything else -> None."""
    text = text.strip()
    return int(text.replace(",", "")) if re.fullmatch(r"\d{1,3}(,\d{3})*|\d+", text) else None


def token_report(line: str) -> dict | None:
    """``Tokens: N sent, N received...`` -> ``{"prompt_tokens", "completion_tokens"}``, or
    None when the line is no such report or its counts are rounded or carry cache figures."""
    m = TOKENS.match(line)
    if not m:
        return None
    parts = {}
    for piece in m.group(1).split(", "):
        num, _, label = piece.strip().partition(" ")
        parts[label] = _count(num)
    if set(parts) != {"sent", "received"} or None in parts.values():
        return None
    return {"prompt_tokens": parts["sent"], "completion_tokens": parts["received"]}


class _Run:
    """One aider run: its header and its messages as blocks of lines."""

    def __init__(self, header: str | None, started: str | None):
        self.header, self.started = header, started
        self.first_line: str | None = None
        self.blocks: list[tuple[str, list[str]]] = []

    def add(self, kind: str, lines: list[str]) -> None:
        while lines and not lines[-1].strip():
            lines.pop()
        while lines and not lines[0].strip() and kind == "assistant":
            lines.pop(0)
        if lines:
            self.blocks.append((kind, lines))


def _runs(src: Source) -> Iterator[_Run]:
    """The runs of the file in order, each complete (a run is small: one aider session)."""
    run = _Run(None, None)
    kind: str | None = None
    buf: list[str] = []
    fenced = prev_blank = False

    def flush() -> None:
        nonlocal kind, buf
        if kind is not None:
            run.add(kind, buf)
        kind, buf = None, []

    with src.reader() as fh:
        for raw in fh:
            line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            blank = not line.strip()
            header = HEADER.match(line)
            if header:
                flush()
                if run.blocks or run.header is not None:
                    yield run
                run, fenced, prev_blank = _Run(line, header.group(1)), False, True
                continue
            if run.first_line is None and not blank:
                run.first_line = line
            marked = line.startswith(("#### ", "> ")) or line.rstrip() in ("####", ">")
            if kind == "assistant" and fenced and not (prev_blank and marked):
                buf.append(line)
                fenced = not line.lstrip().startswith(_FENCE_CLOSE)
            elif line.startswith("#### ") or line.rstrip() == "####":
                if kind != "user":
                    flush()
                    kind = "user"
                buf.append(line[5:].removesuffix("  "))
            elif line.startswith("> ") or line.rstrip() == ">":
                if kind != "tool":
                    flush()
                    kind = "tool"
                buf.append(line[2:].removesuffix("  "))
            elif blank:
                if kind == "assistant":
                    buf.append(line)
                else:
                    flush()
            elif kind in ("tool", "user") and not prev_blank:
                buf.append(line.removesuffix("  "))  # lazy continuation of the block
            else:
                if kind != "assistant":
                    flush()
                    kind = "assistant"
                buf.append(line)
                fenced = line.lstrip().startswith(_FENCE_OPEN)
            prev_blank = blank
    flush()
    if run.blocks or run.header is not None:
        yield run


def stream(path: Path | Source, problems: list[Problem]) -> Iterator[Event]:
    """Events of one aider chat history file: a session per run."""
    with opened(path) as src:
        yield from _stream(src, problems)


def _stream(src: Source, problems: list[Problem]) -> Iterator[Event]:
    path = src.path
    name = path.name
    for run in _runs(src):
        sid = content_session_id(FORMAT, name, [run.header or "", run.first_line or ""])
        started = parse_timestamp(run.started.replace(" ", "T")) if run.started else None
        model = None
        messages: list[dict] = []
        usage: list[dict] = []
        not_recorded = 0
        counts = {"user": 0, "assistant": 0, "tool": 0}
        for n, (kind, lines) in enumerate(run.blocks):
            mid = str(n)
            counts[kind] += 1
            if kind == "tool":
                for k, ln in enumerate(lines):
                    mm = MODEL.match(ln)
                    if mm and model is None:
                        model = mm.group(1)
                    if TOKENS.match(ln):
                        report = token_report(ln)
                        if report is None or not any(report.values()):
                            not_recorded += 1
                            continue
                        usage.append(
                            {
                                "usage": report,
                                "task": "turn",
                                "source": FORMAT,
                                "ts": started,
                                "response_id": f"{sid}:{mid}:{k}",
                            }
                        )
            # aider writes no time per message, only the run's start: every message of the
            # run happened at or after it, and the import's own time would date a
            # months-old run as today's (newest in every listing).
            messages.append(
                make_message(
                    mid,
                    kind,
                    "\n".join(lines),
                    name="aider" if kind == "tool" else None,
                    timestamp=started,
                )
            )
        meta: dict[str, Any] = {
            "source_file": name,
            "block_counts": counts,
            "started_local": run.started,
        }
        if not_recorded:
            meta["usage_not_recorded"] = not_recorded
        yield SessionStart(
            {
                "session_id": sid,
                "source": FORMAT,
                "title": None,
                "model": model,
                "cwd": None,
                "started_at": started,
                "meta": {k: v for k, v in meta.items() if v is not None},
            }
        )
        for m in messages:
            yield Message(sid, m)
        for u in usage:
            yield Usage(sid, {**u, "model": model})

"""Gemini CLI ``session-*.jsonl`` line logs -> Quill sessions (rewinds kept for audit).

Since April 2026 Gemini CLI appends to ``~/.gemini/tmp/<project hash>/chats/
session-<YYYY-MM-DDTHH-MM>-<first 8 of the id>.jsonl`` (writer and reader:
google-gemini/gemini-cli ``packages/core/src/services/chatRecordingService.ts``). Lines:

* a metadata line ``{sessionId, projectHash, startTime, lastUpdated, kind?, directories?,
  summary?}`` (``kind``: ``main`` | ``subagent``);
* message records ``{id, timestamp, type, content, ...}`` (the entry shape of the older
  ``.json`` documents, mapped by ``gemini._entry``). A message is appended again WHOLE each
  time its tool calls, results or tokens change: the last copy of an id wins and keeps the
  place of the first;
* ``{"$set": {...}}`` metadata updates (``lastUpdated``, ``summary``, ``directories``,
  ``memoryScratchpad``); one holding ``messages`` is a checkpoint that replaces every
  message (the CLI rewrites its history: an aborted turn rolled back, or a compressed one);
* ``{"$rewindTo": id}``: that message and every one after it are taken back (an id the log
  does not hold takes back everything, as the CLI's reader does).

Quill keeps what was taken back: those messages are appended with their last copy, then
named in a ``Rewind`` (rows ``rewound``: audit only). A checkpoint that only drops messages
is a rollback (``Rewind`` of the dropped ones); one that drops messages and brings new ones
(a compression summary) is a ``Compact`` whose set is the checkpoint, kept messages copied
under ``<id>#<n>``. Subagents are separate logs ``chats/<parent session id>/<id>.jsonl``
(``kind: subagent``): ``delegate`` children of ``gemini-cli:<parent session id>``, linked to
the parent's tool call whose ``agentId`` is theirs. Importing the session log imports them;
a folder walk does not import them twice (``session_file_of``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quill.ops.importers import gemini
from quill.ops.importers.events import Compact, Event, Message, Rewind, SessionStart
from quill.ops.importers.jsonlines import (
    Problem,
    iter_jsonl,
    name_in_id,
    parse_timestamp,
    shape_problem,
)
from quill.ops.importers.source import Source, opened

FORMAT = gemini.FORMAT
ENTRY_TYPES = ("user", "gemini", "info", "error", "warning")
_META_KEYS = ("projectHash", "startTime", "lastUpdated", "kind", "directories")


def looks_like_record(obj: Any) -> bool:
    """True for a line that carries a Gemini CLI log: its metadata line (``sessionId`` and
    ``projectHash``, no ``type``) or a ``user``/``gemini`` message record (``id``, ``type``,
    ``content``, none of Claude Code's ``message``/``uuid``)."""
    if not isinstance(obj, dict):
        return False
    if isinstance(obj.get("sessionId"), str) and isinstance(obj.get("projectHash"), str):
        return "type" not in obj and "message" not in obj
    return (
        isinstance(obj.get("id"), str)
        and obj.get("type") in gemini.MESSAGE_TYPES
        and "content" in obj
        and "message" not in obj
        and "uuid" not in obj
    )


def _first_record(path: Path | Source) -> dict | None:
    for _, value in iter_jsonl(path, []):
        return value if isinstance(value, dict) else None
    return None


def _session_of(path: Path | Source) -> str | None:
    first = _first_record(path)
    sid = first.get("sessionId") if first else None
    return sid if isinstance(sid, str) and sid else None


def subagent_files(path: Path | Source) -> list[Path]:
    """Subagent logs Gemini CLI wrote for the session log ``path``: ``<dir>/<its session
    id>/*.jsonl``, sorted."""
    sid = _session_of(path)
    folder = _path(path).parent / sid if sid and "/" not in sid and sid not in (".", "..") else None
    return sorted(folder.glob("*.jsonl")) if folder is not None and folder.is_dir() else []


def session_file_of(path: Path, src: Source | None = None) -> Path | None:
    """For ``chats/<parent id>/<id>.jsonl``: the parent's ``chats/session-*.jsonl`` log when
    it is there (its first line names ``<parent id>``), else None. ``src``: the import's
    source, through which each candidate is opened once (``Source.sibling``)."""
    path = Path(path)
    if path.suffix != ".jsonl" or path.name.startswith("session-"):
        return None
    parent_id = path.parent.name
    for cand in sorted(path.parent.parent.glob(f"session-*-{parent_id[:8]}.jsonl")):
        try:
            if _session_of(src.sibling(cand) if src is not None else cand) == parent_id:
                return cand
        except FileNotFoundError:
            continue  # gone since the folder was listed
    return None


@dataclass
class _Slot:
    """One message as Quill stores it: ``rec`` is its last copy while it is live."""

    qid: str
    rec: dict
    line: int | None


class _Log:
    """Replays a log (the CLI's own reading rules) into an ordered list of steps:
    ``("msg", slot)``, ``("rewind", [slot])``, ``("compact", [slot], tail_count)``."""

    def __init__(self) -> None:
        self.meta: dict[str, Any] = {}
        self.live: dict[str, _Slot] = {}  # source id -> slot, in conversation order
        self.steps: list[tuple] = []
        self.copies: dict[str, int] = {}  # source id -> incarnations so far
        self.counts: dict[str, int] = {}

    def count(self, kind: str) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1

    def _new(self, rec: dict, line: int | None) -> _Slot:
        src = rec["id"]
        n = self.copies[src] = self.copies.get(src, 0) + 1
        slot = _Slot(src if n == 1 else f"{src}#{n}", rec, line)
        self.live[src] = slot
        return slot

    def message(self, rec: dict, line: int | None, copy_kind: str = "message_copies") -> None:
        if rec["id"] in self.live:
            self.count(copy_kind)
            self.live[rec["id"]].rec = rec  # last copy wins, first place kept
            return
        self.steps.append(("msg", self._new(rec, line)))

    def rewind(self, target: Any) -> None:
        ids = list(self.live)
        cut = ids.index(target) if target in self.live else 0
        gone = [self.live.pop(i) for i in ids[cut:]]
        if gone:
            self.steps.append(("rewind", gone))

    def checkpoint(self, entries: list, line: int | None) -> None:
        recs = [m for m in entries if isinstance(m, dict) and isinstance(m.get("id"), str)]
        wanted = {m["id"] for m in recs}
        dropped = [s for i, s in self.live.items() if i not in wanted]
        fresh = [m for m in recs if m["id"] not in self.live]
        if dropped and fresh:  # history rewritten with new turns: a compression
            tail = 0  # trailing checkpoint entries that are copies of live messages
            for m in reversed(recs):
                if m["id"] not in self.live:
                    break
                tail += 1
            self.live = {}
            self.steps.append(("compact", [self._new(m, line) for m in recs], tail))
            return
        if dropped:  # a rollback: the dropped turns are taken back
            for s in dropped:
                del self.live[s.rec["id"]]
            self.steps.append(("rewind", dropped))
        for m in recs:
            self.message(m, line, "checkpoint_copies")


def _path(src: Path | Source) -> Path:
    return src.path if isinstance(src, Source) else Path(src)


def _replay(src: Path | Source, problems: list[Problem]) -> _Log:
    log, path = _Log(), _path(src)
    for line, rec in iter_jsonl(src, problems):
        if not isinstance(rec, dict):
            problems.append(Problem(str(path), line, "skipped", "not a JSON object"))
        elif isinstance(rec.get("$rewindTo"), str):  # the CLI's isRewindRecord
            log.count("rewind")
            log.rewind(rec["$rewindTo"])
        elif "$set" in rec:
            log.count("set")
            update = rec["$set"] if isinstance(rec["$set"], dict) else {}
            if isinstance(update.get("messages"), list):
                log.count("checkpoint")
                log.checkpoint(update["messages"], line)
            log.meta.update((k, v) for k, v in update.items() if k != "messages")
        elif isinstance(rec.get("id"), str) and isinstance(rec.get("type"), str):
            log.count(f"entry:{rec['type']}")
            log.message(rec, line)
        elif isinstance(rec.get("sessionId"), str):
            log.count("metadata")
            log.meta.update((k, v) for k, v in rec.items() if k != "messages")
            if isinstance(rec.get("messages"), list):  # a whole legacy record on one line
                log.checkpoint(rec["messages"], line)
        else:
            log.count("unknown")
            keys = ",".join(sorted(rec)[:5])
            problems.append(Problem(str(path), line, "ignored", f"unknown record ({keys})"))
    return log


def _messages(path: Path, sid: str, slot: _Slot, problems: list[Problem]) -> list[dict]:
    if slot.rec.get("type") not in gemini.MESSAGE_TYPES:
        return []  # info/error/warning: CLI notices, counted only
    try:
        out = gemini._entry(sid, 0, slot.rec, slot.qid)
    except (TypeError, AttributeError, ValueError) as exc:
        problems.append(Problem(str(path), slot.line, "skipped", shape_problem(exc)))
        return []
    return out


def _session(src: Source, log: _Log, parent: tuple[str, dict[str, str]] | None) -> dict:
    path = src.path
    meta: dict[str, Any] = {"source_file": Path(path).name, "record_counts": dict(log.counts)}
    meta.update((k, log.meta[k]) for k in _META_KEYS if log.meta.get(k) is not None)
    sid = f"{FORMAT}:{log.meta['sessionId']}"
    recs = [s.rec for step in log.steps if step[0] != "rewind" for s in _slots(step)]
    model = next(
        (r["model"] for r in recs if r.get("type") == "gemini" and isinstance(r.get("model"), str)),
        None,
    )
    summary = log.meta.get("summary")
    session = {
        "session_id": sid,
        "source": FORMAT,
        "title": summary if isinstance(summary, str) and summary else None,
        "model": model,
        "cwd": None,
        "started_at": parse_timestamp(log.meta.get("startTime")),
        "meta": meta,
    }
    parent_id = Path(path).parent.name if log.meta.get("kind") == "subagent" else None
    if parent is not None or parent_id:
        session["parent_id"] = parent[0] if parent else f"{FORMAT}:{name_in_id(parent_id)}"
        session["parent_kind"] = "delegate"
        main = None if parent else session_file_of(path, src)
        calls = parent[1] if parent else _agent_calls(src.sibling(main) if main else None)
        call = calls.get(log.meta["sessionId"])
        if call:
            meta["parent_tool_call_id"] = call
    return session


def _slots(step: tuple) -> list[_Slot]:
    return [step[1]] if step[0] == "msg" else step[1]


def _agent_calls(path: Source | None) -> dict[str, str]:
    """Subagent session id -> the id of the parent's tool call that ran it (``agentId``)."""
    if path is None:
        return {}
    log = _replay(path, [])
    return _calls_of(log)


def _calls_of(log: _Log) -> dict[str, str]:
    out: dict[str, str] = {}
    for step in log.steps:
        for slot in _slots(step):
            for call in slot.rec.get("toolCalls") or []:
                if isinstance(call, dict) and isinstance(call.get("agentId"), str):
                    out.setdefault(call["agentId"], str(call.get("id")))
    return out


def _events(
    src: Source, log: _Log, problems: list[Problem], parent: tuple[str, dict] | None = None
) -> Iterator[Event]:
    path = src.path
    if not isinstance(log.meta.get("sessionId"), str) or not log.meta["sessionId"]:
        problems.append(Problem(str(path), None, "skipped", "no metadata line with a sessionId"))
        return
    session = _session(src, log, parent)
    sid = session["session_id"]
    yield SessionStart(session)
    for step in log.steps:
        if step[0] == "msg":
            slot = step[1]
            for m in _messages(path, sid, slot, problems):
                yield Message(sid, m)
            yield from gemini.call_usage(
                path, sid, slot.rec, slot.rec["id"], problems, f"message {slot.qid}"
            )
        elif step[0] == "rewind":
            ids = [m["id"] for s in step[1] for m in _messages(path, sid, s, [])]
            if ids:
                yield Rewind(sid, ids)
        else:
            msgs = [m for s in step[1] for m in _messages(path, sid, s, problems)]
            if msgs:
                yield Compact(sid, msgs, step[2], info={"line": step[1][0].line})


def stream(path: Path | Source, problems: list[Problem]) -> Iterator[Event]:
    """Events of one Gemini CLI log and of the subagent logs next to it (``subagent_files``).
    Logs are small (the CLI itself reads them whole), so each is replayed in memory; each
    file is read from one descriptor (``path``: a ``Source``, or a path opened once)."""
    with opened(path) as src:
        log = _replay(src, problems)
        yield from _events(src, log, problems)
        sid = log.meta.get("sessionId")
        if not isinstance(sid, str):
            return
        calls = _calls_of(log)
        for child in subagent_files(src):
            try:
                c = src.sibling(child)
            except FileNotFoundError:
                continue  # deleted since the folder was listed
            yield from _events(c, _replay(c, problems), problems, (f"{FORMAT}:{sid}", calls))

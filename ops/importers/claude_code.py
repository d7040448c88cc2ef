"""Claude Code session records -> Quill sessions, streamed (two passes, bounded memory).

Input: a Claude Code session JSONL file (plus, for newer versions, the subagent transcripts
Claude Code writes next to it as ``<session>/subagents/agent-*.jsonl``), or the same
records as a JSON array (the "logs/chat.json" Stop-hook dump). Pass 1 (``claude_scan``)
learns the tree, threads, titles and links; pass 2 re-reads the records and emits events
(``events.py``). Mapping (docs/importers.md):

* one message per ``user``/``assistant`` record, in file order (records that share
  ``message.id`` are NOT merged); message id = record ``uuid`` (block rules: claude_blocks);
* sidechain records (``isSidechain``) go to ``delegate`` child sessions
  ``claude-code:<sessionId>:agent:<agentId or root uuid>`` whose ``parent_id`` is the main
  session and ``meta.parent_tool_call_id`` the Task call that started them;
* records off the active path (see claude_scan) are emitted ``rewound``;
* an ``isCompactSummary`` record on the active path is a compaction: its message becomes the
  compacted set (what the model was fed from then on);
* messages carried by bookkeeping records (``claude_carried``): a ``queued_command``
  attachment (a prompt typed while the agent worked) is a ``user`` message; a subagent run
  carried only by ``agent_progress`` records is a delegate child like any other run;
* ``system``, ``progress``, ``file-history-snapshot``, ``queue-operation`` and other known
  bookkeeping records are not messages (counted in ``meta.record_counts``); unknown record
  types are ignored and counted (``meta.ignored_record_types``, one "ignored" problem each);
* titles: ``custom-title`` > ``ai-title`` > ``summary`` records.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from quill.ops.importers import claude_blocks
from quill.ops.importers.claude_carried import expand
from quill.ops.importers.claude_scan import (
    KNOWN_TYPES,
    MAIN,
    Structure,
    Thread,
    parent_call,
    scan,
    summaries_of,
    thread_key,
    title_for,
)
from quill.ops.importers.events import Compact, Event, Message, SessionStart
from quill.ops.importers.jsonlines import (
    Problem,
    content_session_id,
    parse_timestamp,
    shape_problem,
)

FORMAT = "claude-code"
#: Types that carry the transcript: detection looks for these (see ``looks_like_transcript``).
MESSAGE_TYPES = ("user", "assistant")
RECORD_TYPES = KNOWN_TYPES
# top-level record keys that are not copied verbatim into message["extra"]
_HANDLED = frozenset({"type", "message", "sessionId", "timestamp", "cwd", "gitBranch", "version"})

Records = Callable[[list[Problem]], Iterable[tuple[int | None, Any]]]


def looks_like_record(obj: Any) -> bool:
    """True for a dict that is plausibly a Claude Code record of a known type."""
    if (
        not isinstance(obj, dict)
        or not isinstance(obj.get("type"), str)
        or obj["type"] not in KNOWN_TYPES
    ):
        return False
    if obj["type"] == "summary":
        return "summary" in obj and "leafUuid" in obj
    if obj["type"] in MESSAGE_TYPES:
        return looks_like_transcript(obj)
    return any(
        k in obj for k in ("sessionId", "uuid", "messageId", "customTitle", "aiTitle", "leafUuid")
    )


def looks_like_transcript(obj: Any) -> bool:
    """True for a record that carries the transcript: a user/assistant record with a
    ``message`` object and a ``uuid`` or ``sessionId`` (what detection keys on)."""
    return (
        isinstance(obj, dict)
        and obj.get("type") in MESSAGE_TYPES
        and isinstance(obj.get("message"), dict)
        and ("uuid" in obj or "sessionId" in obj)
    )


def subagent_files(path: Path) -> list[Path]:
    """Subagent transcripts Claude Code wrote next to a session file, sorted."""
    folder = Path(path).with_suffix("") / "subagents"
    return sorted(folder.glob("agent-*.jsonl")) if folder.is_dir() else []


def session_file_of(path: Path) -> Path | None:
    """For ``<x>/subagents/agent-*.jsonl``: the session file ``<x>.jsonl`` if it exists."""
    path = Path(path)
    if path.parent.name != "subagents" or not path.name.startswith("agent-"):
        return None
    main = path.parent.parent.with_name(path.parent.parent.name + ".jsonl")
    return main if main.is_file() else None


class Emitter:
    """Per-thread state of pass 2: dedupe of re-written records, tool names, first values."""

    def __init__(self, thread: Thread, session_id: str) -> None:
        self.thread, self.session_id = thread, session_id
        self.first = thread.first
        self.tool_names: dict[str, str] = {}
        self.seen: dict[str, list[str]] = {}

    def dedupe(
        self, mid: str, msg: dict, path: Path, line: int | None, problems: list[Problem]
    ) -> str | None:
        """Resumed sessions re-write records under the same uuid: drop exact repeats."""
        digest = hashlib.sha1(
            json.dumps([msg.get("role"), msg.get("content")], sort_keys=True, default=str).encode(
                "utf-8", "replace"
            )
        ).hexdigest()
        if mid not in self.seen:
            self.seen[mid] = [digest]
            return mid
        where = f"record uuid {mid} repeated (a resumed session re-wrote it)"
        if digest in self.seen[mid]:
            problems.append(
                Problem(str(path), line, "skipped", f"{where}; same content, later copy dropped")
            )
            return None
        self.seen[mid].append(digest)
        problems.append(
            Problem(
                str(path), line, "repaired", f"{where} with different content; kept as a new id"
            )
        )
        return f"{mid}#{len(self.seen[mid])}"

    def extra(self, rec: dict, msg: dict) -> dict:
        out = {k: v for k, v in rec.items() if k not in _HANDLED}
        for key in ("cwd", "gitBranch", "version"):
            if rec.get(key) is not None and rec.get(key) != self.first.get(key):
                out[key] = rec[key]
        for key, value in msg.items():
            if key not in ("role", "content", "type"):
                out["message_id" if key == "id" else key] = value
        return out


def _session_id(st: Structure, th: Thread, path: Path, legacy: bool = False) -> str:
    """``claude-code:<sessionId>`` (``:agent:<id>`` for a subagent). Records without a
    sessionId: ``<file name>:<hash of the first message's uuid>`` in its place (the file
    name alone, what older versions used and ``legacy`` gives, is not unique)."""
    base = th.session_id
    if not base:
        main = st.threads.get((th.session_id, MAIN)) or th
        first = main.messages[0][1] if main.messages else None
        base = (
            Path(path).name
            if legacy or first is None
            else content_session_id(FORMAT, Path(path).name, first).split(":", 1)[1]
        )
    return f"{FORMAT}:{base}" if th.agent == MAIN else f"{FORMAT}:{base}:agent:{th.agent}"


def _payload(st: Structure, th: Thread, path: Path, variant: str) -> dict:
    meta: dict[str, Any] = {
        "source_file": Path(path).name,
        "variant": variant,
        "record_counts": dict(th.counts),
    }
    if th.first.get("gitBranch"):
        meta["git_branch"] = th.first["gitBranch"]
    if th.versions:
        meta["cli_version"] = th.versions[0]
        if len(th.versions) > 1:
            meta["cli_versions"] = th.versions
    if th.compactions:
        meta["compactions"] = th.compactions
    if not th.session_id:
        meta["session_id_synthesized"] = True
    session = {
        "session_id": _session_id(st, th, path),
        "source": FORMAT,
        "title": title_for(st, th),
        "model": th.first.get("model"),
        "cwd": th.first.get("cwd"),
        "started_at": th.started,
        "meta": meta,
    }
    if th.agent == MAIN:
        if summaries_of(st, th):
            meta["summaries"] = summaries_of(st, th)
        if st.unknown_types:
            meta["ignored_record_types"] = dict(st.unknown_types)
    else:
        session["parent_id"] = _session_id(st, Thread(session_id=th.session_id, agent=MAIN), path)
        session["parent_kind"] = "delegate"
        meta["agent_id"] = th.agent
        call = parent_call(st, th)
        if call:
            meta["parent_tool_call_id"] = call
    return session


def stream(
    path: Path,
    records: Records,
    problems: list[Problem],
    variant: str,
    extra_files: Iterable[tuple[Path, Records]] = (),
    links: Records | None = None,
) -> Iterator[Event]:
    """Events for one session file (``records(problems)`` re-reads it; pass 1 discards its
    problems so each is reported once) plus its subagent files, in that order. ``links``
    (a subagent file imported on its own: its session file) is scanned only for the tool
    calls that started subagents, never imported."""
    files = [(Path(path), records), *extra_files]
    st = scan(rec for _, read in files for rec in expand(read([]), frozenset()))
    # Subagent runs only agent_progress records carry (no subagent file, no inline sidechain
    # records of that agent) are expanded into sidechain records: a second pass 1 then.
    carried = frozenset(st.progress_agents - {k[1] for k in st.threads if k[1] != MAIN})
    if carried:
        st = scan(rec for _, read in files for rec in expand(read([]), carried))
    if links is not None:
        parent = scan(links([]))
        st.agent_calls.update(parent.agent_calls)
        st.task_prompts.update(parent.task_prompts)
    main_threads = [t for k, t in st.threads.items() if k[1] == MAIN]
    emitters: dict[tuple[str, str], Emitter] = {}
    ordered = main_threads + [t for k, t in st.threads.items() if k[1] != MAIN]
    for th in ordered:
        payload = _payload(st, th, path, variant)
        emitters[(th.session_id, th.agent)] = Emitter(th, payload["session_id"])
        if th.session_id or not th.messages:
            yield SessionStart(payload)
        else:  # an older version named it by the file; message uuids are unique: match by id
            yield SessionStart(
                payload, _session_id(st, th, path, legacy=True), [{"id": th.messages[0][1]}]
            )
    for rtype, n in sorted(st.unknown_types.items()):
        problems.append(
            Problem(str(path), None, "ignored", f"{n} record(s) of unknown type {rtype!r} ignored")
        )
    ordinal = 0
    for fpath, read in files:
        for line, rec in expand(read(problems), carried):
            ordinal += 1
            if not isinstance(rec, dict) or not isinstance(rec.get("type"), str):
                problems.append(
                    Problem(str(fpath), line, "skipped", "record is not an object with a 'type'")
                )
                continue
            if rec["type"] not in MESSAGE_TYPES:
                continue
            try:
                yield from _record(st, emitters, fpath, line, ordinal, rec, problems)
            except (TypeError, AttributeError, ValueError, KeyError, RecursionError) as exc:
                problems.append(
                    Problem(
                        str(fpath), line, "skipped", f"{rec['type']} record: {shape_problem(exc)}"
                    )
                )


def _record(
    st: Structure,
    emitters: dict,
    path: Path,
    line: int | None,
    ordinal: int,
    rec: dict,
    problems: list[Problem],
) -> Iterator[Event]:
    uuid = rec.get("uuid") if isinstance(rec.get("uuid"), str) else None
    key = st.thread_of.get(uuid) if uuid else None
    sess: Emitter = emitters.get(key or thread_key(st, rec, uuid)) or next(iter(emitters.values()))
    msg = rec.get("message")
    if not isinstance(msg, dict):
        problems.append(
            Problem(str(path), line, "skipped", f"{rec['type']} record without a 'message' object")
        )
        return
    mid = sess.dedupe(str(uuid or f"record:{ordinal}"), msg, path, line, problems)
    if mid is None:
        return
    ts = parse_timestamp(rec.get("timestamp"))
    out = (
        [claude_blocks.assistant(sess, rec, msg, mid, ts)]
        if rec["type"] == "assistant"
        else claude_blocks.user(sess, rec, msg, mid, ts)
    )
    if rec.get("isCompactSummary") and uuid in st.live:
        yield Compact(sess.session_id, out, info={"uuid": uuid})
        return
    rewound = st.is_rewound(uuid)
    for m in out:
        yield Message(sess.session_id, m, rewound=rewound)

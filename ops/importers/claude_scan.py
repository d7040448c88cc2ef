"""Pass 1 over a Claude Code transcript: its structure, without its content.

Claude Code records form a tree through ``parentUuid``. One cheap pass (kept per record: a
few ids and flags, never message text) decides, before any message is emitted:

* **threads**: the main conversation of each ``sessionId``, and each subagent (sidechain)
  conversation: records with ``isSidechain: true`` grouped by ``agentId`` when present (newer
  versions), else by the root of their ``parentUuid`` chain (older versions write every
  Task run inline, rooted at a record whose ``parentUuid`` is null);
* **the active path** of each thread: from its last message record back to the root. A
  compaction restarts the chain (a ``compact_boundary`` system record, or in 1.0.x a
  ``isCompactSummary`` user record, with ``parentUuid`` null), and so may a resume or a
  parent the file does not hold: at such a root the walk continues at ``logicalParentUuid``
  when that record exists, else at the thread's last message record before the root (the
  leaf the restart replaced), so only a real fork (two children of one record) abandons
  anything. Off-path records that the model
  still saw stay live, transitively (a record live for one of these reasons passes it on):
  the other blocks of a live API response (same ``message.id``), and a tool-result record
  whose parent is live or that answers a tool call of a live record (parallel tool calls
  answer off the main chain). Every other off-path message record is on an abandoned
  (rewound) branch;
* **titles**: ``custom-title`` (set by the user) wins over ``ai-title`` over ``summary``
  records (the summary whose ``leafUuid`` is in the session, last one wins);
* **links**: a subagent thread's parent tool call: the Task/Agent ``tool_use`` whose
  ``toolUseResult.agentId`` names it, else whose ``input.prompt`` equals the thread's first
  prompt;
* record type counts, including types this version does not know (ignored, counted).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from quill.ops.importers.claude_carried import CARRIED, progress_agent
from quill.ops.importers.jsonlines import member_object, parse_timestamp

#: Record types Claude Code is known to write that are not messages (counted, not imported).
#: Anything else is an unknown type: ignored and reported with its count.
KNOWN_TYPES = frozenset(
    {
        "user",
        "assistant",
        "system",
        "summary",
        "progress",
        "file-history-snapshot",
        "queue-operation",
        "custom-title",
        "ai-title",
        "attachment",
        "last-prompt",
        "mode",
        "permission-mode",
        "agent-name",
        "pr-link",
        "bridge-session",
        "atis-latch",
        "cost-state",
        "tag",
    }
)
TASK_TOOLS = ("Task", "Agent")
MAIN = ""  # agent key of a session's main thread


@dataclass
class Thread:
    """One conversation: a session's main thread or one subagent run (figures, no content)."""

    session_id: str  # the transcript's sessionId ("" when records have none)
    agent: str  # MAIN, or the agentId / sidechain root uuid
    counts: dict[str, int] = field(default_factory=dict)
    first: dict[str, Any] = field(default_factory=dict)
    versions: list[str] = field(default_factory=list)
    started: float | None = None
    messages: list[tuple[int, str]] = field(
        default_factory=list
    )  # (ordinal, uuid) of message records
    first_prompt: str | None = None
    compactions: list[dict] = field(default_factory=list)


@dataclass
class Structure:
    """What pass 1 learned about one file (see module doc)."""

    threads: dict[tuple[str, str], Thread] = field(default_factory=dict)
    thread_of: dict[str, tuple[str, str]] = field(default_factory=dict)  # uuid -> thread key
    parent: dict[str, str | None] = field(default_factory=dict)
    logical: dict[str, str] = field(default_factory=dict)
    tool_result_only: set[str] = field(default_factory=set)
    response_of: dict[str, str] = field(default_factory=dict)  # uuid -> assistant message.id
    call_record: dict[str, str] = field(default_factory=dict)  # tool_use id -> record uuid
    answers: dict[str, list[str]] = field(default_factory=dict)  # result uuid -> tool_use ids
    ordinal: dict[str, int] = field(default_factory=dict)
    live: set[str] = field(default_factory=set)  # filled by finish()
    titles: dict[str, dict[str, str]] = field(default_factory=dict)  # sessionId -> kind -> title
    summaries: list[dict] = field(default_factory=list)
    task_prompts: dict[str, list[str]] = field(default_factory=dict)  # prompt -> tool_use ids
    agent_calls: dict[str, str] = field(default_factory=dict)  # agentId -> tool_use id
    unknown_types: dict[str, int] = field(default_factory=dict)
    progress_agents: set[str] = field(default_factory=set)  # agent ids agent_progress carries
    loose: dict[str, int] = field(default_factory=dict)  # counts of records with no thread
    first_session: str | None = None

    def is_rewound(self, uuid: Any) -> bool:
        """True for a message record on an abandoned branch (only known uuids can be)."""
        return isinstance(uuid, str) and uuid in self.ordinal and uuid not in self.live


def _text(content: Any) -> str | None:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [b.get("text") for b in content if isinstance(b, dict) and b.get("type") == "text"]
        return "\n".join(p for p in parts if isinstance(p, str)) or None
    return None


def thread_key(st: Structure, rec: dict, uuid: str | None) -> tuple[str, str]:
    """The thread a record belongs to (assigns a new sidechain thread at a chain root)."""
    sid = (
        rec.get("sessionId") if isinstance(rec.get("sessionId"), str) else (st.first_session or "")
    )
    if not rec.get("isSidechain"):
        return (sid, MAIN)
    if isinstance(rec.get("agentId"), str) and rec["agentId"]:
        return (sid, rec["agentId"])
    parent = rec.get("parentUuid")
    if isinstance(parent, str) and parent in st.thread_of and st.thread_of[parent][1] != MAIN:
        return st.thread_of[parent]
    return (sid, uuid or "sidechain")  # stable in both passes (a record without a uuid)


def scan(records: Iterable[tuple[int | None, Any]]) -> Structure:
    """Pass 1 over ``(line, record)`` pairs; call ``finish`` on the result (done here)."""
    st = Structure()
    for ordinal, (_, rec) in enumerate(records):
        if isinstance(rec, dict) and isinstance(rec.get("type"), str):
            _note(st, ordinal, rec)
    finish(st)
    return st


def _note(st: Structure, ordinal: int, rec: dict) -> None:
    rtype = rec["type"]
    if rtype not in KNOWN_TYPES:
        st.unknown_types[rtype] = st.unknown_types.get(rtype, 0) + 1
        return
    if st.first_session is None and isinstance(rec.get("sessionId"), str):
        st.first_session = rec["sessionId"]
    agent = progress_agent(rec)
    if agent is not None:
        st.progress_agents.add(agent)
    if rtype == "summary":
        st.summaries.append({"summary": rec.get("summary"), "leafUuid": rec.get("leafUuid")})
        return
    if rtype in ("custom-title", "ai-title"):
        title = rec.get("customTitle" if rtype == "custom-title" else "aiTitle") or rec.get("title")
        if isinstance(title, str) and title.strip():
            sid = (
                rec.get("sessionId")
                if isinstance(rec.get("sessionId"), str)
                else (st.first_session or "")
            )
            st.titles.setdefault(sid, {})[rtype] = title
        return
    uuid = rec.get("uuid") if isinstance(rec.get("uuid"), str) else None
    if (
        uuid is None
        and not isinstance(rec.get("sessionId"), str)
        and rtype not in ("user", "assistant")
    ):
        st.loose[rtype] = st.loose.get(rtype, 0) + 1  # e.g. a snapshot before the first message
        return
    key = thread_key(st, rec, uuid)
    th = st.threads.get(key)
    if th is None:
        th = st.threads[key] = Thread(session_id=key[0], agent=key[1])
    _figures(th, rec)
    msg = member_object(rec, "message")
    if rtype == "system" and rec.get("subtype") == "compact_boundary":
        th.compactions.append(
            {
                k: rec.get(k)
                for k in ("uuid", "logicalParentUuid", "timestamp", "compactMetadata")
                if rec.get(k) is not None
            }
        )
    if rtype == "user" and th.first_prompt is None and key[1] != MAIN:
        th.first_prompt = _text(msg.get("content"))
    if key[1] == MAIN:
        _links(st, rtype, rec, msg)
    elif isinstance(rec.get("parentToolUseID"), str):  # a run carried by agent_progress
        st.agent_calls.setdefault(key[1], rec["parentToolUseID"])
    if uuid is None or uuid in st.ordinal:
        return  # a re-written record (resumed session) keeps its first place in the tree
    st.thread_of[uuid] = key
    st.ordinal[uuid] = ordinal
    parent = rec.get("parentUuid")
    st.parent[uuid] = parent if isinstance(parent, str) else None
    if isinstance(rec.get("logicalParentUuid"), str):
        st.logical[uuid] = rec["logicalParentUuid"]
    if rtype in ("user", "assistant"):
        th.messages.append((ordinal, uuid))
        content = msg.get("content")
        if (
            rtype == "user"
            and isinstance(content, list)
            and content
            and all(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)
        ):
            st.tool_result_only.add(uuid)
            st.answers[uuid] = [
                b["tool_use_id"] for b in content if isinstance(b.get("tool_use_id"), str)
            ]
        if rtype == "assistant" and isinstance(msg.get("id"), str):
            st.response_of[uuid] = msg["id"]
        if rtype == "assistant" and isinstance(content, list):
            for b in content:
                if isinstance(b, dict) and b.get("type") == "tool_use":
                    if isinstance(b.get("id"), str):
                        st.call_record.setdefault(b["id"], uuid)


def _figures(th: Thread, rec: dict) -> None:
    # a message record made from a carrier is counted apart: counts are of the file's records
    kind = f"carried:{rec[CARRIED]}" if CARRIED in rec else rec["type"]
    th.counts[kind] = th.counts.get(kind, 0) + 1
    for key in ("cwd", "gitBranch", "version"):
        if rec.get(key) and key not in th.first:
            th.first[key] = rec[key]
    ts = parse_timestamp(rec.get("timestamp"))
    if ts is not None and (th.started is None or ts < th.started):
        th.started = ts
    ver = rec.get("version")
    if isinstance(ver, str) and ver and ver not in th.versions:
        th.versions.append(ver)
    msg = rec.get("message")
    model = msg.get("model") if isinstance(msg, dict) and rec["type"] == "assistant" else None
    if isinstance(model, str) and model != "<synthetic>" and "model" not in th.first:
        th.first["model"] = model


def _links(st: Structure, rtype: str, rec: dict, msg: dict) -> None:
    content = msg.get("content")
    if not isinstance(content, list):
        return
    if rtype == "assistant":
        for b in content:
            if isinstance(b, dict) and b.get("type") == "tool_use" and b.get("name") in TASK_TOOLS:
                prompt = (
                    (b.get("input") or {}).get("prompt")
                    if isinstance(b.get("input"), dict)
                    else None
                )
                if isinstance(prompt, str) and isinstance(b.get("id"), str):
                    st.task_prompts.setdefault(prompt, []).append(b["id"])
    elif rtype == "user" and isinstance(rec.get("toolUseResult"), dict):
        agent = rec["toolUseResult"].get("agentId")
        call = next(
            (
                b.get("tool_use_id")
                for b in content
                if isinstance(b, dict) and b.get("type") == "tool_result"
            ),
            None,
        )
        if isinstance(agent, str) and isinstance(call, str):
            st.agent_calls[agent] = call


def finish(st: Structure) -> None:
    """Compute ``live``: every thread's active path plus the off-path records the model saw."""
    main = next((t for k, t in st.threads.items() if k[1] == MAIN), None)
    for rtype, n in st.loose.items():
        if main is not None:
            main.counts[rtype] = main.counts.get(rtype, 0) + n
    for th in st.threads.values():
        if not th.messages:
            continue
        ordinals = [o for o, _ in th.messages]
        on: set[str] = set()
        node: str | None = th.messages[-1][1]
        while node is not None and node not in on:
            on.add(node)
            nxt = st.parent.get(node)
            if nxt not in st.parent:  # a root (compaction, resume) or a parent not in the file
                logical = st.logical.get(node)
                if logical in st.parent:
                    nxt = logical
                else:
                    # Continue at the leaf the restart replaced: the last message record before it.
                    i = bisect.bisect_left(ordinals, st.ordinal[node]) - 1
                    nxt = th.messages[i][1] if i >= 0 else None
            node = nxt
        _spread(st, th, on)


def _spread(st: Structure, th: Thread, on: set[str]) -> None:
    """Add to ``st.live`` the thread's active path ``on`` and every record live for another
    reason, transitively: a block of a live API response (same ``message.id``), and a
    tool-result record whose parent is live or that answers a call made by a live record.
    Liveness flows through records live for such a reason, not only through the path
    (parallel calls A1 -> A2 of one response: A2's result hangs off A2, which is off the
    path). A walk over reverse edges from the path: each record is queued at most once."""
    by_response: dict[str, list[str]] = {}
    by_source: dict[str, list[str]] = {}  # live record uuid -> result records it makes live
    for _, u in th.messages:
        if u in st.response_of:
            by_response.setdefault(st.response_of[u], []).append(u)
        if u in st.tool_result_only:
            sources = [st.parent.get(u), *(st.call_record.get(c) for c in st.answers.get(u, ()))]
            for src in {s for s in sources if s is not None}:
                by_source.setdefault(src, []).append(u)
    live = set(on)
    todo = list(on)
    seen_responses: set[str] = set()
    while todo:
        u = todo.pop()
        nxt = list(by_source.get(u, ()))
        resp = st.response_of.get(u)
        if resp is not None and resp not in seen_responses:
            seen_responses.add(resp)
            nxt.extend(by_response.get(resp, ()))
        for v in nxt:
            if v not in live:
                live.add(v)
                todo.append(v)
    st.live |= live


def title_for(st: Structure, th: Thread) -> str | None:
    """The session title (custom > AI > summary), or None; subagent threads get none."""
    if th.agent != MAIN:
        return None
    named = (
        st.titles.get(th.session_id)
        or (st.titles.get("") if th.session_id == st.first_session else None)
        or {}
    )
    if named.get("custom-title") or named.get("ai-title"):
        return named.get("custom-title") or named.get("ai-title")
    mine = summaries_of(st, th)
    return next((s["summary"] for s in reversed(mine) if isinstance(s.get("summary"), str)), None)


def summaries_of(st: Structure, th: Thread) -> list[dict]:
    """The ``summary`` records of a main thread: those whose leaf is in its session (any of
    its threads); all of them when the file has one session."""
    mine = [
        s
        for s in st.summaries
        if st.thread_of.get(s.get("leafUuid") or "", ("", ""))[0] == th.session_id
    ]
    if not mine and len([k for k in st.threads if k[1] == MAIN]) == 1:
        mine = st.summaries
    return mine


def parent_call(st: Structure, th: Thread) -> str | None:
    """The parent's tool call that started a subagent thread, when it can be told."""
    if th.agent in st.agent_calls:
        return st.agent_calls[th.agent]
    calls = st.task_prompts.get(th.first_prompt or "")
    return calls[0] if calls else None

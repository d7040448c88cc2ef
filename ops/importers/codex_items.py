"""Pass 2 over a Codex rollout: one record at a time into importer events
(``ops/importers/codex.py`` has the mapping in its module doc and the file-level ``stream``).

``State`` is what pass 2 carries from record to record (producer ids, tool names, reasoning
waiting for its message, the live ids and user turns a rollback cuts, the running token
total); ``record_events`` maps one record, ``_item`` one ``response_item`` payload, and
``_token_count`` a ``token_count`` event.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from quill.ops.importers.events import Compact, Event, Message, Rewind, Usage
from quill.ops.importers.jsonlines import (
    INJECTED,
    Problem,
    injected_text,
    join_text,
    make_message,
    make_tool_call,
    mark_injected,
    parse_timestamp,
)

FORMAT = "codex"
#: ``response_item`` payload types this importer maps (others are ignored and counted).
ITEM_TYPES = frozenset(
    {
        "message",
        "reasoning",
        "function_call",
        "custom_tool_call",
        "local_shell_call",
        "web_search_call",
        "function_call_output",
        "custom_tool_call_output",
        "local_shell_call_output",
        "compaction",
    }
)
_ROLES = ("system", "developer", "user", "assistant", "tool")


def _parts_content(parts: Any) -> Any:
    """Responses-API content parts (or a plain string) -> string, or parts if images."""
    if isinstance(parts, str) or parts is None:
        return parts
    if not isinstance(parts, list):
        return json.dumps(parts, ensure_ascii=False)
    texts, images = [], []
    for part in parts:
        if not isinstance(part, dict):
            texts.append(str(part))
        elif isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif part.get("type") in ("input_image", "image_url", "output_image"):
            url = part.get("image_url")
            url = url.get("url") if isinstance(url, dict) else url
            images.append({"type": "image_url", "image_url": {"url": url or ""}})
        elif part.get("type") == "input_file":  # a document; its data URL is stored once (blobs)
            images.append(
                {
                    "type": "file",
                    "file": {
                        k: part[k]
                        for k in ("file_data", "file_id", "filename")
                        if part.get(k) is not None
                    },
                }
            )
        else:
            texts.append(json.dumps(part, ensure_ascii=False))
    text = join_text(texts)
    if not images:
        return text
    return ([{"type": "text", "text": text}] if text else []) + images


class State:
    """Pass 2 state (instance only; no module-level mutation)."""

    def __init__(self, sid: str, path: Path, problems: list[Problem]) -> None:
        self.sid, self.path, self.problems = sid, str(path), problems
        self.ids: dict[tuple[int | None, str], int] = {}
        self.tool_names: dict[str, str] = {}
        self.pending_reasoning: list[str] = []
        self.turn: dict = {}
        self.live_ids: list[str] = []  # producer ids fed to the model, in order
        self.turn_starts: list[int] = []  # indexes into live_ids where a user turn starts
        self.last_user: int | None = None  # index of the last user message in live_ids
        self.usage_total: dict | None = None  # the last token_count's running total
        self.turn_open = False  # a turn_context began a turn whose prompt is not seen yet

    def mark_turn(self, index: int) -> None:
        """A user turn starts at ``live_ids[index]`` (once: an echo of the prompt a
        ``turn_context`` already marked adds nothing)."""
        if not self.turn_starts or self.turn_starts[-1] != index:
            self.turn_starts.append(index)

    def next_id(self, line: int | None, suffix: str = "") -> str:
        k = self.ids.get((line, suffix), 0)
        self.ids[(line, suffix)] = k + 1
        base = f"line:{line}{suffix}"
        return base if k == 0 else f"{base}:{k}"

    def extra(self, p: dict) -> dict:
        out: dict[str, Any] = {}
        for key in ("id", "phase", "status", "end_turn"):
            if p.get(key) is not None:
                out["item_id" if key == "id" else key] = p[key]
        md = p.get("metadata") or p.get("internal_chat_message_metadata_passthrough") or {}
        turn_id = md.get("turn_id") if isinstance(md, dict) else None
        out["turn_id"] = turn_id or self.turn.get("turn_id")
        return out

    def take_reasoning(self) -> str | None:
        text = join_text(self.pending_reasoning)
        self.pending_reasoning = []
        return text


def _part_texts(value: Any) -> list[Any]:
    """The ``text`` of each part of a reasoning ``summary``/``content`` list (a bare string is
    its own text; any other JSON type holds none)."""
    if isinstance(value, str):
        return [value]
    return (
        [part.get("text") for part in value if isinstance(part, dict)]
        if isinstance(value, list)
        else []
    )


def _item(st: State, mid: str, p: dict, ts: float | None) -> dict | None:
    """One response item -> a message (None for reasoning, kept for the next message)."""
    ptype = p.get("type")
    extra = st.extra(p)
    if ptype == "reasoning":
        texts = _part_texts(p.get("summary")) + _part_texts(p.get("content"))
        st.pending_reasoning.extend(t for t in texts if isinstance(t, str) and t)
        return None
    if ptype == "message":
        role = p.get("role")
        if role not in _ROLES:
            extra["original_role"], role = role, "user"
        if role == "assistant":
            extra["model"] = st.turn.get("model")
        msg = make_message(
            mid,
            role,
            _parts_content(p.get("content")),
            timestamp=ts,
            reasoning=st.take_reasoning() if role == "assistant" else None,
            extra=extra,
        )
        # AGENTS.md, <environment_context>, <user_instructions> …: context, not a prompt.
        return mark_injected(msg) if role == "user" and injected_text(msg["content"]) else msg
    if ptype in ("function_call", "custom_tool_call", "local_shell_call", "web_search_call"):
        cid = str(p.get("call_id") or p.get("id") or mid)
        if ptype == "function_call":
            name, args = (
                p.get("name") or "",
                p.get("arguments") if p.get("arguments") is not None else "{}",
            )
        elif ptype == "custom_tool_call":
            name, args = p.get("name") or "", {"input": p.get("input")}
            extra["custom_tool"] = True
        else:
            name, args = ptype.removesuffix("_call"), p.get("action") or {}
        st.tool_names[cid] = name
        extra["model"] = st.turn.get("model")
        return make_message(
            mid,
            "assistant",
            None,
            timestamp=ts,
            extra=extra,
            tool_calls=[make_tool_call(cid, name, args)],
            reasoning=st.take_reasoning(),
        )
    if ptype in ("function_call_output", "custom_tool_call_output", "local_shell_call_output"):
        cid = str(p.get("call_id") or "")
        return make_message(
            mid,
            "tool",
            _parts_content(p.get("output")),
            timestamp=ts,
            tool_call_id=cid or None,
            name=st.tool_names.get(cid),
            extra=extra,
        )
    if ptype == "compaction":  # the encrypted summary a compaction feeds the model
        extra.update(compaction=True, encrypted_content=p.get("encrypted_content"))
        return make_message(mid, "assistant", None, timestamp=ts, extra=extra)
    return None


def record_events(st: State, line: int | None, rec: dict) -> Iterator[Event]:
    rtype, p = rec["type"], rec["payload"]
    ts = parse_timestamp(rec.get("timestamp"))
    if rtype == "response_item":
        msg = _item(st, st.next_id(line), p, ts)
        if msg is not None:
            if msg["role"] == "user":
                st.last_user = len(st.live_ids)
                injected = (msg.get("extra") or {}).get(INJECTED)
                if st.turn_open and not injected:
                    st.mark_turn(st.last_user)  # the first real prompt of a new turn
                    st.turn_open = False
            st.live_ids.append(msg["id"])
            yield Message(st.sid, msg)
    elif rtype == "turn_context":
        if not p.get("turn_id") or p.get("turn_id") != st.turn.get("turn_id"):
            st.turn_open = True  # a new turn: its first real user prompt starts it
        st.turn = p
    elif rtype == "compacted":
        history = p.get("replacement_history")
        if isinstance(history, list) and history:
            out = [
                m
                for k, item in enumerate(history)
                if isinstance(item, dict)
                for m in [_item(st, st.next_id(line, f":r{k}"), item, ts)]
                if m is not None
            ]
        else:
            out = [
                make_message(
                    st.next_id(line, ":summary"),
                    "user",
                    p.get("message") or "",
                    timestamp=ts,
                    extra={"compaction_summary": True},
                )
            ]
        if out:
            st.live_ids = [m["id"] for m in out]
            st.turn_starts, st.last_user = [], None
            yield Compact(st.sid, out, info={"line": line})
    elif rtype == "event_msg" and p.get("type") == "user_message" and st.last_user is not None:
        st.mark_turn(st.last_user)
    elif rtype == "event_msg" and p.get("type") == "token_count":
        usage = _token_count(st, p, line)
        if usage is not None:
            yield Usage(
                st.sid,
                {
                    "usage": usage[0],
                    "task": "turn",
                    "model": st.turn.get("model"),
                    "ts": rec.get("timestamp"),
                    "source": FORMAT,
                    "response_id": f"{st.sid}:total:{usage[1]}",
                },
            )
    elif rtype == "event_msg" and p.get("type") == "thread_rolled_back":
        n = p.get("num_turns")
        if not isinstance(n, int) or isinstance(n, bool) or n <= 0 or n > len(st.turn_starts):
            st.problems.append(
                Problem(
                    st.path,
                    line,
                    "skipped" if not st.turn_starts else "repaired",
                    f"thread_rolled_back num_turns={n!r} but {len(st.turn_starts)} user turn(s) "
                    "are live here" + ("; rolled back all of them" if st.turn_starts else ""),
                )
            )
        if isinstance(n, int) and not isinstance(n, bool) and n > 0 and st.turn_starts:
            cut = st.turn_starts[-min(n, len(st.turn_starts))]
            dropped = st.live_ids[cut:]
            st.live_ids, st.turn_starts = st.live_ids[:cut], [t for t in st.turn_starts if t < cut]
            st.last_user, st.turn_open = None, False
            if dropped:
                yield Rewind(st.sid, dropped)


_USAGE_KEYS = (
    "input_tokens",
    "cached_input_tokens",
    "output_tokens",
    "reasoning_output_tokens",
    "total_tokens",
)


def _token_count(st: State, p: dict, line: int | None = None) -> tuple[dict, Any] | None:
    """``(usage, name)`` of the model call a ``token_count`` event reports, or None for a
    repeat or an event with no usage. Codex repeats an event (rate-limit updates, resumes)
    with the same cumulative ``total_token_usage``: a call is new only when that total
    changed, and the total names it (the ``response_id``) so re-imports count it once. The
    usage is the change of the running total: usually equal to ``last_token_usage``, but a
    call with no event of its own (the corpus has rollouts whose total grows by more than
    ``last_token_usage`` says) is only in the total, and some versions write only the total.
    A total that went down (a resumed rollout restarting its count) falls back to
    ``last_token_usage``; with none, the call's usage cannot be told: reported, not recorded
    (never as zero)."""
    info = p.get("info")
    if not isinstance(info, dict):
        return None
    last = info.get("last_token_usage") if isinstance(info.get("last_token_usage"), dict) else None
    total = (
        info.get("total_token_usage") if isinstance(info.get("total_token_usage"), dict) else None
    )
    if total is None and last is None:
        return None
    if total is not None and total == st.usage_total:
        return None
    usage = last
    if total is not None:
        before = st.usage_total or {}
        # Only counters the total holds: a missing one is unknown, not zero.
        delta = {
            k: total[k] - before.get(k, 0)
            for k in _USAGE_KEYS
            if isinstance(total.get(k), int) and isinstance(before.get(k, 0), int)
        }
        if delta and min(delta.values()) >= 0 and max(delta.values()) > 0:
            usage = delta
        st.usage_total = total
    if usage is None:
        st.problems.append(
            Problem(
                st.path,
                line,
                "skipped",
                "token_count total_token_usage went down and there is no last_token_usage: "
                "this call's usage is unknown, not recorded",
            )
        )
        return None
    name = total.get("total_tokens") if total is not None else None
    return usage, (name if name is not None else json.dumps(usage, sort_keys=True))

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
  ``num_turns`` user turns (a turn starts at the user message an ``event_msg user_message``
  echoes; injected context such as AGENTS.md is not a turn);
* ``event_msg`` ``thread_name_updated`` gives the title (the last one wins);
* ``event_msg`` ``token_count`` -> a ``Usage`` event per model call (``_token_count``);
* record types this version does not know are ignored and counted (``meta.counts``).

Session id: "codex:<session_meta id>"; a rollout without one gets "codex:<file name>:<hash
of its first record>" (the file name alone, what older versions used, is offered as
``legacy_id`` with the first message, for stores that hold it).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from quill.ops.importers.events import Compact, Event, Message, Rewind, SessionStart, Usage
from quill.ops.importers.jsonlines import (
    Problem,
    content_session_id,
    join_text,
    make_message,
    make_tool_call,
    parse_timestamp,
    shape_problem,
)

FORMAT = "codex"
RECORD_TYPES = frozenset(
    {"session_meta", "response_item", "event_msg", "turn_context", "compacted"}
)
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
_META_KEYS = (
    "originator",
    "cli_version",
    "source",
    "thread_source",
    "model_provider",
    "git",
    "instructions",
    "forked_from_id",
)


def looks_like_record(obj: Any) -> bool:
    """True for a dict shaped like one Codex rollout line of a known type."""
    return looks_like_line(obj) and obj["type"] in RECORD_TYPES


def looks_like_line(obj: Any) -> bool:
    """True for any ``{type, payload: {...}}`` line (known type or one added later)."""
    return (
        isinstance(obj, dict)
        and isinstance(obj.get("type"), str)
        and isinstance(obj.get("payload"), dict)
    )


def looks_like_transcript(obj: Any) -> bool:
    """True for a line that carries the transcript (what detection keys on)."""
    return looks_like_line(obj) and obj["type"] in ("session_meta", "response_item")


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


class _Scan:
    """Pass 1: the session meta, models, title, counts and compactions (no content)."""

    def __init__(self) -> None:
        self.meta_payload: dict | None = None
        self.first_ts: Any = None
        self.first_record: dict | None = (
            None  # hashed into the id of a file without session_meta id
        )
        self.models: list[str] = []
        self.counts: dict[str, int] = {}
        self.compactions: list[dict] = []
        self.other_meta: list[dict] = []
        self.title: str | None = None

    def count(self, key: str) -> None:
        self.counts[key] = self.counts.get(key, 0) + 1

    def note(self, line: int | None, rec: dict) -> None:
        rtype, p = rec["type"], rec["payload"]
        if self.first_record is None:
            self.first_record = rec
        if self.first_ts is None:
            self.first_ts = rec.get("timestamp")
        if rtype == "response_item":
            self.count(f"response_item:{p.get('type')}")
            if not isinstance(p.get("type"), str) or p["type"] not in ITEM_TYPES:
                self.count("ignored_items")
        elif rtype == "session_meta":
            if self.meta_payload is None:
                self.meta_payload = p
            else:
                self.other_meta.append(
                    {"line": line, "id": p.get("id"), "timestamp": p.get("timestamp")}
                )
        elif rtype == "turn_context":
            self.count("turns")
            if isinstance(p.get("model"), str) and p["model"] not in self.models:
                self.models.append(p["model"])
        elif rtype == "compacted":
            self.compactions.append(
                {
                    "line": line,
                    "timestamp": rec.get("timestamp"),
                    "message": p.get("message"),
                    "replacement_history_items": len(p.get("replacement_history") or []),
                    **{
                        k: p[k]
                        for k in (
                            "window_number",
                            "window_id",
                            "previous_window_id",
                            "first_window_id",
                        )
                        if k in p
                    },
                }
            )
        else:
            self.count(f"{rtype}:{p.get('type')}")
            if rtype == "event_msg" and p.get("type") == "thread_name_updated":
                name = p.get("thread_name", p.get("name"))
                if isinstance(name, str) and name.strip():
                    self.title = name
        if rtype not in RECORD_TYPES:
            self.count("ignored_records")


class _State:
    """Pass 2 state (instance only; no module-level mutation)."""

    def __init__(self, sid: str, path: Path, problems: list[Problem]) -> None:
        self.sid, self.path, self.problems = sid, str(path), problems
        self.ids: dict[int | None, int] = {}
        self.tool_names: dict[str, str] = {}
        self.pending_reasoning: list[str] = []
        self.turn: dict = {}
        self.live_ids: list[str] = []  # producer ids fed to the model, in order
        self.turn_starts: list[int] = []  # indexes into live_ids where a user turn starts
        self.last_user: int | None = None  # index of the last user message in live_ids
        self.usage_total: dict | None = None  # the last token_count's running total

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


def _item(st: _State, mid: str, p: dict, ts: float | None) -> dict | None:
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
        return make_message(
            mid,
            role,
            _parts_content(p.get("content")),
            timestamp=ts,
            reasoning=st.take_reasoning() if role == "assistant" else None,
            extra=extra,
        )
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


def _opening(
    path: Path, records: Callable[[list[Problem]], Iterable[tuple[int | None, Any]]], sid: str
) -> list[dict]:
    """The first message of a rollout (read up to it, problems discarded): what a store
    made by an older version must hold under the file-name id for the import to keep it."""
    st = _State(sid, path, [])
    for line, rec in records([]):
        if not looks_like_line(rec):
            continue
        try:
            for ev in _record(st, line, rec):
                if isinstance(ev, Message):
                    return [ev.message]
        except (TypeError, AttributeError, ValueError, KeyError, RecursionError):
            continue
    return []


def stream(
    path: Path,
    records: Callable[[list[Problem]], Iterable[tuple[int | None, Any]]],
    problems: list[Problem],
) -> Iterator[Event]:
    """Events of one rollout file (at most one session); ``records(problems)`` re-reads it."""
    scan = _Scan()
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
    session = _session(path, scan, problems)
    if session["meta"].get("session_id_synthesized"):  # older versions named it by the file alone
        yield SessionStart(
            session, f"{FORMAT}:{Path(path).name}", _opening(path, records, session["session_id"])
        )
    else:
        yield SessionStart(session)
    st = _State(session["session_id"], path, problems)
    for line, rec in records(problems):
        if not looks_like_line(rec):
            problems.append(
                Problem(str(path), line, "skipped", "not a Codex {timestamp, type, payload} record")
            )
            continue
        try:
            yield from _record(st, line, rec)
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


def _record(st: _State, line: int | None, rec: dict) -> Iterator[Event]:
    rtype, p = rec["type"], rec["payload"]
    ts = parse_timestamp(rec.get("timestamp"))
    if rtype == "response_item":
        msg = _item(st, st.next_id(line), p, ts)
        if msg is not None:
            if msg["role"] == "user":
                st.last_user = len(st.live_ids)
            st.live_ids.append(msg["id"])
            yield Message(st.sid, msg)
    elif rtype == "turn_context":
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
        if not st.turn_starts or st.turn_starts[-1] != st.last_user:
            st.turn_starts.append(st.last_user)
    elif rtype == "event_msg" and p.get("type") == "token_count":
        usage = _token_count(st, p)
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
            st.last_user = None
            if dropped:
                yield Rewind(st.sid, dropped)


_USAGE_KEYS = (
    "input_tokens",
    "cached_input_tokens",
    "output_tokens",
    "reasoning_output_tokens",
    "total_tokens",
)


def _token_count(st: _State, p: dict) -> tuple[dict, Any] | None:
    """``(usage, name)`` of the model call a ``token_count`` event reports, or None for a
    repeat. Codex repeats an event (rate-limit updates, resumes) with the same cumulative
    ``total_token_usage``: a call is new only when that total changed, and the total names it
    (the ``response_id``) so re-imports count it once. The usage is the change of the running
    total — usually equal to ``last_token_usage``, but a call with no event of its own (the
    corpus has rollouts whose total grows by more than ``last_token_usage`` says) is only in
    the total. A total that went down (a
    resumed rollout restarting its count) falls back to ``last_token_usage``."""
    info = p.get("info")
    if not isinstance(info, dict) or not isinstance(info.get("last_token_usage"), dict):
        return None
    total = (
        info.get("total_token_usage") if isinstance(info.get("total_token_usage"), dict) else None
    )
    if total is not None and total == st.usage_total:
        return None
    usage = info["last_token_usage"]
    if total is not None:
        before = st.usage_total or {}
        delta = {
            k: total.get(k, 0) - before.get(k, 0)
            for k in _USAGE_KEYS
            if isinstance(total.get(k, 0), int) and isinstance(before.get(k, 0), int)
        }
        if len(delta) == len(_USAGE_KEYS) and min(delta.values()) >= 0:
            usage = delta
    st.usage_total = total
    name = total.get("total_tokens") if total is not None else None
    return usage, (name if name is not None else json.dumps(usage, sort_keys=True))


def _session(path: Path, scan: _Scan, problems: list[Problem]) -> dict:
    mp = scan.meta_payload or {}
    sid = mp.get("id") or mp.get("session_id")
    sid = sid if isinstance(sid, str) else None
    meta: dict[str, Any] = {"source_file": Path(path).name, "counts": scan.counts}
    if not sid:  # "<file name>:<hash of the first record>": the name alone is not unique
        sid = content_session_id(FORMAT, Path(path).name, scan.first_record).split(":", 1)[1]
        meta["session_id_synthesized"] = True
        problems.append(
            Problem(
                str(path),
                None,
                "repaired",
                "no session_meta id; session id made from file name and first record",
            )
        )
    for key in _META_KEYS:
        if mp.get(key) is not None:
            meta[key] = mp[key]
    base = mp.get("base_instructions")
    if isinstance(base, dict) and base.get("text"):
        meta["base_instructions"] = base["text"]
    elif isinstance(base, str):
        meta["base_instructions"] = base
    if scan.models:
        meta["models"] = scan.models
    if scan.compactions:
        meta["compactions"] = scan.compactions
    if scan.other_meta:
        meta["other_session_meta"] = scan.other_meta
    return {
        "session_id": f"{FORMAT}:{sid}",
        "source": FORMAT,
        "title": scan.title,
        "model": scan.models[0] if scan.models else mp.get("model"),
        "cwd": mp.get("cwd"),
        "started_at": parse_timestamp(mp.get("timestamp")) or parse_timestamp(scan.first_ts),
        "meta": meta,
    }

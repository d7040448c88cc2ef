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

``compacted`` records are NOT replayed as messages: their replacement_history
is summarised in ``session["meta"]["compactions"]``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

from .jsonlines import ImportedSession, Problem, join_text, make_message, make_tool_call, parse_timestamp

FORMAT = "codex"
RECORD_TYPES = frozenset({"session_meta", "response_item", "event_msg", "turn_context", "compacted"})
_ROLES = ("system", "developer", "user", "assistant", "tool")
_META_KEYS = ("originator", "cli_version", "source", "thread_source", "model_provider", "git",
              "instructions", "forked_from_id")


def looks_like_record(obj: Any) -> bool:
    """True for a dict shaped like one Codex rollout line."""
    return (isinstance(obj, dict) and isinstance(obj.get("type"), str)
            and obj["type"] in RECORD_TYPES and isinstance(obj.get("payload"), dict))


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
        else:
            texts.append(json.dumps(part, ensure_ascii=False))
    text = join_text(texts)
    if not images:
        return text
    return ([{"type": "text", "text": text}] if text else []) + images


class _State:
    """Per-file parse state (instance only; no module-level mutation)."""

    def __init__(self) -> None:
        self.meta_payload: dict | None = None
        self.first_ts: Any = None
        self.messages: list[dict] = []
        self.ids: dict[int | None, int] = {}
        self.tool_names: dict[str, str] = {}
        self.pending_reasoning: list[str] = []
        self.turn: dict = {}
        self.models: list[str] = []
        self.counts: dict[str, int] = {}
        self.compactions: list[dict] = []
        self.other_meta: list[dict] = []

    def next_id(self, line: int | None) -> str:
        k = self.ids.get(line, 0)
        self.ids[line] = k + 1
        base = f"line:{line}"
        return base if k == 0 else f"{base}:{k}"

    def count(self, key: str) -> None:
        self.counts[key] = self.counts.get(key, 0) + 1

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


def _item(st: _State, line: int | None, p: dict, ts: float | None) -> None:
    ptype = p.get("type")
    st.count(f"response_item:{ptype}")
    extra = st.extra(p)
    if ptype == "reasoning":
        texts = [s.get("text") for s in p.get("summary") or [] if isinstance(s, dict)]
        texts += [c.get("text") for c in p.get("content") or [] if isinstance(c, dict)]
        st.pending_reasoning.extend(t for t in texts if isinstance(t, str) and t)
        return
    mid = st.next_id(line)
    if ptype == "message":
        role = p.get("role")
        if role not in _ROLES:
            extra["original_role"], role = role, "user"
        if role == "assistant":
            extra["model"] = st.turn.get("model")
        st.messages.append(make_message(mid, role, _parts_content(p.get("content")), timestamp=ts,
                                        reasoning=st.take_reasoning() if role == "assistant" else None,
                                        extra=extra))
        return
    if ptype in ("function_call", "custom_tool_call", "local_shell_call", "web_search_call"):
        cid = str(p.get("call_id") or p.get("id") or mid)
        if ptype == "function_call":
            name, args = p.get("name") or "", p.get("arguments") if p.get("arguments") is not None else "{}"
        elif ptype == "custom_tool_call":
            name, args = p.get("name") or "", {"input": p.get("input")}
            extra["custom_tool"] = True
        else:
            name, args = ptype.removesuffix("_call"), p.get("action") or {}
        st.tool_names[cid] = name
        extra["model"] = st.turn.get("model")
        st.messages.append(make_message(mid, "assistant", None, timestamp=ts, extra=extra,
                                        tool_calls=[make_tool_call(cid, name, args)],
                                        reasoning=st.take_reasoning()))
        return
    if ptype in ("function_call_output", "custom_tool_call_output", "local_shell_call_output"):
        cid = str(p.get("call_id") or "")
        st.messages.append(make_message(mid, "tool", _parts_content(p.get("output")), timestamp=ts,
                                        tool_call_id=cid or None, name=st.tool_names.get(cid),
                                        extra=extra))
        return
    st.count("unhandled_items")


def parse_records(path: Path, records: Iterable[tuple[int | None, Any]],
                  problems: list[Problem]) -> list[ImportedSession]:
    """Turn ``(line, record)`` pairs of one rollout file into (at most) one session."""
    st = _State()
    for line, rec in records:
        if not looks_like_record(rec):
            problems.append(Problem(str(path), line, "skipped", "not a Codex {timestamp, type, payload} record"))
            continue
        try:
            _record(st, line, rec)
        except (TypeError, AttributeError, ValueError, KeyError, RecursionError) as exc:
            problems.append(Problem(str(path), line, "skipped",
                                    f"unexpected {rec['type']} record shape: {type(exc).__name__}: {exc}"))
    if st.pending_reasoning:  # reasoning with nothing after it: keep it as its own message
        st.messages.append(make_message(st.next_id(None), "assistant", None, reasoning=st.take_reasoning()))
    if st.meta_payload is None and not st.messages:
        return []
    return [_session(path, st, problems)]


def _record(st: _State, line: int | None, rec: dict) -> None:
    rtype, p = rec["type"], rec["payload"]
    if st.first_ts is None:
        st.first_ts = rec.get("timestamp")
    ts = parse_timestamp(rec.get("timestamp"))
    if rtype == "response_item":
        _item(st, line, p, ts)
    elif rtype == "session_meta":
        if st.meta_payload is None:
            st.meta_payload = p
        else:
            st.other_meta.append({"line": line, "id": p.get("id"), "timestamp": p.get("timestamp")})
    elif rtype == "turn_context":
        st.turn = p
        st.count("turns")
        if isinstance(p.get("model"), str) and p["model"] not in st.models:
            st.models.append(p["model"])
    elif rtype == "compacted":
        st.compactions.append({
            "line": line, "timestamp": rec.get("timestamp"), "message": p.get("message"),
            "replacement_history_items": len(p.get("replacement_history") or []),
            **{k: p[k] for k in ("window_number", "window_id", "previous_window_id",
                                 "first_window_id") if k in p}})
    else:
        st.count(f"{rtype}:{p.get('type')}")


def _session(path: Path, st: _State, problems: list[Problem]) -> ImportedSession:
    mp = st.meta_payload or {}
    sid = mp.get("id") or mp.get("session_id")
    sid = sid if isinstance(sid, str) else None
    meta: dict[str, Any] = {"source_file": Path(path).name, "counts": st.counts}
    if not sid:
        sid = Path(path).name
        meta["session_id_synthesized"] = True
        problems.append(Problem(str(path), None, "repaired", "no session_meta id; session id made from file name"))
    for key in _META_KEYS:
        if mp.get(key) is not None:
            meta[key] = mp[key]
    base = mp.get("base_instructions")
    if isinstance(base, dict) and base.get("text"):
        meta["base_instructions"] = base["text"]
    elif isinstance(base, str):
        meta["base_instructions"] = base
    if st.models:
        meta["models"] = st.models
    if st.compactions:
        meta["compactions"] = st.compactions
    if st.other_meta:
        meta["other_session_meta"] = st.other_meta
    session = {"session_id": f"{FORMAT}:{sid}", "source": FORMAT, "title": None,
               "model": st.models[0] if st.models else mp.get("model"), "cwd": mp.get("cwd"),
               "started_at": parse_timestamp(mp.get("timestamp")) or parse_timestamp(st.first_ts),
               "meta": meta}
    return ImportedSession(session=session, messages=st.messages)

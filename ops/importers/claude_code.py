"""Claude Code session records -> Quill sessions.

Input: the records of a Claude Code session JSONL file, or the same records as
a JSON array (the "logs/chat.json" Stop-hook dump). Mapping:

* one message per ``user``/``assistant`` record, in file order (records that
  share ``message.id`` are NOT merged); message id = record ``uuid``;
* a user record made only of ``tool_result`` blocks becomes one ``tool``
  message per block (id = uuid, or uuid + ":" + n when there are several);
* ``thinking`` blocks -> ``reasoning``; ``tool_use`` blocks -> ``tool_calls``
  (arguments = json.dumps(input)); tool messages get ``name`` from the call;
* ``system``, ``progress``, ``file-history-snapshot``, ``queue-operation`` are
  not messages (counted in session meta); ``summary`` records give the title;
* one session per ``sessionId`` ("claude-code:" + sessionId).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Iterable

from .jsonlines import ImportedSession, Problem, join_text, make_message, make_tool_call, parse_timestamp

FORMAT = "claude-code"
RECORD_TYPES = frozenset({"user", "assistant", "system", "summary", "progress",
                          "file-history-snapshot", "queue-operation"})
# top-level record keys that are not copied verbatim into message["extra"]
_HANDLED = frozenset({"type", "message", "sessionId", "timestamp", "cwd", "gitBranch", "version"})


def looks_like_record(obj: Any) -> bool:
    """True for a dict that is plausibly a Claude Code transcript record."""
    if not isinstance(obj, dict) or not isinstance(obj.get("type"), str) or obj["type"] not in RECORD_TYPES:
        return False
    if obj["type"] == "summary":
        return "summary" in obj and "leafUuid" in obj
    if obj["type"] in ("user", "assistant"):
        return isinstance(obj.get("message"), dict) and ("uuid" in obj or "sessionId" in obj)
    return "sessionId" in obj or "uuid" in obj or "messageId" in obj


def _image_part(block: dict) -> dict:
    src = block.get("source") or {}
    if src.get("type") == "base64":
        url = f"data:{src.get('media_type', 'application/octet-stream')};base64,{src.get('data', '')}"
    else:
        url = src.get("url") or src.get("file_id") or ""
    return {"type": "image_url", "image_url": {"url": url}}


def _content(texts: list[str], images: list[dict]) -> Any:
    text = join_text(texts)
    if not images:
        return text
    parts = [{"type": "text", "text": text}] if text else []
    return parts + images


def _tool_result_content(raw: Any) -> Any:
    if isinstance(raw, str) or raw is None:
        return raw
    if not isinstance(raw, list):
        return json.dumps(raw, ensure_ascii=False)
    texts, images = [], []
    for block in raw:
        if not isinstance(block, dict):
            texts.append(str(block))
        elif block.get("type") == "text":
            texts.append(block.get("text") or "")
        elif block.get("type") == "image":
            images.append(_image_part(block))
        else:
            texts.append(json.dumps(block, ensure_ascii=False))
    return _content(texts, images)


class _Session:
    """Accumulates one sessionId's records (instance state only)."""

    def __init__(self, sid: str, fallback: bool) -> None:
        self.sid, self.fallback = sid, fallback
        self.messages: list[dict] = []
        self.uuids: set[str] = set()
        self.counts: dict[str, int] = {}
        self.first: dict[str, Any] = {}
        self.versions: list[str] = []
        self.compactions: list[dict] = []
        self.tool_names: dict[str, str] = {}
        self.started: float | None = None
        self.seen: dict[str, list[str]] = {}

    def note(self, rec: dict) -> None:
        self.counts[rec.get("type")] = self.counts.get(rec.get("type"), 0) + 1
        if isinstance(rec.get("uuid"), str):
            self.uuids.add(rec["uuid"])
        for key in ("cwd", "gitBranch", "version"):
            if rec.get(key) and key not in self.first:
                self.first[key] = rec[key]
        ts = parse_timestamp(rec.get("timestamp"))
        if ts is not None and (self.started is None or ts < self.started):
            self.started = ts
        ver = rec.get("version")
        if ver and ver not in self.versions:
            self.versions.append(ver)
        msg = rec.get("message")
        model = msg.get("model") if isinstance(msg, dict) and rec.get("type") == "assistant" else None
        if isinstance(model, str) and model != "<synthetic>" and "model" not in self.first:
            self.first["model"] = model
        if rec.get("type") == "system" and rec.get("subtype") == "compact_boundary":
            self.compactions.append({k: rec.get(k) for k in (
                "uuid", "logicalParentUuid", "timestamp", "compactMetadata") if rec.get(k) is not None})

    def dedupe(self, mid: str, msg: dict, path: Path, line: int | None,
               problems: list[Problem]) -> str | None:
        """Resumed sessions re-write records under the same uuid: drop exact repeats."""
        digest = hashlib.sha1(json.dumps([msg.get("role"), msg.get("content")], sort_keys=True,
                                         default=str).encode("utf-8", "replace")).hexdigest()
        if mid not in self.seen:
            self.seen[mid] = [digest]
            return mid
        where = f"record uuid {mid} repeated (a resumed session re-wrote it)"
        if digest in self.seen[mid]:
            problems.append(Problem(str(path), line, "skipped", f"{where}; same content, later copy dropped"))
            return None
        self.seen[mid].append(digest)
        problems.append(Problem(str(path), line, "repaired", f"{where} with different content; kept as a new id"))
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


def _assistant(sess: _Session, rec: dict, msg: dict, mid: str, ts: float | None) -> dict:
    raw = msg.get("content")
    texts, images, thinking, calls, sigs, other = [], [], [], [], [], []
    for block in raw if isinstance(raw, list) else []:
        btype = block.get("type") if isinstance(block, dict) else None
        if btype == "text":
            texts.append(block.get("text") or "")
        elif btype == "thinking":
            thinking.append(block.get("thinking") or "")
            if block.get("signature"):
                sigs.append(block["signature"])
        elif btype in ("tool_use", "server_tool_use"):
            cid = str(block.get("id") or f"{mid}:call:{len(calls)}")
            sess.tool_names[cid] = block.get("name") or ""
            calls.append(make_tool_call(cid, block.get("name") or "", block.get("input") or {}))
        elif btype == "image":
            images.append(_image_part(block))
        else:
            other.append(block)
    if isinstance(raw, str):
        texts.append(raw)
    extra = sess.extra(rec, msg)
    if sigs:
        extra["thinking_signatures"] = sigs
    if other:
        extra["other_blocks"] = other
    return make_message(mid, "assistant", _content(texts, images), tool_calls=calls,
                        reasoning=join_text(thinking), timestamp=ts, extra=extra)


def _user(sess: _Session, rec: dict, msg: dict, mid: str, ts: float | None) -> list[dict]:
    raw = msg.get("content")
    if not isinstance(raw, list):
        text = raw if isinstance(raw, str) else (None if raw is None else json.dumps(raw))
        return [make_message(mid, "user", text, timestamp=ts, extra=sess.extra(rec, msg))]
    results = [b for b in raw if isinstance(b, dict) and b.get("type") == "tool_result"]
    rest = [b for b in raw if not (isinstance(b, dict) and b.get("type") == "tool_result")]
    out: list[dict] = []
    if rest or not results:
        texts, images = [], []
        for block in rest:
            btype = block.get("type") if isinstance(block, dict) else None
            if btype == "text":
                texts.append(block.get("text") or "")
            elif btype == "image":
                images.append(_image_part(block))
            else:
                texts.append(block if isinstance(block, str) else json.dumps(block, ensure_ascii=False))
        out.append(make_message(mid, "user", _content(texts, images), timestamp=ts,
                                extra=sess.extra(rec, msg)))
    several = len(results) > 1 or bool(out)
    for n, block in enumerate(results):
        cid = str(block.get("tool_use_id") or "")
        extra = sess.extra(rec, msg) if n == 0 else {"uuid": rec.get("uuid"), "parentUuid": rec.get("parentUuid")}
        if "is_error" in block:
            extra["is_error"] = block["is_error"]
        out.append(make_message(f"{mid}:{n}" if several else mid, "tool",
                                _tool_result_content(block.get("content")), tool_call_id=cid or None,
                                name=sess.tool_names.get(cid), timestamp=ts, extra=extra))
    return out


def _record(path: Path, rec: dict, line: int | None, ordinal: int, sessions: dict[str, _Session],
            current: _Session | None, early: list[dict], problems: list[Problem]) -> _Session | None:
    """Handle one non-summary record; returns the session now current."""
    rtype = rec["type"]
    sid = rec.get("sessionId")
    if isinstance(sid, str) and sid:
        current = sessions.setdefault(sid, _Session(sid, False))
    elif current is None and rtype not in ("user", "assistant"):
        early.append(rec)  # e.g. a file-history-snapshot before the first message
        return current
    elif current is None:
        current = sessions.setdefault("", _Session(Path(path).name, True))
    sess = current
    for pending in early:
        sess.note(pending)
    early.clear()
    sess.note(rec)
    if rtype not in ("user", "assistant"):
        return current
    msg = rec.get("message")
    if not isinstance(msg, dict):
        problems.append(Problem(str(path), line, "skipped", f"{rtype} record without a 'message' object"))
        return current
    mid = str(rec.get("uuid") or f"record:{ordinal}")
    mid = sess.dedupe(mid, msg, path, line, problems)
    if mid is None:
        return current
    ts = parse_timestamp(rec.get("timestamp"))
    if rtype == "assistant":
        sess.messages.append(_assistant(sess, rec, msg, mid, ts))
    else:
        sess.messages.extend(_user(sess, rec, msg, mid, ts))
    return current


def parse_records(path: Path, records: Iterable[tuple[int | None, Any]],
                  problems: list[Problem], variant: str) -> list[ImportedSession]:
    """Turn ``(line, record)`` pairs into sessions (one per sessionId, first-seen order)."""
    sessions: dict[str, _Session] = {}
    summaries: list[dict] = []
    current: _Session | None = None
    early: list[dict] = []
    for ordinal, (line, rec) in enumerate(records):
        if not isinstance(rec, dict) or not isinstance(rec.get("type"), str):
            problems.append(Problem(str(path), line, "skipped", "record is not an object with a 'type'"))
            continue
        rtype = rec["type"]
        if rtype == "summary":
            leaf = rec.get("leafUuid") if isinstance(rec.get("leafUuid"), str) else None
            summaries.append({"summary": rec.get("summary"), "leafUuid": leaf, "line": line})
            continue
        try:
            current = _record(path, rec, line, ordinal, sessions, current, early, problems)
        except (TypeError, AttributeError, ValueError, KeyError, RecursionError) as exc:
            problems.append(Problem(str(path), line, "skipped",
                                    f"unexpected {rtype} record shape: {type(exc).__name__}: {exc}"))
    return [_finish(path, s, summaries, len(sessions), variant) for s in sessions.values()]


def _finish(path: Path, s: _Session, summaries: list[dict], n_sessions: int, variant: str) -> ImportedSession:
    mine = [x for x in summaries if x.get("leafUuid") in s.uuids]
    if not mine and n_sessions == 1:
        mine = summaries
    meta: dict[str, Any] = {"source_file": Path(path).name, "variant": variant,
                            "record_counts": dict(s.counts)}
    if s.first.get("gitBranch"):
        meta["git_branch"] = s.first["gitBranch"]
    if s.versions:
        meta["cli_version"] = s.versions[0]
        if len(s.versions) > 1:
            meta["cli_versions"] = s.versions
    if mine:
        meta["summaries"] = mine
    if s.compactions:
        meta["compactions"] = s.compactions
    if s.fallback:
        meta["session_id_synthesized"] = True
    title = next((x["summary"] for x in reversed(mine) if isinstance(x.get("summary"), str)), None)
    session = {"session_id": f"{FORMAT}:{s.sid}", "source": FORMAT, "title": title,
               "model": s.first.get("model"), "cwd": s.first.get("cwd"),
               "started_at": s.started, "meta": meta}
    return ImportedSession(session=session, messages=s.messages)

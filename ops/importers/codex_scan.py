"""Pass 1 over a Codex rollout: record types, the session meta, turn models, thread names
and compactions, never message content (``Scan``), and the session they give
(``session_of``: id, title, model, cwd, start, ``meta``). ``ops/importers/codex.py`` has the
mapping in its module doc.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from quill.ops.importers.codex_items import FORMAT, ITEM_TYPES
from quill.ops.importers.jsonlines import Problem, content_session_id, parse_timestamp

RECORD_TYPES = frozenset(
    {"session_meta", "response_item", "event_msg", "turn_context", "compacted", "state"}
)
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


class Scan:
    """Pass 1: the session meta, models, title, counts and compactions (no content)."""

    def __init__(self) -> None:
        self.meta_payload: dict | None = None
        self.first_ts: Any = None
        # hashed into the id of a file without session_meta id
        self.first_record: dict | None = None
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
        elif rtype == "state":  # pre-envelope {"record_type": "state"}: bookkeeping
            self.count("state")
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


def session_of(path: Path, scan: Scan, problems: list[Problem]) -> dict:
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

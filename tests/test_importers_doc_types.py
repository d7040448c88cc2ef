"""docs/importers.md names every record type the real corpus files hold, per format.

The corpus (``../shared/corpus``, read only) is counted here the way an importer sees it —
Claude Code record types (with ``system`` subtypes, ``progress`` data types, ``attachment``
types), content blocks and record flags; Codex record and payload types; Copilot event
types; Gemini entry types; ShareGPT turn senders; OpenHands actions and observations;
SWE-agent ``history`` roles — and each must appear in the doc as code (``\\`name\\```), so a
record type that reaches a real file is never left undocumented (what Quill does with it)."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
from conftest import CORPUS, REPO

pytestmark = pytest.mark.corpus


def _lines(path: Path):
    """Every JSON object of a JSON-lines file (two objects glued on one line included)."""
    dec = json.JSONDecoder()
    for line in path.read_text(encoding="utf-8").splitlines():
        s, i = line.strip(), 0
        while i < len(s):
            try:
                obj, i = dec.raw_decode(s, i)
            except ValueError:
                break
            yield obj
            while i < len(s) and s[i].isspace():
                i += 1


def _claude(root: Path) -> Counter:
    out: Counter = Counter()
    for p in sorted((root / "claude-code").iterdir()):
        records = json.loads(p.read_text()) if p.suffix == ".json" else _lines(p)
        for r in records:
            kind = r.get("type")
            out[kind] += 1
            sub = {"system": "subtype", "progress": "data", "attachment": "attachment"}.get(kind)
            if sub == "subtype" and r.get("subtype"):
                out[r["subtype"]] += 1
            elif sub and isinstance(r.get(sub), dict):
                out[r[sub].get("type")] += 1
            msg = r.get("message")
            if isinstance(msg, dict) and isinstance(msg.get("content"), list):
                out.update(b.get("type") for b in msg["content"] if isinstance(b, dict))
            if kind in ("user", "assistant"):  # the flags that change what a message is
                out.update(k for k in r if k.startswith("is") or k == "toolUseResult")
    return out


def _codex(root: Path) -> Counter:
    out: Counter = Counter()
    for p in sorted((root / "codex").iterdir()):
        for r in _lines(p):
            out[r.get("type")] += 1
            if r.get("type") in ("response_item", "event_msg"):
                out[(r.get("payload") or {}).get("type")] += 1
    return out


def _others(root: Path) -> dict[str, Counter]:
    other = root / "other"
    out: dict[str, Counter] = {}
    out["copilot"] = Counter(r.get("type") for p in other.glob("*copilot*") for r in _lines(p))
    out["gemini"] = Counter(
        m.get("type") for p in other.glob("*gemini*") for m in json.loads(p.read_text())["messages"]
    )
    out["sharegpt"] = Counter(
        t.get("from")
        for p in (root / "sharegpt").iterdir()
        for r in _lines(p)
        for t in r.get("conversations", [])
    )
    events: Counter = Counter()
    for p in other.glob("openhands*"):
        docs = [json.loads(p.read_text())] if p.suffix == ".json" else list(_lines(p))
        for d in docs:
            for e in d if isinstance(d, list) else d.get("history", [d]):
                events[e.get("action") or e.get("observation")] += 1
    out["openhands"] = events
    out["swe-agent"] = Counter(
        m.get("role") for p in other.glob("*.traj") for m in json.loads(p.read_text())["history"]
    )
    return out


def test_every_record_type_of_the_real_files_is_named_in_the_importers_doc():
    root = Path(CORPUS)
    if not (root / "claude-code").is_dir():
        pytest.skip("no corpus")
    doc = (Path(REPO) / "docs" / "importers.md").read_text(encoding="utf-8")
    named = set(re.findall(r"`([^`\n]+)`", doc))
    words = {w for n in named for w in re.split(r"[\s{}\[\],:=()]+", n) if w}
    counts = {"claude-code": _claude(root), "codex": _codex(root), **_others(root)}
    missing = {
        fmt: sorted(str(k) for k in c if k is not None and k not in named and k not in words)
        for fmt, c in counts.items()
    }
    assert not any(missing.values()), missing
    # the counts are real: each format's table was drawn from files that hold these types
    assert counts["claude-code"]["tool_use"] == 715 and counts["codex"]["function_call"] == 473

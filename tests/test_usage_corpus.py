"""Usage over the real corpus: Quill's totals per source equal an independent per-response sum
read straight from the transcript files, and a re-import counts nothing twice."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest
from conftest import CORPUS

from quill.ops.importers import iter_transcript_files, parse_file


def _independent_sums() -> dict[str, dict[str, int]]:
    """Per source, input/output tokens summed once per API response, straight from the files:
    Claude Code = the largest usage seen per ``message.id`` (records repeat and grow it);
    Codex = the last ``total_token_usage`` of each rollout (Codex's own running total)."""
    out: dict[str, dict[str, int]] = {"claude-code": defaultdict(int), "codex": defaultdict(int)}
    per_response: dict[str, tuple[int, int]] = {}
    for path in sorted((CORPUS / "claude-code").iterdir()):
        text = path.read_text(encoding="utf-8")
        records = (
            json.loads(text)
            if path.suffix == ".json"
            else [
                json.loads(line)
                for line in text.splitlines()
                if line.strip().startswith("{") and _ok(line)
            ]
        )
        for rec in records:
            msg = (
                rec.get("message")
                if isinstance(rec, dict) and rec.get("type") == "assistant"
                else None
            )
            if not isinstance(msg, dict) or not isinstance(msg.get("usage"), dict):
                continue
            u = msg["usage"]
            inp = (
                (u.get("input_tokens") or 0)
                + (u.get("cache_read_input_tokens") or 0)
                + (u.get("cache_creation_input_tokens") or 0)
            )
            seen = per_response.get(msg["id"], (0, 0))
            per_response[msg["id"]] = (max(seen[0], inp), max(seen[1], u.get("output_tokens") or 0))
    out["claude-code"]["input_tokens"] = sum(v[0] for v in per_response.values())
    out["claude-code"]["output_tokens"] = sum(v[1] for v in per_response.values())
    for path in sorted((CORPUS / "codex").iterdir()):
        last = None
        for line in path.read_text(encoding="utf-8").splitlines():
            if '"token_count"' in line and _ok(line):
                info = json.loads(line)["payload"].get("info")
                if info:
                    last = info["total_token_usage"]
        if last:
            out["codex"]["input_tokens"] += last["input_tokens"]
            out["codex"]["output_tokens"] += last["output_tokens"]
    return out


def _ok(line: str) -> bool:
    try:
        json.loads(line)
        return True
    except ValueError:
        return False


@pytest.mark.corpus
def test_corpus_usage_totals_equal_an_independent_per_response_sum(quill):
    quill.run("import", str(CORPUS / "claude-code"), str(CORPUS / "codex"))
    quill.drain()
    assert quill.status()["spool"]["quarantined"] == 0
    got = {r["source"]: r for r in quill.json("usage", "--by", "source")["usage"]}
    want = _independent_sums()
    for source in ("claude-code", "codex"):
        assert (got[source]["input_tokens"], got[source]["output_tokens"]) == (
            want[source]["input_tokens"],
            want[source]["output_tokens"],
        ), source
        assert got[source]["cost_usd"] > 0
    # a naive sum over records would have counted Claude Code's repeated usage again
    naive = 0
    for path in iter_transcript_files([CORPUS / "claude-code"]):
        for s in parse_file(path).sessions:
            naive += sum(
                m["extra"]["usage"].get("output_tokens", 0)
                for m in s.messages
                if "usage" in (m.get("extra") or {})
            )
    assert naive > got["claude-code"]["output_tokens"]
    # re-importing counts nothing twice
    quill.run("import", str(CORPUS / "claude-code"), str(CORPUS / "codex"))
    quill.drain()
    assert {
        r["source"]: r["input_tokens"] for r in quill.json("usage", "--by", "source")["usage"]
    } == {k: v["input_tokens"] for k, v in got.items()}

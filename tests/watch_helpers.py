"""Helpers of the live-capture tests (tests/test_watch.py) and bench/watch_lag.py: agents
writing transcripts as real processes, a data dir whose watcher follows temp folders, the
stored rows."""

from __future__ import annotations

import copy
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

from quill.store import packed

#: An agent process: ``python -c AGENT PLAN DELAY`` runs the steps pickled in PLAN, ``DELAY``
#: seconds apart, each as an agent writes its transcript: ``("append", dst, bytes)`` (one
#: unbuffered write at the end), ``("replace", dst, bytes)`` (a new file renamed over the path,
#: as Claude Code rewrites a session it resumes), ``("rewrite", dst, bytes)`` (truncated and
#: written in place, as Gemini CLI writes its ``.json`` sessions), ``("delete", dst, None)``,
#: ``("wait", gate, None)`` (no write: wait until file ``gate`` exists, at most ``GATE_S``
#: seconds, else exit 3; a test opens the gate once it did what this point waits for).
AGENT = r"""
import os, pickle, sys, time
steps = pickle.load(open(sys.argv[1], "rb"))
delay, gate_s = float(sys.argv[2]), float(sys.argv[3])
for op, dst, data in steps:
    if op == "wait":
        deadline = time.monotonic() + gate_s
        while not os.path.exists(dst):
            if time.monotonic() > deadline:
                sys.exit(3)
            time.sleep(0.02)
        continue
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    if op == "append":
        with open(dst, "ab", buffering=0) as f:
            f.write(data)
    elif op == "replace":
        with open(dst + ".resume.tmp", "wb") as f:
            f.write(data)
        os.replace(dst + ".resume.tmp", dst)
    elif op == "rewrite":
        with open(dst, "wb") as f:
            f.write(data)
    elif op == "delete":
        os.unlink(dst)
    time.sleep(delay)
"""


#: Longest wait (s) of an agent process at a gate (``AGENT``'s ``wait`` steps).
GATE_S = 600.0


def start_agent(plan: Path, steps: list[tuple[str, str, bytes | None]], delay: float):
    """An agent process running ``steps`` (see ``AGENT``), pickled to ``plan``."""
    import pickle

    plan.write_bytes(pickle.dumps(steps))
    return subprocess.Popen([sys.executable, "-c", AGENT, str(plan), str(delay), str(GATE_S)])


def gated(steps: list, gates: list[Path]) -> list:
    """``steps`` with a ``wait`` step for each of ``gates`` (see ``AGENT``), splitting them
    into ``len(gates) + 1`` parts of about equal length: the agent writes part ``n`` only once
    gate ``n`` is open."""
    out, n = [], len(gates) + 1
    for i, gate in enumerate(gates, 1):
        out += steps[len(steps) * (i - 1) // n : len(steps) * i // n] + [("wait", str(gate), None)]
    return out + steps[len(steps) * (n - 1) // n :]


def interleave(*plans: list) -> list:
    """The steps of several agents round-robin, as agents running side by side write."""
    out, n = [], max(len(p) for p in plans)
    for i in range(n):
        out += [p[i] for p in plans if i < len(p)]
    return out


def watch_config(home: Path, roots: list[Path], rescan_s: float = 1.0) -> None:
    """Write ``home``'s config.toml: the watcher follows ``roots`` only."""
    home.mkdir(parents=True, exist_ok=True)
    listed = ", ".join(json.dumps(str(r)) for r in roots)
    (home / "config.toml").write_text(
        f"[watch]\ndefault_roots = false\nroots = [{listed}]\nrescan_s = {rescan_s}\n"
    )


def stored_rows(home: Path) -> list[tuple]:
    """Every message row of ``home``'s store as ``(session, ext_id, role, content, state)``,
    sorted (a multiset: a message stored twice appears twice)."""
    conn = sqlite3.connect(f"file:{home / 'state.db'}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT session_id, ext_id, role, coalesce(content, ''), state FROM messages"
        ).fetchall()
    finally:
        conn.close()
    return sorted((*r[:3], packed.unpack(r[3]), r[4]) for r in rows)  # the CLI sees packed texts


def usage_count(home: Path) -> int:
    """Usage records stored in ``home``'s store."""
    conn = sqlite3.connect(f"file:{home / 'state.db'}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT count(*) FROM usage").fetchone()[0]
    finally:
        conn.close()


def row_diff(got: list[tuple], expected: list[tuple]) -> list[str]:
    """Rows stored more often than ``expected`` holds them (``+``) or less (``-``), for an
    assertion message (content cut to 60 characters)."""
    from collections import Counter

    a, b = Counter(got), Counter(expected)
    out = [f"+ {r[:3]} {r[3][:60]!r} {r[4]}" for r in (a - b).elements()]
    return out + [f"- {r[:3]} {r[3][:60]!r} {r[4]}" for r in (b - a).elements()]


_COLUMNS = (
    "session_id, ext_id, role, coalesce(content, ''), parts, tool_calls, tool_call_id, "
    "tool_name, reasoning, finish_reason, {ts}, extra, state"
)


def stored_full(home: Path, *, ts: bool = True) -> dict[str, list]:
    """Every stored message (all columns a copy can change, and its state), session and usage
    row of ``home``'s store, sorted (multisets). ``ts`` False leaves out message and start
    times (a format without them is stored at its arrival, which differs between stores)."""
    conn = sqlite3.connect(f"file:{home / 'state.db'}?mode=ro", uri=True)
    try:
        cols = _COLUMNS.format(ts="ts" if ts else "NULL")
        return {
            # the text, not its stored form (``[store] pack_min_bytes``: store/packed.py)
            "messages": sorted(
                (*r[:3], packed.unpack(r[3]), *r[4:])
                for r in conn.execute(f"SELECT {cols} FROM messages")
            ),
            "sessions": sorted(
                conn.execute(
                    f"SELECT id, title, model, {'started_at' if ts else 'NULL'}, parent_id, "
                    "parent_kind, meta FROM sessions"
                )
            ),
            "usage": sorted(
                conn.execute(
                    "SELECT session_id, response_id, input_tokens, output_tokens FROM usage"
                )
            ),
        }
    finally:
        conn.close()


def same_stores(got: dict, want: dict) -> None:
    """Assert two ``stored_full`` results are equal, kind by kind (messages first), naming a
    few rows stored that should not be and rows expected that are not."""
    for kind in ("messages", "usage", "sessions"):
        extra = sorted(set(got[kind]) - set(want[kind]))
        missing = sorted(set(want[kind]) - set(got[kind]))
        assert got[kind] == want[kind], f"{kind}: stored {extra[:3]}, expected {missing[:3]}"


def gemini_json_rewrites(src: Path, path: Path) -> list[tuple[str, Path, bytes]]:
    """The session document ``src`` written to ``path`` as Gemini CLI writes its ``.json``
    sessions, rewritten in place: each model turn first with no tool calls and no tokens,
    then its calls ``executing`` (no result) with its tokens, then whole."""
    doc = json.loads(src.read_text())
    out = []
    for i, entry in enumerate(doc["messages"]):
        before = doc["messages"][:i]
        if entry["type"] == "gemini" and entry.get("toolCalls"):
            bare = {k: v for k, v in entry.items() if k not in ("toolCalls", "tokens")}
            running = copy.deepcopy(entry)
            for call in running["toolCalls"]:
                call["status"] = "executing"
                for key in ("result", "resultDisplay"):
                    call.pop(key, None)
            for partial in (bare, running):
                data = json.dumps({**doc, "messages": [*before, partial]}).encode()
                out.append(("rewrite", path, data))
        out.append(("rewrite", path, json.dumps({**doc, "messages": before + [entry]}).encode()))
    return out

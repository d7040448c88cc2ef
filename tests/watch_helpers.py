"""Helpers of the live-capture tests (tests/test_watch.py) and bench/watch_lag.py: agent
writers as real processes, a data dir whose watcher follows temp folders, the stored rows."""

from __future__ import annotations

import copy
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

from quill.store import packed

#: A writer process: ``python -c WRITER DELAY SRC DST [SRC DST ...]`` appends the lines of each
#: SRC to its DST one line at a time (flushed, round-robin over the files, ``DELAY`` seconds
#: between lines), as an agent appends its transcript.
WRITER = r"""
import sys, time
delay = float(sys.argv[1])
pairs = list(zip(sys.argv[2::2], sys.argv[3::2]))
sources = [open(s, "rb").readlines() for s, _ in pairs]
outs = [open(d, "ab", buffering=0) for _, d in pairs]
i = 0
while any(i < len(lines) for lines in sources):
    for lines, out in zip(sources, outs):
        if i < len(lines):
            out.write(lines[i])
    i += 1
    time.sleep(delay)
"""


def start_writer(pairs: list[tuple[Path, Path]], delay: float) -> subprocess.Popen:
    """A writer process appending each source file to its destination line by line."""
    argv = [sys.executable, "-c", WRITER, str(delay)]
    for src, dst in pairs:
        dst.parent.mkdir(parents=True, exist_ok=True)
        argv += [str(src), str(dst)]
    return subprocess.Popen(argv)


#: An agent process: ``python -c AGENT PLAN DELAY`` runs the steps pickled in PLAN, ``DELAY``
#: seconds apart, each as an agent writes its transcript: ``("append", dst, bytes)`` (one
#: unbuffered write at the end), ``("replace", dst, bytes)`` (a new file renamed over the path,
#: as Claude Code rewrites a session it resumes), ``("rewrite", dst, bytes)`` (truncated and
#: written in place, as Gemini CLI writes its ``.json`` sessions), ``("delete", dst, None)``.
AGENT = r"""
import os, pickle, sys, time
steps = pickle.load(open(sys.argv[1], "rb"))
delay = float(sys.argv[2])
for op, dst, data in steps:
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


def start_agent(plan: Path, steps: list[tuple[str, str, bytes | None]], delay: float):
    """An agent process running ``steps`` (see ``AGENT``), pickled to ``plan``."""
    import pickle

    plan.write_bytes(pickle.dumps(steps))
    return subprocess.Popen([sys.executable, "-c", AGENT, str(plan), str(delay)])


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

"""Live capture (``quill watch``, the fleet's ``watch`` worker): agent folders followed as
agents write them, every message stored exactly once through kill -9 of the watcher at any
point, files rewritten, truncated, renamed or deleted, and what ``quill status`` says.

Every check compares with a direct ``quill import`` of the final files into a fresh data dir
(the same importers, so the same rows), never with counts the watcher reports about itself.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
from conftest import CORPUS, QuillCLI, quill_env, stop_fleet
from gemini_log_helpers import MAIN, PROJECT, SID, SUB
from watch_helpers import (
    gated,
    gemini_json_rewrites,
    interleave,
    row_diff,
    same_stores,
    start_agent,
    stored_full,
    stored_rows,
    usage_count,
    watch_config,
)

pytestmark = pytest.mark.corpus

CLAUDE = sorted((CORPUS / "claude-code").glob("*.jsonl"))
CODEX = sorted((CORPUS / "codex").glob("*.jsonl"))
GEMINI_JSON = (
    CORPUS / "other" / "entireio-cli__gemini-cli-session-f7633853-6663-4dbb-bbf4-6159afa29df8.json"
)


def watch_seed() -> int:
    """The kill schedule's seed: ``WATCH_SEED`` when set, else the time; printed, so a
    failing run's captured output names the seed that replays it."""
    seed = int(os.environ.get("WATCH_SEED", time.time()))
    print(f"WATCH_SEED={seed}")
    return seed


#: A torn write's prefix names its batch once it reached the ``producer`` member.
_TORN_BATCH = re.compile(r'^\{"v":1,"op":"[^"]*","batch":"([^"]*)","producer"')


def no_quarantine_but_torn_writes(home: Path) -> list[str]:
    """The records the writer set aside, but for torn writes of records stored whole.

    A watcher SIGKILLed inside the ``write()`` of a multi-page record leaves a strict prefix
    of it (the kernel stops a write at a page boundary for a fatal signal): never
    acknowledged, so the watcher's mark was not saved and the next watcher spools the record
    whole again, with the same batch id; the writer quarantines the prefix as ``torn-write``
    (``spool.torn``). Such an entry is expected; one whose batch id (when its prefix holds
    it) was never applied, or any other reason, is a record set aside that should not be."""
    from quill.spool import TORN_WRITE, Quarantine

    conn = sqlite3.connect(f"file:{home / 'state.db'}?mode=ro", uri=True)
    try:
        applied = {b for (b,) in conn.execute("SELECT batch_id FROM applied_batches")}
    finally:
        conn.close()
    out = []
    for e in Quarantine(home / "spool").entries():
        named = _TORN_BATCH.match(e["raw"])
        if e["reason"] != TORN_WRITE or (named and named.group(1) not in applied):
            out.append(f"{e['id']} {e['reason']}: {e['detail']}: {e['raw'][:600]}")
    return out


def direct_import(tmp: Path, files: list[Path]) -> tuple[list[tuple], int]:
    """The rows and usage count a plain ``quill import`` of ``files`` stores."""
    ref = QuillCLI(tmp / "reference")
    ref.run("import", *map(str, files))
    ref.drain()
    return stored_rows(ref.home), usage_count(ref.home)


def drained(quill: QuillCLI, *, files: int | None = None, timeout: float = 120) -> dict:
    """Wait until the running fleet's watcher has nothing pending (following ``files`` files
    when given) and the writer has applied and indexed the spool; the status document."""
    deadline = time.monotonic() + timeout
    while True:
        st = json.loads(quill.run("status", "--json", check=False).stdout)
        w, store = st["watch"], st["store"] or {}
        if (
            w["pending"] == 0
            and (files is None or w["files"] == files)
            and st["spool"]["pending_bytes"] == 0
            and store.get("fts_pending", 1) == 0
            and (w.get("watcher") or {}).get("alive")
        ):
            return st
        assert time.monotonic() < deadline, f"not caught up: {w}, spool {st['spool']}"
        time.sleep(0.5)


def watcher_pid(home: Path) -> int | None:
    from quill.home import RunDir

    holder = RunDir(home.resolve()).lease_holder("watch")
    return holder["pid"] if holder else None


def _lines(data: bytes) -> list[bytes]:
    return data.splitlines(keepends=True)


def _agent_plans(agents: Path) -> list[list[tuple[str, str, bytes | None]]]:
    """Real corpus sessions written the agents' own ways, as two agent processes' steps:
    Claude Code and Codex appending line by line; a Claude Code session resumed halfway (a
    rewrite renamed over the file, then appended to); a Gemini CLI line log that re-appends
    messages whole, checkpoints and rewinds (``gemini_log_helpers``, the CLI's writer rules)
    with its subagent log; a Gemini CLI ``.json`` session rewritten in place as it grows."""
    claude, codex = agents / "claude" / "proj", agents / "codex" / "2026" / "12"
    chats = agents / "gemini" / PROJECT / "chats"

    def appended(src: Path | bytes, dst: Path) -> list:
        data = src if isinstance(src, bytes) else src.read_bytes()
        return [("append", str(dst), line) for line in _lines(data)]

    resumed_src = _lines(CLAUDE[5].read_bytes())
    half = len(resumed_src) // 2
    resumed = claude / CLAUDE[5].name
    resume = [
        *appended(b"".join(resumed_src[:half]), resumed),
        ("replace", str(resumed), b"".join(resumed_src[: half + half // 2])),
        *appended(b"".join(resumed_src[half + half // 2 :]), resumed),
    ]
    doc_dst = chats / GEMINI_JSON.name.split("__", 1)[1]
    rewritten = [(how, str(p), data) for how, p, data in gemini_json_rewrites(GEMINI_JSON, doc_dst)]
    jsonl = lambda recs: "".join(json.dumps(r) + "\n" for r in recs).encode()  # noqa: E731
    log = appended(jsonl(MAIN), chats / f"session-2026-05-03T16-00-{SID[:8]}.jsonl")
    sub = appended(jsonl(SUB), chats / SID / "sub-1.jsonl")
    return [
        interleave(
            appended(CLAUDE[0], claude / CLAUDE[0].name), appended(CODEX[0], codex / CODEX[0].name)
        ),
        interleave(resume, log, sub, rewritten),
    ]


def _final(plans: list[list]) -> dict[str, bytes]:
    """Each written file's bytes once every step ran."""
    out: dict[str, bytes] = {}
    for op, dst, data in (step for plan in plans for step in plan):
        if op != "wait":
            out[dst] = out.get(dst, b"") + data if op == "append" else data
    return out


#: SIGKILLs of the fleet's watcher while agents write (a fifth within 60 s would be a crash
#: loop, which the supervisor slows down on purpose).
KILLS = 3


def kill_watcher_while(home: Path, plans: list[list], delays: list[float], rng, tmp: Path) -> int:
    """Run an agent process per plan (``delays[i]`` s between its steps) and SIGKILL the
    fleet's watcher ``KILLS`` times while they write: each kill comes at a random point
    (0.5-2.5 s) once a new watcher holds the lease, and the agents wait at a gate before each
    next part of their plans until it came (``watch_helpers.gated``), so every kill lands
    between the agents' first and last steps however slowly a loaded machine restarts the
    watcher. Waits for every agent to exit 0; returns the kills made."""
    gates = [tmp / f"gate-{n}" for n in range(1, KILLS + 1)]
    agents = [
        start_agent(tmp / f"plan{i}", gated(plan, gates), delay)
        for i, (plan, delay) in enumerate(zip(plans, delays))
    ]
    killed: set[int] = set()
    try:
        for gate in gates:
            deadline = time.monotonic() + 120
            # a new watcher: the killed one may linger as a zombie until the supervisor reaps it
            while (pid := watcher_pid(home)) is None or pid in killed:
                assert all(a.poll() in (None, 0) for a in agents), "an agent process failed"
                assert time.monotonic() < deadline, "no new watcher within 120 s"
                time.sleep(0.05)
            time.sleep(rng.uniform(0.5, 2.5))
            os.kill(pid, signal.SIGKILL)
            killed.add(pid)
            gate.touch()
    finally:
        for gate in gates:  # a failed wait above must not leave the agents waiting
            gate.touch()
    for a in agents:
        assert a.wait(timeout=300) == 0
    return len(killed)


def test_fleet_watch_exactly_once_through_kill9_and_after_delete(tmp_path, quill):
    """Writers append real Claude Code and Codex files line by line while the fleet's watcher
    is SIGKILLed at random points; every message ends up stored exactly once (as a direct
    import stores it), the watched files are byte-identical to what the agents wrote, and
    the sessions stay after the agents delete their files."""
    rng = random.Random(watch_seed())
    agents = tmp_path / "agents"
    claude, codex = agents / "claude" / "proj", agents / "codex" / "2026" / "12"
    sources = [CLAUDE[3], CLAUDE[5], CLAUDE[7], CODEX[1]]
    pairs = [(s, (codex if s in CODEX else claude) / s.name) for s in sources]
    # two agents, each appending two files line by line, round-robin
    plans = [
        interleave(*([("append", str(d), line) for line in _lines(s.read_bytes())] for s, d in two))
        for two in (pairs[:2], pairs[2:])
    ]
    watch_config(quill.home, [agents / "claude", agents / "codex"], rescan_s=1.0)
    fleet = quill.start_fleet()
    kills = 0
    try:
        kills = kill_watcher_while(quill.home, plans, [0.01, 0.01], rng, tmp_path)
        drained(quill, files=len(pairs))
        for src, dst in pairs:  # the watcher changed nothing in the watched folders
            assert dst.read_bytes() == src.read_bytes()
        expected_rows, expected_usage = direct_import(tmp_path, [d for _s, d in pairs])
        for _src, dst in pairs:  # the agents delete their sessions
            dst.unlink()
        st = drained(quill, files=0)
        assert st["watch"]["unreadable"] == []
    finally:
        assert stop_fleet(fleet) == 0
    assert kills == KILLS
    rows = stored_rows(quill.home)
    assert len(expected_rows) > 100
    assert rows == expected_rows, row_diff(rows, expected_rows)
    assert no_quarantine_but_torn_writes(quill.home) == []
    assert usage_count(quill.home) == expected_usage


def test_fleet_watch_agents_own_ways_through_kill9_and_after_delete(tmp_path, quill):
    """Agent processes write real sessions the agents' own ways (append line by line, a
    rewrite renamed over the file on resume, Gemini's re-appended messages, checkpoints and
    rewinds, a session document rewritten in place) while the fleet's watcher is SIGKILLed at
    random points; every message ends up stored exactly once (as a direct import of the final
    files stores it), the watched files are byte-identical to what the agents wrote, and the
    sessions stay after the agents delete their files."""
    rng = random.Random(watch_seed())
    agents = tmp_path / "agents"
    plans = _agent_plans(agents)
    final = _final(plans)
    watch_config(quill.home, [agents / "claude", agents / "codex", agents / "gemini"], rescan_s=1.0)
    fleet = quill.start_fleet()
    kills = 0
    try:
        # 296 and 112 steps, ~9 s each without the waits at the gates
        kills = kill_watcher_while(quill.home, plans, [0.03, 0.08], rng, tmp_path)
        drained(quill, files=len(final))
        for dst, data in final.items():  # the watcher changed nothing in the watched folders
            assert Path(dst).read_bytes() == data, dst
        expected_rows, expected_usage = direct_import(tmp_path, [agents])
        for dst in final:  # the agents delete their sessions
            Path(dst).unlink()
        st = drained(quill, files=0)
        assert st["watch"]["unreadable"] == []
    finally:
        assert stop_fleet(fleet) == 0
    assert kills == KILLS
    rows = stored_rows(quill.home)
    assert len(expected_rows) > 100
    assert {r[0].split(":")[0] for r in expected_rows} >= {"claude-code", "codex", "gemini-cli"}
    assert rows == expected_rows, row_diff(rows, expected_rows)
    # every column a later copy of a record can change, the sessions and the usage rows
    same_stores(stored_full(quill.home), stored_full(tmp_path / "reference"))
    assert no_quarantine_but_torn_writes(quill.home) == []
    assert usage_count(quill.home) == expected_usage


def test_watch_once_killed_at_random_points_stores_each_message_once(tmp_path, quill):
    """A one-off watcher SIGKILLed again and again at random points of its import (files
    growing between kills) leaves every message stored once: re-reading after a crash spools
    the same content with the same batch ids, and the store skips what it holds."""
    rng = random.Random(watch_seed())
    root = tmp_path / "agents"
    files = [CLAUDE[6], CLAUDE[3], CODEX[2], CODEX[1]]
    lines = {src: src.read_bytes().splitlines(keepends=True) for src in files}
    dst = {src: root / ("codex" if src in CODEX else "claude") / src.name for src in files}
    for d in dst.values():
        d.parent.mkdir(parents=True, exist_ok=True)
    watch_config(quill.home, [root])
    argv = quill.argv("watch", "--once")
    rounds = 12
    for i in range(1, rounds + 1):
        for src in files:  # each file grows by another slice, as its agent writes on
            with open(dst[src], "wb") as f:
                f.write(b"".join(lines[src][: len(lines[src]) * i // rounds]))
        proc = subprocess.Popen(argv, env=quill_env(quill.home), stdout=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.05, 1.2))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        if i % 4 == 0:  # the writer applies what was spooled so far, as a fleet would
            quill.drain()
    done = json.loads(quill.run("watch", "--once", "--json").stdout)
    assert done["imported"] <= len(files)
    quill.drain()
    expected_rows, expected_usage = direct_import(tmp_path, list(dst.values()))
    rows = stored_rows(quill.home)
    assert len(expected_rows) > 1000
    assert rows == expected_rows, row_diff(rows, expected_rows)
    assert no_quarantine_but_torn_writes(quill.home) == []
    assert usage_count(quill.home) == expected_usage
    again = json.loads(quill.run("watch", "--once", "--json").stdout)
    assert again == {"imported": 0, "new_messages": 0, "rewritten": 0, "gone": 0}


def test_rewrite_on_resume_truncation_and_rename(tmp_path, quill):
    """A file replaced by a rewrite holding the same prefix plus more (Claude Code on
    resume), then truncated in place, then grown again, then renamed: each time the new
    content is stored and nothing twice; what the truncation took away stays stored."""
    src = CLAUDE[0]
    lines = src.read_bytes().splitlines(keepends=True)
    root = tmp_path / "agents" / "proj"
    root.mkdir(parents=True)
    f = root / src.name
    watch_config(quill.home, [root.parent])

    def once() -> dict:
        out = json.loads(quill.run("watch", "--once", "--json").stdout)
        quill.drain()
        return out

    f.write_bytes(b"".join(lines[:60]))
    assert once()["imported"] == 1
    first = stored_rows(quill.home)
    # resume: the agent writes a new file with the same prefix plus more, and renames it over
    tmp = root / ".resume.tmp"
    tmp.write_bytes(b"".join(lines[:150]))
    os.replace(tmp, f)
    out = once()
    assert out["rewritten"] == 1 and out["new_messages"] > 0
    full_150 = stored_rows(quill.home)
    assert set(first) <= set(full_150)
    assert full_150 == direct_import(tmp_path / "r150", [f])[0]
    # truncated in place: nothing is lost, nothing added
    os.truncate(f, len(b"".join(lines[:40])))
    out = once()
    assert out["rewritten"] == 1 and out["new_messages"] == 0
    assert stored_rows(quill.home) == full_150
    # grown again to the whole file
    f.write_bytes(b"".join(lines))
    once()
    whole = direct_import(tmp_path / "rall", [src])[0]
    assert stored_rows(quill.home) == whole
    # renamed: the old path is gone, the new one holds nothing new
    f.rename(root / "renamed.jsonl")
    out = once()
    assert out == {"imported": 1, "new_messages": 0, "rewritten": 0, "gone": 1}
    assert stored_rows(quill.home) == whole


def test_status_says_what_is_watched_how_far_behind_and_what_is_unreadable(tmp_path, quill):
    root = tmp_path / "agents"
    root.mkdir()
    session = root / "s.jsonl"
    lines = CLAUDE[1].read_bytes().splitlines(keepends=True)
    session.write_bytes(b"".join(lines[:10]))
    (root / "notes.json").write_text('{"not": "a transcript"}')
    watch_config(quill.home, [root, tmp_path / "not-yet"])
    quill.run("watch", "--once")
    extra = b"".join(lines[10:20])
    with open(session, "ab") as f:
        f.write(extra)
    st = json.loads(quill.run("status", "--json").stdout)["watch"]
    assert st["enabled"] is True
    assert st["roots"] == [
        {"path": str(root), "exists": True},
        {"path": str(tmp_path / "not-yet"), "exists": False},
    ]
    assert st["files"] == 1 and st["pending"] == 1 and st["bytes_behind"] == len(extra)
    assert [(u["path"], u["reason"]) for u in st["unreadable"]] == [
        (str(root / "notes.json"), "format not recognised")
    ]
    human = quill.run("status").stdout
    assert "1 file(s) pending" in human and f"{len(extra)} bytes behind" in human
    assert "notes.json: format not recognised" in human
    quill.run("watch", "--once")
    st = json.loads(quill.run("status", "--json").stdout)["watch"]
    assert st["pending"] == 0 and st["bytes_behind"] == 0 and len(st["unreadable"]) == 1
    (quill.home / "config.toml").write_text("[watch]\nenabled = false\n")
    assert json.loads(quill.run("status", "--json").stdout)["watch"] == {"enabled": False}


def test_a_second_watcher_is_refused_while_one_runs(tmp_path, quill):
    root = tmp_path / "agents"
    root.mkdir()
    watch_config(quill.home, [root])
    proc = subprocess.Popen(quill.argv("watch"), env=quill_env(quill.home))
    try:
        deadline = time.monotonic() + 30
        while watcher_pid(quill.home) is None:
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.1)
        second = quill.run("watch", "--once", check=False)
        assert second.returncode != 0 and "another watcher" in second.stderr
        assert f"pid {proc.pid} holds the watch lease" in second.stderr  # not "the store"
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    shutil.rmtree(root)
    assert quill.run("watch", "--once").returncode == 0


def test_quill_run_says_which_agent_folders_it_captures(quill, home, tmp_path):
    """The fleet copies transcripts from outside its data dir: it says so at start, naming
    the folders, and says nothing when [watch] is off."""
    agents = tmp_path / "agent-transcripts"
    agents.mkdir()
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(
        f'[watch]\ndefault_roots = false\nroots = ["{agents}"]\n', encoding="utf-8"
    )
    said = quill.run("run", "--until-idle", "--timeout", "120").stderr
    assert f"capturing the coding-agent transcripts in {agents}" in said
    (home / "config.toml").write_text("[watch]\nenabled = false\n", encoding="utf-8")
    assert "capturing" not in quill.run("run", "--until-idle", "--timeout", "120").stderr

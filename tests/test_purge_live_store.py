"""``sessions delete --purge`` leaves no token of the deleted text in *any* file under the data
dir, the live store (``state.db``, ``-wal``, ``-shm``) included, also when the purge is re-run
after kill -9; ``quill doctor``/``quill status`` report a ``--purge`` delete whose purge never
ran (privacy). Real fleets and real kill -9; SQLite store (purge is
SQLite-only)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from conftest import QuillCLI, quill_env, stop_fleet

from quill.home import RunDir

CANARY = "my key is sk-canary-7731xyz please forget it"
WORDS = [b"canary", b"7731xyz", b"forget", b"please"]  # "7731" alone: any logged number


def holding(root: Path, needles: list[bytes]) -> dict[str, list[str]]:
    """needle → every file under ``root`` (all of them: live store, WAL, shm, snapshots,
    spool, quarantine, logs, queues) whose bytes contain it (case-insensitive)."""
    found: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            data = path.read_bytes().lower()
            for n in needles:
                if n.lower() in data:
                    found.setdefault(n.decode(), []).append(str(path.relative_to(root)))
    return found


def _wait(cond, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _push(quill: QuillCLI, sid: str, *texts: str) -> None:
    lines = "\n".join(json.dumps({"role": "user", "content": t}) for t in texts)
    quill.run("push", "--session", sid, "--wait", "30", input=lines + "\n")


def _purge_check(quill: QuillCLI) -> dict:
    checks = quill.json("doctor", check=False)
    checks = checks["checks"] if isinstance(checks, dict) else checks
    return next(c for c in checks if c["check"] == "purge")


def test_delete_purge_with_a_running_fleet_leaves_no_word_in_any_file(quill: QuillCLI):
    """The trial's repro: ``07731xyz``, ``canary``, ``forget`` and ``please`` stayed in
    ``messages_fts_data`` (FTS5 segments keep a contentless table's deleted tokens until a
    merge; the ``--purge`` delete's secure deletion skipped the VACUUM)."""
    fleet = quill.start_fleet()
    try:
        _push(quill, "keep", "kept words stay searchable")
        _push(quill, "leak", CANARY)
        assert holding(quill.home, WORDS)  # the check can see them before the purge
        out = quill.run("sessions", "delete", "leak", "--yes", "--purge").stdout
        assert holding(quill.home, WORDS) == {}
        assert "FTS optimize" in out and "VACUUM" in out, out  # the cost is printed
        assert holding(quill.home, [b"kept words"])  # the other session is untouched
        hits = quill.json("search", "kept")["hits"]
        assert hits and "forget" not in json.dumps(hits)
    finally:
        assert stop_fleet(fleet) == 0
    assert holding(quill.home, WORDS) == {}  # a clean shutdown brings nothing back


def test_purge_rerun_after_kill9_of_the_delete_and_the_writer_leaves_nothing(quill: QuillCLI):
    """``sessions delete torn2 --yes --purge`` killed -9 before its purge step (the writer is
    stopped so the command is still waiting for the apply), then the writer applies the delete
    and the whole fleet is killed -9; ``quill doctor`` said "no interrupted purge" while the
    spool held the text. A later ``quill spool purge torn2`` reported success with the text of
    five messages still in freed pages of ``messages`` (secure deletion zeroes only the cells
    that delete frees, not stale copies left by earlier page splits and updates)."""
    home = quill.home
    fleet = quill.start_fleet()
    rd = RunDir(Path(home).resolve())
    try:
        _push(quill, "keep", *[f"keep {i} " + "kkkk " * 30 for i in range(20)])
        _push(quill, "torn2", *[f"torn2 {i} " + "rrrr " * 60 + "zebrafish" for i in range(5)])
        _push(quill, "keep", *[f"keep late {i} " + "kkkk " * 30 for i in range(20)])
        _wait(lambda: rd.lease_holder("writer"), "the writer")
        writer = rd.lease_holder("writer")["pid"]
        os.kill(writer, signal.SIGSTOP)  # the delete is spooled but not applied yet
        try:
            cmd = subprocess.Popen(
                quill.argv("sessions", "delete", "torn2", "--yes", "--purge"),
                env=quill_env(home),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            spool = home / "spool"
            _wait(
                lambda: any(b"sessions.delete" in p.read_bytes() for p in spool.glob("*.jsonl")),
                "the delete in the spool",
            )
            os.kill(cmd.pid, signal.SIGKILL)
            cmd.wait(10)
        finally:
            os.kill(writer, signal.SIGCONT)
        _wait(
            lambda: "torn2" in _purge_check(quill)["detail"],
            "doctor to report the unfinished purge",
        )
        check = _purge_check(quill)
        assert check["status"] != "ok" and "quill spool purge torn2" in check["detail"], check
        status = quill.status()
        assert status["spool"]["interrupted_purge"]["sessions"] == ["torn2"]
        assert status["spool"]["interrupted_purge"]["cause"] == "pending"
        for pid in (rd.lease_holder("fleet")["pid"], rd.lease_holder("writer")["pid"]):
            os.kill(pid, signal.SIGKILL)
    finally:
        fleet.wait(30)
    _wait(lambda: rd.lease_holder("writer") is None, "the killed writer's lease to free")
    assert holding(home, [b"zebrafish"])
    quill.run("spool", "purge", "torn2")
    assert holding(home, [b"zebrafish", b"rrrr", b"torn2 1"]) == {}
    assert _purge_check(quill)["status"] == "ok"
    assert quill.status()["spool"]["interrupted_purge"] is None
    assert holding(home, [b"keep late 19"])  # the kept session's rows are all there


def test_pending_purge_is_told_from_a_complete_one(tmp_path):
    """``ops.purge.pending``: an applied ``purge: true`` delete whose records are still in the
    spool is pending; after the purge (tombstones) it is not; a plain delete never is."""
    from purge_helpers import PurgeHome

    from quill.ops.purge.procedure import interrupted

    h = PurgeHome(tmp_path / "home")
    for sid in ("x", "plain", "keep"):
        h.append("session.create", {"session_id": sid, "source": "cli"})
        h.say(sid, f"WORD-{sid}-secret")
    h.append("sessions.delete", {"session_ids": ["x"], "purge": True, "reason": "user_request"})
    h.append("sessions.delete", {"session_ids": ["plain"], "reason": "user_request"})
    assert interrupted(h.spool_dir, h.db) is None  # nothing applied yet: not interrupted
    h.drain()
    found = interrupted(h.spool_dir, h.db)
    assert found == {"sessions": ["x"], "cause": "pending", "next": "quill spool purge x"}
    h.purge("x")
    assert interrupted(h.spool_dir, h.db) is None


def test_a_reader_blocking_the_scrubs_checkpoint_fails_the_purge_and_a_rerun_finishes(tmp_path):
    """A reader on an old snapshot of the store keeps the TRUNCATE checkpoint from copying the
    VACUUM's rewrite into ``state.db``: the old pages (the deleted text) stay in the main file.
    The purge must not report success then; a re-run once the reader is gone finishes it."""
    import apsw
    import pytest
    from purge_helpers import PurgeHome, files_holding

    from quill.ops.client.errors import StorageError
    from quill.ops.purge.procedure import interrupted

    h = PurgeHome(tmp_path / "home")
    h.append("session.create", {"session_id": "x", "source": "cli"})
    h.say("x", *[f"WORD-x-secret {i} " + "lorem " * 40 for i in range(40)])
    h.append("session.create", {"session_id": "keep", "source": "cli"})
    h.say("keep", "kept")
    h.append("sessions.delete", {"session_ids": ["x"], "purge": True, "reason": "user_request"})
    h.drain()
    reader = apsw.Connection(str(h.db), flags=apsw.SQLITE_OPEN_READONLY)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM messages").fetchall()  # holds its snapshot
    try:
        with pytest.raises(StorageError, match="blocked its TRUNCATE checkpoint"):
            h.purge("x")
        assert interrupted(h.spool_dir, h.db)["cause"] == "plan-file"
    finally:
        reader.execute("COMMIT")
        reader.close()
    figures = h.purge("x")
    assert figures["store_scrub"]["wal_blocked_by_reader"] is False
    assert files_holding(h.root, b"WORD-x") == []
    assert interrupted(h.spool_dir, h.db) is None

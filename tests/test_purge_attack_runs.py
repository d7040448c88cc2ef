"""Attacks on ``quill spool purge`` / ``sessions delete --purge``: each test is a
failing reproduction of a defect found by running the feature as an operator would. These
check purge runs themselves: concurrent purges of one segment, a re-run after a killed one,
re-importing a purged session, the segments' retention clock, and what a purge or `quill
doctor` reports (a damaged line of the session, an interrupted purge)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from purge_helpers import PurgeHome, files_holding

from quill.ops.purge.procedure import purge


def _three_sessions_two_deleted(h: PurgeHome) -> None:
    for sid in ("a", "x", "y"):
        h.append("session.create", {"session_id": sid, "source": "cli"})
        h.say(sid, f"WORD-{sid}-secret")
    h.append("sessions.delete", {"session_ids": ["x"], "purge": True, "reason": "user_request"})
    h.append("sessions.delete", {"session_ids": ["y"], "purge": True, "reason": "user_request"})
    h.say("a", "after")
    h.drain()


def _flock_waiters(folder: Path) -> int:
    """Lock requests blocked in ``flock()`` on the files of ``folder`` (``/proc/locks`` lists
    a waiter as ``N: -> FLOCK ... DEV:INODE START END``)."""
    inodes = {f":{p.stat().st_ino}" for p in folder.iterdir() if p.is_file()}
    with open("/proc/locks") as f:
        return sum(
            1
            for line in f
            if " -> FLOCK " in line and any(line.split()[-3].endswith(i) for i in inodes)
        )


def test_two_concurrent_purges_of_one_segment_keep_both_sessions_purged(tmp_path):
    """Two purges (two operators, or `for id in …; do quill sessions delete $id --purge & done`)
    of sessions in the same sealed segment. Each rewrote the segment from the bytes it had
    opened, so the later rename put the first session's content back although both purges
    returned success (with real processes: 3 of 5 runs of two parallel `quill spool purge` on
    the corpus left one session's text in the segment). One purge runs at a time: the first
    to plan holds the purge lock until its last step, and the other waits for it (seen in
    ``/proc/locks``) before planning from the rewritten segment."""
    h = PurgeHome(tmp_path / "home")
    _three_sessions_two_deleted(h)
    planned, go = threading.Event(), threading.Event()
    out: dict = {}

    def held_at_its_plan(name: str) -> None:
        if name == "planned":
            planned.set()
            assert go.wait(120)

    def run(sid: str, step=None) -> None:
        try:
            out[sid] = purge(h.spool_dir, h.db, h.snapshots, [sid], on_step=step)
        except Exception as exc:  # noqa: BLE001 - reported below
            out[sid] = exc

    first = threading.Thread(target=run, args=("x", held_at_its_plan))
    first.start()
    second = None
    try:
        assert planned.wait(120)
        second = threading.Thread(target=run, args=("y",))
        second.start()
        deadline = time.monotonic() + 120
        while not _flock_waiters(h.spool_dir):  # the second waits for the first's purge lock
            assert time.monotonic() < deadline, "the second purge did not wait for the first"
            time.sleep(0.01)
    finally:
        go.set()
        first.join(120)
        if second is not None:
            second.join(120)
    assert not isinstance(out["x"], Exception), out["x"]
    assert not isinstance(out["y"], Exception), out["y"]
    assert "x" in out["x"]["sessions"] and "y" in out["y"]["sessions"]
    assert files_holding(h.root, b"WORD-x") == []  # the second rewrite kept the first's
    assert files_holding(h.root, b"WORD-y") == []


def test_a_rerun_removes_what_a_purge_killed_in_its_snapshot_step_left(tmp_path):
    """``purge`` removes only ``snapshots/.compact-*.tmp`` of an interrupted run. A kill -9
    inside its fresh snapshot (``worker_jobs.snapshot(compact=True)``: backup-API copy to
    ``.snapshot-<pid>-<ns>.tmp``, then FTS optimize + VACUUM) leaves that copy — taken before
    VACUUM, so it holds the freed pages of the live store, i.e. the deleted session's text
    when it was deleted without ``--purge`` and purged later — plus its ``-wal``/``-shm``;
    a compaction killed mid-VACUUM leaves ``.compact-*.tmp-journal``. Re-running reports
    success with ``leftovers_removed: []`` and the bytes stay. Reproduced with real
    processes: corpus import, a marker message in session A, ``quill sessions delete A``,
    ``quill snapshot``, then ``quill spool purge A`` killed (SIGKILL) 0.3 s after
    ``snapshots/.snapshot-*.tmp`` appeared, then ``quill spool purge A`` again: ``grep -rl
    MARKER $QUILL_HOME --exclude='state.db*'`` still lists ``snapshots/.snapshot-….tmp``.
    Here the leftover files are laid down as the kill leaves them (a copy of the store)."""
    import shutil

    h = PurgeHome(tmp_path / "home")
    _three_sessions_two_deleted(h)
    h.snapshots.mkdir(parents=True, exist_ok=True)
    killed = [
        h.snapshots / ".snapshot-4242-1796099765745683090.tmp",
        h.snapshots / ".snapshot-4242-1796099765745683090.tmp-wal",
        h.snapshots / ".compact-4243-1796099748491266969.tmp-journal",
    ]
    for path in killed:
        shutil.copyfile(h.db, path)
        with open(path, "ab") as f:
            f.write(b"WORD-x-secret")  # the freed pages the copy carries
    figures = h.purge("x")
    assert sorted(figures["leftovers_removed"]) == sorted(p.name for p in killed)
    assert files_holding(h.root, b"WORD-x") == []


@pytest.mark.corpus
def test_a_purged_session_imported_again_comes_back(quill):
    """`quill import` spools a batch under a stable batch id (``ingest.stable_batch_id``). A
    deleted (and purged) session imported again from the same file got the same batch ids,
    which the store's ``applied_batches`` still records (the purged records' tombstones keep
    their batch ids on purpose): every re-imported record was dropped as a duplicate while the
    import said "spooled 22 new message(s)". The store now counts deletions per session id
    (schema v6) and the importer puts the count in its batch ids."""
    from conftest import CORPUS

    src = str(CORPUS / "openai-chat" / "mini-swe-agent__github_issue.traj.json")
    sid = quill.json("import", src)[0]["session_ids"][0]
    quill.drain()
    quill.run("sessions", "delete", sid, "--yes")
    quill.drain()
    assert quill.json("spool", "purge", sid)["records_purged"] > 0
    again = quill.json("import", src)
    assert again[0]["new"] == 22
    quill.drain()
    assert [
        (s["id"], s["message_count"]) for s in quill.json("sessions", "list", "--all")["sessions"]
    ] == [(sid, 22)]
    assert quill.json("import", src)[0]["new"] == 0  # still idempotent: a third import adds nothing
    # A plain delete (no purge) and a second re-import: the count moves on, the session comes back.
    quill.run("sessions", "delete", sid, "--yes")
    quill.drain()
    assert quill.json("sessions", "list", "--all")["sessions"] == []
    assert quill.json("import", src)[0]["new"] == 22
    quill.drain()
    assert [
        (s["id"], s["message_count"]) for s in quill.json("sessions", "list", "--all")["sessions"]
    ] == [(sid, 22)]


def test_a_purge_does_not_restart_the_retention_clock_of_the_segments_it_rewrites(tmp_path):
    """Spool retention ages a segment by its mtime ("last append", ``spool.retention``). The
    purge's rename gives every rewritten segment a fresh mtime, so segments due for
    collection (here: 8 days old, retention 7 days) stay another full window after a
    purge, and `quill spool status` shows them as new."""
    import os

    from quill.spool import Position
    from quill.spool.retention import collectable
    from quill.spool.segments import segment_name

    h = PurgeHome(tmp_path / "home")
    _three_sessions_two_deleted(h)
    h.say("a", "one more")  # a second segment below, so segment 1 is sealed and old
    seg1 = h.spool_dir / segment_name(1)
    old = seg1.stat().st_mtime - 8 * 24 * 3600
    os.utime(seg1, (old, old))
    h.purge("x")  # seals 1 (it is the newest), rewrites it
    end = Position(2, 0)
    assert [s["segment"] for s in collectable(h.spool_dir, end, end)] == [1]


def test_a_damaged_line_of_the_purged_session_is_reported(tmp_path):
    """docs/ops.md, "Still not purged": "a spool line too damaged to decode (it is reported,
    not guessed at)". A line of x whose checksum no longer matches (one flipped byte) is
    quarantined; the purge removes its quarantine entry (so it knew the line was x's) but
    leaves the line, with x's text, in the segment, and nothing in the figures (or the CLI
    summary) mentions it: the purge reports success."""
    h = PurgeHome(tmp_path / "home")
    h.append("session.create", {"session_id": "x", "source": "cli"})
    h.say("x", "WORD-x-secret damaged")
    seg = h.spool_dir / "00000001.jsonl"
    data = bytearray(seg.read_bytes())
    data[data.find(b"damaged")] = ord("D")  # a flipped byte: the CRC no longer matches
    seg.write_bytes(bytes(data))
    h.drain()
    h.append("sessions.delete", {"session_ids": ["x"], "purge": True, "reason": "user_request"})
    h.drain()
    figures = h.purge("x")
    assert figures["quarantine_purged"]  # the quarantine entry of that line went
    left = files_holding(h.root, b"WORD-x")
    reported = [
        k
        for k, v in figures.items()
        if k not in ("quarantine_purged",)
        and "1:" in str(v)
        and k in ("damaged", "skipped", "not_purged", "left")
    ]
    assert left == [] or reported, (left, figures)


def test_doctor_reports_an_interrupted_purge(quill):
    """A purge killed after its plan (``spool/.purge-plan.json`` written, the spool and the
    snapshots still holding the session: the OOM killer, a dropped SSH session, Ctrl-\\)
    leaves the deleted content in place until someone re-runs ``quill spool purge ID``, but
    nothing says so: ``quill doctor`` and ``quill status`` report no unfinished purge.
    (Real kill -9 on the corpus store: killed as soon as .purge-plan.json appeared; doctor
    warned only about 'overdue jobs'; the marker stayed in the spool and both snapshots.)
    The killed run is stood for by its plan file, written as ``ops.purge.procedure`` writes it."""
    import json as _json

    quill.run("push", "--session", "x", input='{"role": "user", "content": "WORD-x-secret"}')
    quill.run("run", "--until-idle", "--timeout", "60")
    quill.run("sessions", "delete", "x", "--yes")
    quill.run("run", "--until-idle", "--timeout", "60")
    status = quill.json("status")
    plan = {"bounds": {"x": [status["fleet"]["writer"]["cursor"], "batch"]}}
    (quill.home / "spool" / ".purge-plan.json").write_text(_json.dumps(plan))
    checks = quill.json("doctor", check=False)
    checks = checks["checks"] if isinstance(checks, dict) else checks
    assert any(
        "purge" in (c["check"] + c["detail"]).lower() and c["status"] != "ok" for c in checks
    ), checks

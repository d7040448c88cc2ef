"""The production writer built and stepped inside the test process (tests/harness.py): apply
with the cursor, quarantine, the sticky halt and the swap that ends it, FTS damage detaching
the indexes while writes go on, an idle-only job deferred while the spool has work, and a
full disk pausing the drain. Real data dirs, real damaged pages, a real small filesystem; the
same steps on a PostgreSQL store where the behaviour applies."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from conftest import REPO, damage_pages, quill_env, small_tmpfs
from harness import InProcessWriter

from quill.jobs.queues import build_for
from quill.spool import SpoolReader
from quill.store import Reader
from quill.store.sqlite.connection import open_reader
from quill.store.sqlite.fts_repair import classify


@pytest.fixture
def w(tmp_path):
    h = InProcessWriter(tmp_path / "home", writer={"chunk_rows": 50})
    yield h
    h.close()


def _count(db) -> int:
    with Reader(db) as r:
        return r.conn.execute("SELECT count(*) FROM messages").fetchone()[0]


def _overwrite_root(db, table: str) -> None:
    """Overwrite ``table``'s b-tree root page with random bytes (the file is closed)."""
    conn = open_reader(db)
    try:
        root = conn.execute(
            "SELECT rootpage FROM sqlite_schema WHERE name = ?", (table,)
        ).fetchone()[0]
        size = conn.execute("PRAGMA page_size").fetchone()[0]
    finally:
        conn.close()
    with open(db, "r+b") as f:
        f.seek((root - 1) * size)
        f.write(os.urandom(size))


def test_chunks_are_applied_with_the_cursor_and_the_status_says_idle(w):
    for i in range(12):
        w.say("s", *[f"message {i}-{k}" for k in range(10)])
    turns = w.until_idle()
    assert turns >= 3  # 120 rows in chunks of about 50
    end = SpoolReader(w.cfg.spool_dir).end()
    assert w.writer.cursor == end
    with Reader(w.cfg.state_db) as r:
        assert r.conn.execute("SELECT segment, offset FROM spool_cursor").fetchone() == tuple(end)
        assert r.conn.execute("SELECT count(*) FROM messages").fetchone()[0] == 120
    st = w.status()
    assert st["idle"] and st["rows"] == 120 and st["chunks"] >= 3 and st["cursor"] == str(end)
    assert st["fts_indexed_upto"] > 0 and st["backend"] == "sqlite"
    # A restarted writer resumes at the committed cursor and applies nothing twice.
    w.restart()
    w.say("s", "one more")
    w.until_idle()
    assert _count(w.cfg.state_db) == 121 and w.status()["duplicates"] == 0


def test_a_damaged_spool_record_is_quarantined_and_the_rest_applied(w):
    w.say("s", "first")
    w.say("s", "second")
    w.say("s", "third")
    seg = (
        sorted(w.cfg.spool_dir.glob("*.jsonl"))[0]
        if list(w.cfg.spool_dir.glob("*.jsonl"))
        else sorted(p for p in w.cfg.spool_dir.iterdir() if p.is_file())[0]
    )
    raw = seg.read_bytes()
    at = raw.index(b"second")
    seg.write_bytes(raw[:at] + b"SECOND" + raw[at + 6 :])  # the checksum no longer matches
    w.until_idle()
    with Reader(w.cfg.state_db) as r:
        texts = [m["content"] for m in r.get_messages("s")]
    assert texts == ["first", "third"]
    [entry] = list(w.writer.drain.quarantine.entries())
    assert entry["reason"] and w.status()["rejected"] == 1
    assert w.events("writer.quarantined")


def _push(w, session: str, start: int, n: int) -> None:
    w.append(
        "messages.append",
        {
            "session_id": session,
            "messages": [
                {
                    "role": "user",
                    "id": f"{session}-{i}",
                    "content": f"{session} message {i} " + "x " * 40,
                }
                for i in range(start, start + n)
            ],
        },
    )


def _ids(db) -> list[str]:
    with Reader(db) as r:
        return [row[0] for row in r.conn.execute("SELECT ext_id FROM messages ORDER BY ext_id")]


def test_a_damaged_btree_page_halts_sticky_and_recovery_loses_nothing(w):
    """A damaged root page of ``messages``: one halt however many turns, the spool keeps
    accepting, a restarted writer honours the halt before opening, and recovery (snapshot +
    spool replay, swapped in by the halted writer that holds the lease) loses nothing."""
    from quill.jobs.worker_jobs import snapshot
    from quill.ops.recover.sqlite import rebuild

    _push(w, "d", 0, 300)
    w.until_idle()
    snapshot(str(w.cfg.state_db), str(w.cfg.snapshots_dir))
    _push(w, "d", 300, 100)
    w.until_idle()
    w.writer.shutdown()
    _overwrite_root(w.cfg.state_db, "messages")
    _push(w, "d", 400, 50)
    w.writer = w.start()
    for _ in range(5):
        w.turn()
    halt = w.writer.run_dir.halt(w.cfg.state_db)
    assert halt and halt.cause in ("CorruptError", "NotADatabaseError")
    assert halt.next == "quill recover"
    st = w.status()
    assert st["halted"] and st["halt"]["cause"] == halt.cause
    assert len(w.events("writer.halt")) == 1  # one halt, however many turns
    assert w.turn() == w.writer.store.halt_poll_s  # halted: it waits, applying nothing
    _push(w, "d", 450, 50)  # the spool keeps accepting
    w.restart()  # honours the recorded halt
    w.turn()
    assert w.status()["halted"] and w.events("writer.halted")
    report = rebuild(w.cfg)  # `quill recover`, the halted writer ...
    assert report["snapshot"] is not None
    w.writer.run_dir.request_swap(report["path"])  # ... holding the lease swaps it in
    w.turn()
    assert w.writer.done and w.writer.run_dir.halt(w.cfg.state_db) is None
    w.restart()
    w.until_idle()
    assert _ids(w.cfg.state_db) == sorted(f"d-{i}" for i in range(500))
    assert list((w.root / "evidence").iterdir()), "the damaged files are kept as evidence"


def test_a_check_finding_damaged_message_pages_halts_the_writer(w):
    """The job worker's quick_check finds damage in ``messages`` (real overwritten leaf
    pages) and queues ``declare_corrupt``; the writer runs it between chunks and halts."""
    from quill.jobs.worker_jobs import DamageFound, quick_check

    for i in range(40):
        w.say("q", *[f"row {i}-{k} " + "lorem ipsum " * 20 for k in range(10)])
    w.until_idle()
    w.writer.shutdown()  # its checkpoint puts every page in the file
    damage_pages(w.cfg.state_db, "messages", leaves_only=True)
    w.writer = w.start()
    with pytest.raises(DamageFound) as found:
        quick_check(str(w.cfg.state_db), str(w.cfg.queue_db))
    assert "canonical=['messages']" in str(found.value)
    for name, params in found.value.followups:  # what the job worker queues after its record
        build_for(w.cfg).enqueue(name, **params)
    w.say("q", "after the check")
    for _ in range(3):
        w.turn()
    halt = w.writer.run_dir.halt(w.cfg.state_db)
    assert halt.cause == "CorruptError" and "quick_check" in halt.detail
    assert w.status()["halted"]


def test_damage_confined_to_the_search_index_detaches_it_and_writes_go_on(w):
    for i in range(30):
        w.say("old", *[f"aardvark {i}-{k} " + "lorem ipsum " * 10 for k in range(10)])
    w.until_idle()
    w.writer.shutdown()
    _overwrite_root(w.cfg.state_db, "messages_fts_data")
    conn = open_reader(w.cfg.state_db)
    try:
        assert classify(conn) == {"canonical": [], "fts": ["messages_fts"]}
    finally:
        conn.close()
    w.writer = w.start()
    w.say("new", *[f"bumblebee {k}" for k in range(20)])
    w.until_idle()
    assert _count(w.cfg.state_db) == 320  # writes went on
    assert w.writer.run_dir.halt(w.cfg.state_db) is None
    [detached] = w.events("writer.fts_detached")
    assert detached["damaged"] == ["messages_fts"]
    # The rebuild it queued ran on the writer (between chunks) and search is whole again.
    runs = [r for r in _job_runs(w) if r[0] == "fts_rebuild"]
    assert runs and runs[-1][1] == "ok"
    with Reader(w.cfg.state_db) as r:
        assert r.search_health()["fts_state"] == "ok"
        assert len(r.search("aardvark", limit=500)) == 300
        assert {h["session_id"] for h in r.search("bumblebee")} == {"new"}


def _job_runs(w) -> list[tuple]:
    with Reader(w.cfg.state_db) as r:
        return r.conn.execute("SELECT job, outcome FROM job_runs ORDER BY id").fetchall()


def test_an_idle_only_job_waits_while_the_spool_has_work(w):
    for i in range(10):
        w.say("s", *[f"m {i}-{k}" for k in range(50)])  # ten chunks of 50 rows
    queues = build_for(w.cfg)  # the data dir's queue, as the CLI has it
    queues.enqueue("vacuum", min_free_ratio=0.0)
    for _ in range(5):
        w.turn()
    assert w.writer.totals["rows"] == 250  # half drained ...
    assert queues.pending()["store"] == 1  # ... and the VACUUM still waits
    assert "vacuum" not in [r[0] for r in _job_runs(w)]
    w.until_idle()
    assert ("vacuum", "ok") in _job_runs(w)
    assert queues.pending()["store"] == 0


def test_a_reader_holding_a_snapshot_blocks_the_idle_truncate_until_it_lets_go(w):
    """The drain goes on under a reader's snapshot; the idle TRUNCATE is blocked and says
    since when, is retried on the writer's clock (``TRUNCATE_RETRY_S``), and empties the WAL
    once the reader lets go."""
    from quill.store.sqlite.store import TRUNCATE_RETRY_S, TRUNCATE_WAL_BYTES

    w.say("s", "before the reader")
    w.until_idle()
    reader = open_reader(w.cfg.state_db)
    wal = str(w.cfg.state_db) + "-wal"
    try:
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM messages").fetchone()  # holds a snapshot
        for i in range(20):
            w.say("big", *[f"{i} {k} " + os.urandom(1500).hex() for k in range(20)])
        w.until_idle()
        assert _count(w.cfg.state_db) == 401  # applied despite it
        assert os.path.getsize(wal) > TRUNCATE_WAL_BYTES
        since = w.status()["wal_blocked_since"]
        assert since is not None and w.events("writer.checkpoint_blocked")
        w.turn(TRUNCATE_RETRY_S + 1)  # retried: still held
        assert w.status()["wal_blocked_since"] == since
        reader.execute("COMMIT")
    finally:
        reader.close()
    w.turn(TRUNCATE_RETRY_S + 1)
    w.turn(0.3)  # publish idle again
    # Truncated; the job-run row written after it regrows the WAL by a page or two only.
    assert os.path.getsize(wal) < 16 * 1024 and w.status()["wal_blocked_since"] is None
    assert ("wal_checkpoint", "ok") in _job_runs(w)


def test_a_full_disk_pauses_the_drain_and_it_resumes_when_space_returns(tmp_path):
    with small_tmpfs(tmp_path / "small", "4m") as mnt:
        w = InProcessWriter(mnt / "home", writer={"chunk_rows": 100})
        try:
            w.append("session.create", {"session_id": "full"})
            w.until_idle()
            for b in range(40):
                w.append(
                    "messages.append",
                    {
                        "session_id": "full",
                        "messages": [
                            {"role": "user", "id": f"{b}-{i}", "content": f"{b} {i} " + "x" * 400}
                            for i in range(20)
                        ],
                    },
                )
            filler = mnt / "filler"
            with open(filler, "wb") as f:  # leave ~128 KiB: room for status, not for the rows
                while (free := shutil.disk_usage(mnt).free) > 132 * 1024:
                    f.write(b"\0" * (65536 if free > 256 * 1024 else 4096))  # whatever the
                    f.flush()  # store's own size, the same room is left
            pauses = [w.turn(1.0) for _ in range(6)]
            # The status file cannot be written on a full disk either: ask the writer.
            assert "disk full" in w.writer.error and w.writer.halt_cause is None
            # A first chunk may still fit in the room left (how much a chunk takes depends on
            # the index layout); once the disk is full the writer backs off, longer each time.
            backoff = [p for p in pauses if p > 0]
            assert len(backoff) >= 4 and pauses[-len(backoff) :] == backoff
            assert backoff == sorted(backoff) and backoff[-1] > backoff[0]
            assert w.writer.totals["rows"] < 800
            assert w.writer.run_dir.halt(w.cfg.state_db) is None
            cli = [sys.executable, "-c", "from quill.ops.cli import main; main()"]
            proc = subprocess.run(
                [*cli, "status", "--json"],
                env=quill_env(w.root),
                cwd=REPO,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert json.loads(proc.stdout)["disk"]["low"] is True
            filler.unlink()  # space returns
            w.until_idle()
            with Reader(w.cfg.state_db) as r:
                rows = r.conn.execute(
                    "SELECT count(*), count(DISTINCT ext_id) FROM messages"
                ).fetchone()
            assert rows == (800, 800) and w.status()["error"] is None and w.writer.error is None
        finally:
            w.close()


def test_postgres_store_applies_halts_store_wide_and_resumes_when_lifted(tmp_path, pg_store_url):
    from quill.store.factory import open_url
    from quill.store.postgres import halt

    w = InProcessWriter(tmp_path / "pg", pg_store_url, writer={"chunk_rows": 20})
    try:
        for i in range(5):
            w.say("p", *[f"pg {i}-{k}" for k in range(20)])
        w.until_idle()
        st = w.status()
        assert st["rows"] == 100 and st["backend"] == "postgres" and st["spool_id"]
        other = open_url(pg_store_url, None, "maintenance")
        try:
            other.run_job(halt.declare, "amcheck", "index damage", 0.0)  # another host's check
            w.say("p", "while halted")
            w.turn()
            w.turn()
            assert w.status()["halted"] and w.writer.totals["rows"] == 100  # nothing applied
            assert other.run_job(halt.read)["cause"] == "amcheck"  # not overwritten
            other.run_job(halt.clear)  # quill recover
        finally:
            other.close()
        w.until_idle()
        assert w.events("writer.halt_lifted") and w.writer.totals["rows"] == 101
    finally:
        w.close()

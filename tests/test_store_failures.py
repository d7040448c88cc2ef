"""A deleted WAL, a replaced file, a damaged b-tree page — each a sticky halt while the spool
keeps accepting, then `quill recover` with zero loss counted message by message, through real
fleets (the in-process writer tier, tests/test_writer_inprocess.py, covers a damaged page's
halt and swap, and a full disk). SQLite only: damage to the store file and its WAL
(PostgreSQL's damage and recovery: test_pg_amcheck.py, test_pg_recovery.py)."""

from __future__ import annotations

import json
import os
import shutil
import time

import apsw
from conftest import damage_pages, stop_fleet

from quill.store import Reader


def _push(quill, session: str, start: int, n: int, pad: int = 0) -> None:
    lines = "\n".join(
        json.dumps(
            {
                "role": "user",
                "id": f"{session}-{i}",
                "content": f"{session} message {i}" + " x" * pad,
            }
        )
        for i in range(start, start + n)
    )
    quill.run("push", "--session", session, input=lines)


def _wait_halt(home, timeout=30.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        path = home / "run" / "halt.json"
        if path.exists():
            return json.loads(path.read_text())
        time.sleep(0.1)
    raise AssertionError("the writer did not halt")


def _ids(home) -> list[str]:
    with Reader(home / "state.db") as r:
        return [row[0] for row in r.conn.execute("SELECT ext_id FROM messages ORDER BY ext_id")]


def _expect(session: str, n: int) -> list[str]:
    return sorted(f"{session}-{i}" for i in range(n))


def _seed_and_snapshot(quill, session: str, n: int) -> None:
    """With a fleet of its own: push ``n`` messages, wait until applied, take a snapshot, stop."""
    fleet = quill.start_fleet()
    try:
        _push(quill, session, 0, n)
        quill.wait_idle()
        quill.run("snapshot")
    finally:
        assert stop_fleet(fleet) == 0


def _seed_segmented(quill, home, session: str) -> list:
    """60 messages pushed as 6 batches into 1,500-byte segments and applied; the segments."""
    home.mkdir(parents=True)
    (home / "config.toml").write_text("[spool]\nsegment_bytes = 4096\n")
    for start in range(0, 60, 10):
        _push(quill, session, start, 10, pad=100)  # ~2.5 KB per batch: several 4 KiB segments
    quill.drain()
    return sorted((home / "spool").glob("*.jsonl"))


def _recover_and_check(quill, home, session, n):
    out = quill.json("recover")
    assert out["swapped_by"] in ("writer", "recover")
    quill.wait_idle()
    assert _ids(home) == _expect(session, n)
    assert not (home / "run" / "halt.json").exists()
    assert list((home / "evidence").iterdir()), "the damaged files are kept as evidence"


def test_unlinked_wal_halts_without_a_new_wal_and_recovers(quill, home, fleet):
    _push(quill, "w", 0, 50)
    quill.wait_idle()
    quill.run("snapshot")
    _push(quill, "w", 50, 50)
    quill.wait_idle()
    os.unlink(str(home / "state.db") + "-wal")
    halt = _wait_halt(home)
    assert halt["cause"] == "ReplacedError" and "-wal" in halt["detail"]
    _push(quill, "w", 100, 50)  # producers are never blocked by a halted store
    time.sleep(1.0)
    assert not os.path.exists(str(home / "state.db") + "-wal"), (
        "a second WAL generation was started"
    )
    status = quill.run("status", check=False)
    assert status.returncode == 1 and "HALTED" in status.stdout and "quill recover" in status.stdout
    _recover_and_check(quill, home, "w", 150)


def test_file_replaced_by_a_copy_halts_and_recovers(quill, home, fleet, tmp_path):
    _push(quill, "c", 0, 40)
    quill.wait_idle()
    copy = tmp_path / "copy.db"
    shutil.copyfile(home / "state.db", copy)
    os.replace(copy, home / "state.db")  # a new inode at the path
    halt = _wait_halt(home)
    assert halt["cause"] == "ReplacedError" and "replaced" in halt["detail"]
    _push(quill, "c", 40, 40)
    _recover_and_check(quill, home, "c", 80)


def test_foreign_database_copied_over_the_same_inode_halts(quill, home, fleet, tmp_path):
    _push(quill, "f", 0, 20)
    quill.wait_idle()
    other = tmp_path / "other.db"
    conn = apsw.Connection(str(other))
    conn.execute("CREATE TABLE t(x); INSERT INTO t VALUES (1); PRAGMA application_id = 4242")
    conn.close()
    with (
        open(other, "rb") as src,
        open(home / "state.db", "r+b") as dst,
    ):  # like `cp other state.db`
        dst.write(src.read())
    halt = _wait_halt(home)
    assert halt["cause"] == "ReplacedError"
    _push(quill, "f", 20, 20)
    _recover_and_check(quill, home, "f", 40)


def test_snapshot_during_a_halt_on_a_replaced_store_refuses_and_names_the_halt(
    quill, home, fleet, tmp_path
):
    """Another data dir's state.db restored over this one while the fleet runs; the
    writer halts. `quill snapshot` then said "quill: error: not an error" (the backup API's
    SQLITE_CORRUPT came with the destination's SQLITE_OK message). It must say the writer is
    halted and to run `quill recover`, exit 1 (kind damaged), and keep no snapshot of the
    foreign file, so recover rebuilds this data dir's own history."""
    from conftest import QuillCLI

    other = QuillCLI(tmp_path / "other home")
    _push(other, "theirs", 0, 30, pad=100)
    other.drain()
    _push(quill, "mine", 0, 5)
    quill.wait_idle()
    quill.run("snapshot")
    _push(quill, "mine", 5, 5)
    quill.wait_idle()
    quill.run("jobs", "run", "wal_checkpoint", "--mode", "truncate", "--wait", "30")
    before = sorted(p.name for p in (home / "snapshots").glob("snapshot-*.db"))
    shutil.copyfile(other.home / "state.db", home / "state.db.restore")
    os.replace(home / "state.db.restore", home / "state.db")
    assert _wait_halt(home)["cause"] == "ReplacedError"
    out = quill.run("snapshot", check=False)
    assert out.returncode == 1, (out.stdout, out.stderr)
    assert "not an error" not in out.stderr
    assert "halted" in out.stderr and "was replaced" in out.stderr, out.stderr
    assert "quill: hint: run `quill recover`" in out.stderr, out.stderr
    js = quill.run("snapshot", "--json", check=False)
    error = json.loads(js.stdout)["error"]
    assert js.returncode == 1 and error["kind"] == "damaged" and "halted" in error["message"], (
        js.stdout
    )
    assert sorted(p.name for p in (home / "snapshots").glob("snapshot-*.db")) == before
    assert not list((home / "snapshots").glob(".snapshot-*")), "no temporary copy is left behind"
    _recover_and_check(quill, home, "mine", 10)


def test_recover_refuses_a_healthy_running_store(quill, home, fleet):
    _push(quill, "h", 0, 5)
    quill.wait_idle()
    proc = quill.run("recover", check=False)
    assert proc.returncode == 1 and "not halted" in proc.stderr


def test_doctor_reports_halt_and_exits_1(quill, home, fleet):
    _push(quill, "x", 0, 5)
    quill.wait_idle()
    assert quill.run("doctor", check=False).returncode == 0
    os.unlink(str(home / "state.db") + "-wal")
    _wait_halt(home)
    checks = {c["check"]: c for c in json.loads(quill.run("doctor", "--json", check=False).stdout)}
    assert checks["halt"]["status"] == "fail" and "quill recover" in checks["halt"]["detail"]
    assert checks["sqlite (store)"]["status"] == "ok"


def test_a_deleted_store_with_collected_history_halts_instead_of_starting_empty(quill, home):
    _seed_and_snapshot(quill, "g", 60)
    for suffix in ("", "-wal", "-shm"):
        path = home / f"state.db{suffix}"
        if path.exists():
            path.unlink()
    _push(quill, "g", 60, 20)
    fleet = quill.start_fleet()
    try:
        halt = _wait_halt(home)
        assert halt["cause"] == "StoreMissing" and not (home / "state.db").exists()
        out = quill.json("recover")
        assert out["snapshot"] is not None
        quill.wait_idle()
        assert _ids(home) == _expect("g", 80)
    finally:
        assert stop_fleet(fleet) == 0


def test_recover_refuses_to_rebuild_from_a_spool_missing_its_history(quill, home):
    segments = _seed_segmented(quill, home, "p")
    assert len(segments) >= 2
    segments[0].unlink()  # as spool GC would, once a (now lost) snapshot covered it
    (home / "state.db").unlink()
    proc = quill.run("recover", check=False)
    assert (
        proc.returncode == 1 and "--accept-loss" in proc.stderr and "segments 1..1" in proc.stderr
    )
    assert not (home / "state.db").exists()
    forced = quill.run("recover", "--accept-loss", "--json", check=False)
    assert forced.returncode == 0 and "WARNING" in forced.stderr


def test_quick_check_finding_damage_in_messages_halts_the_writer(quill, home):
    _seed_and_snapshot(quill, "q", 400)
    damage_pages(home / "state.db", "messages", leaves_only=True)
    fleet = quill.start_fleet()
    try:
        out = quill.run("jobs", "run", "quick_check", "--wait", "60", "--json", check=False)
        assert (
            out.returncode == 1
            and "canonical=['messages']" in json.loads(out.stdout)["run"]["error"]
        )
        halt = _wait_halt(home)
        assert halt["cause"] == "CorruptError" and "quick_check" in halt["detail"]
        st = quill.run("status", check=False)
        assert st.returncode == 1 and "HALTED" in st.stdout
        _push(quill, "q", 400, 20)
        _recover_and_check(quill, home, "q", 420)
        time.sleep(1.0)  # the stale halt request, if any, must not halt the recovered store
        assert not (home / "run" / "halt.json").exists()
    finally:
        assert stop_fleet(fleet) == 0


def test_truncated_store_halts_and_status_still_answers(quill, home, fleet):
    _push(quill, "t", 0, 50)
    quill.wait_idle()
    quill.run("snapshot")
    os.truncate(home / "state.db", 0)
    halt = _wait_halt(home)
    assert halt["cause"] == "ReplacedError"
    st = quill.run("status", "--json", check=False)
    assert st.returncode == 1 and json.loads(st.stdout)["fleet"]["halt"]["next"] == "quill recover"
    assert quill.run("doctor", check=False).returncode == 1
    _push(quill, "t", 50, 10)
    _recover_and_check(quill, home, "t", 60)


def test_recover_salvages_rows_the_spool_no_longer_has(quill, home):
    first = _seed_segmented(quill, home, "s")[0]
    first.unlink()  # lost outside Quill's rules: no snapshot covers it
    proc = quill.run("recover", check=False)  # no halt, no writer: recover refuses the gap
    assert proc.returncode == 1 and "--accept-loss" in proc.stderr
    out = quill.json("recover", "--accept-loss", check=False)
    assert out["salvage"]["salvaged_messages"] > 0 and out["salvage"]["unreadable_message_ids"] == 0
    assert _ids(home) == _expect("s", 60)  # every message: replayed or salvaged from the old file
    with Reader(home / "state.db") as r:
        salvaged = r.conn.execute(
            "SELECT count(*) FROM messages WHERE extra LIKE '%salvaged_from%'"
        ).fetchone()[0]
    assert salvaged == out["salvage"]["salvaged_messages"]


def test_salvage_keeps_session_metadata_and_transcript_order(quill, home):
    """The oldest segment (with the session.create ops and m1 m2) is lost;
    recover --accept-loss must fill the sessions' columns from the old file and keep model
    order m1 m2 m3 m4 (then m5, which only the spool held)."""
    home.mkdir(parents=True)
    (home / "config.toml").write_text("[spool]\nsegment_bytes = 4096\n")  # the smallest allowed
    pad = "x" * 4100  # every record fills its segment: one record per segment
    first = [
        {
            "op": "session.create",
            "data": {
                "session_id": "root",
                "source": "cli",
                "title": "Root chain",
                "meta": {"pad": pad},
            },
        },
        {
            "op": "session.create",
            "data": {
                "session_id": "tip",
                "source": "cli",
                "title": "Tip",
                "model": "gpt-x",
                "parent_id": "root",
                "parent_kind": "compression",
                "meta": {"pad": pad},
            },
        },
        {
            "op": "usage.record",
            "data": {
                "session_id": "tip",
                "task": "title",
                "usage": {"prompt_tokens": 10, "completion_tokens": 5},
            },
        },
        {
            "op": "messages.append",
            "data": {
                "session_id": "tip",
                "messages": [
                    {"role": "user", "content": "m1", "id": "m1"},
                    {"role": "assistant", "content": "m2", "id": "m2", "pad": pad},
                ],
            },
        },
    ]
    quill.run("push", input="\n".join(json.dumps(o) for o in first))
    assert len(list((home / "spool").glob("*.jsonl"))) == 3
    quill.run(
        "push",
        input=json.dumps(
            {
                "op": "messages.append",
                "data": {
                    "session_id": "tip",
                    "messages": [
                        {"role": "user", "content": "m3", "id": "m3"},
                        {"role": "assistant", "content": "m4", "id": "m4", "pad": pad},
                    ],
                },
            }
        ),
    )
    quill.drain()
    quill.run(
        "push",
        input=json.dumps(
            {
                "op": "messages.append",
                "data": {
                    "session_id": "tip",
                    "messages": [{"role": "user", "content": "m5", "id": "m5"}],
                },
            }
        ),
    )  # spooled, not yet in state.db
    segments = sorted((home / "spool").glob("*.jsonl"))
    assert len(segments) == 5
    for seg in segments[:3]:  # the oldest segments, lost outside Quill's rules
        seg.unlink()
    out = quill.json("recover", "--accept-loss", check=False)
    assert out["salvage"]["salvaged_messages"] == 2 and out["salvage"]["filled_sessions"] == 1
    assert out["salvage"]["salvaged_usage"] == 1
    with Reader(home / "state.db") as r:
        model = [m["content"] for m in r.get_messages("tip", projection="model")]
        rows = {
            row[0]: row[1:]
            for row in r.conn.execute(
                "SELECT id, title, source, model, parent_id, parent_kind FROM sessions"
            )
        }
        ids = [row[0] for row in r.conn.execute("SELECT ext_id FROM messages ORDER BY id")]
        assert [h["message_id"] for h in r.search("m1")] != []
    assert model == ["m1", "m2", "m3", "m4", "m5"]
    assert ids == ["m1", "m2", "m3", "m4", "m5"]
    assert rows["tip"] == ("Tip", "cli", "gpt-x", "root", "compression")
    assert rows["root"] == ("Root chain", "cli", None, None, None)
    # The salvaged rows are in no spool record: recover snapshotted the rebuilt store, so the
    # next recovery (no --accept-loss needed any more) still has them, in order.
    assert out["salvage"]["snapshot"]
    for path in home.glob("state.db*"):
        path.unlink()
    quill.run("recover")
    with Reader(home / "state.db") as r:
        assert [row[0] for row in r.conn.execute("SELECT ext_id FROM messages ORDER BY id")] == ids

"""``quill sessions delete --purge``: a deleted session's content leaves spool
segments, the quarantine and snapshots; every other record keeps its bytes and position; a
crash (real kill -9) at any step loses nothing and a re-run finishes; the store rebuilt from
the remaining snapshot + spool equals the live store."""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from conftest import REPO
from purge_helpers import PurgeHome, check_unchanged_except_tombstones, files_holding
from rebuild_helpers import SEEDS, SESSIONS, Run, dump

from quill.ops.purge.procedure import purge
from quill.ops.recover.replay import replay, verify
from quill.spool import Position, Quarantine, Spool, SpoolReader
from quill.spool.purge import seal
from quill.spool.segments import list_segments, segment_name

SECRET = b"SECRET-b"
IMAGE = "data:image/png;base64," + base64.b64encode(b"SECRET-b-attachment" * 40).decode()


def populate(h: PurgeHome) -> dict:
    """Sessions a (kept), b (deleted), b-sub (b's delegate, goes with it), c (b's branch, kept
    and detached); a quarantined record of b; a snapshot before and one after the delete."""
    h.append("session.create", {"session_id": "a", "source": "cli", "system_prompt": "PROMPT-a"})
    h.append(
        "session.create",
        {
            "session_id": "b",
            "source": "cli",
            "key": "chat:b",
            "system_prompt": "SECRET-b-prompt",
            "tools": [{"name": "SECRET-b-tool"}],
        },
    )
    h.say("a", "hello a 1")
    h.say("b", "SECRET-b-1", "SECRET-b-2")
    h.append(
        "messages.append",
        {
            "session_id": "b",
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "SECRET-b-see"},
                        {"type": "image_url", "image_url": {"url": IMAGE}},
                    ],
                }
            ],
        },
    )
    h.append(
        "usage.record",
        {
            "session_id": "b",
            "task": "title",
            "model": "gpt-4o",
            "response_id": "SECRET-b-resp",
            "usage": {"prompt_tokens": 10, "completion_tokens": 2},
        },
    )
    h.append(
        "messages.append",
        {"session_id": "b", "messages": [{"role": 5, "content": "SECRET-b-quarantined"}]},
    )
    h.append("session.create", {"session_id": "b-sub", "parent_id": "b", "parent_kind": "delegate"})
    h.say("b-sub", "SECRET-b-sub")
    h.append("session.create", {"session_id": "c", "parent_id": "b", "parent_kind": "branch"})
    h.say("c", "c keeps its own words")
    h.say("a", "hello a 2")
    h.drain()
    before = h.snapshot()
    h.say("a", "hello a 3")
    ack = h.append(
        "sessions.delete",
        {"session_ids": ["b"], "reason": "user_request", "actor": "user:test", "purge": True},
    )
    h.say("a", "hello a 4")
    h.drain()
    after = h.snapshot()
    assert Quarantine(h.spool_dir).count() == 1
    return {"delete": ack, "before": before, "after": after}


def test_purge_removes_the_session_everywhere_and_nothing_else(tmp_path):
    h = PurgeHome(tmp_path / "home")
    facts = populate(h)
    assert files_holding(h.root, SECRET)  # before: spool, quarantine and snapshots hold b
    live_before = dump(h.db)
    segs = h.segments()
    figures = h.purge("b")

    assert figures["sessions"] == ["b", "b-sub"]
    assert files_holding(h.root, SECRET) == []
    # b's 5 records and b-sub's 2 (the quarantined one included: it is in the segment too)
    assert check_unchanged_except_tombstones(segs, h.segments()) == figures["records_purged"] == 7
    assert figures["sealed"] and len(list_segments(h.spool_dir)) == len(segs) + 1
    assert len(figures["quarantine_purged"]) == 1 and Quarantine(h.spool_dir).count() == 0
    assert [a["action"] for a in Quarantine(h.spool_dir).audit()] == ["purge"]
    assert figures["snapshots_removed"] == [facts["before"].name]
    assert figures["snapshots_compacted"] == [facts["after"].name]
    # the delete op stays: who deleted what and why, and no content
    deletes = [
        e.record
        for e in SpoolReader(h.spool_dir).read(Position(1, 0), max_bytes=1 << 30)
        if e.record and e.record["op"] == "sessions.delete"
    ]
    assert [d["data"]["session_ids"] for d in deletes] == [["b"]] and deletes[0]["batch"] == facts[
        "delete"
    ].batch_id
    assert verify(h.spool_dir)["damaged"] == []
    # the live store is untouched by the purge; c was detached by the delete
    assert dump(h.db) == live_before
    assert [r[5:7] for r in live_before["sessions"] if r[0] == "c"] == [(None, None)]
    # the store rebuilt from every remaining snapshot + the spool equals the live store
    remaining = sorted(h.snapshots.glob("snapshot-*.db"))
    assert len(remaining) == 2
    for i, snap in enumerate(remaining):
        target = tmp_path / f"rebuilt-{i}.db"
        shutil.copyfile(snap, target)
        replay(h.spool_dir, target, None, quarantine=Quarantine.for_store(target))
        assert dump(target) == dump(h.db)
    # idempotent: a second run changes nothing
    again = h.purge("b")
    assert again["records_purged"] == 0 and again["quarantine_purged"] == []


def test_producers_leave_a_sealed_segment_and_the_writer_follows(tmp_path):
    h = PurgeHome(tmp_path / "home")
    first = h.say("a", "one")
    assert seal(h.spool_dir, first.position.segment)
    sealed = (h.spool_dir / segment_name(first.position.segment)).read_bytes()
    later = h.say("a", "two")  # the same handle, its descriptor still on the sealed segment
    other = Spool(h.spool_dir).append(
        "messages.append", {"session_id": "a", "messages": [{"role": "user", "content": "3"}]}
    )
    assert later.position.segment == other.position.segment == first.position.segment + 1
    assert (h.spool_dir / segment_name(first.position.segment)).read_bytes() == sealed
    h.drain()
    assert [r[4] for r in dump(h.db)["messages"]] == ["one", "two", "3"]
    assert not seal(h.spool_dir, first.position.segment)  # not the newest any more


def test_purge_refuses_a_live_session_and_an_undeleted_one(tmp_path):
    from quill.ops.client.errors import InvalidInputError, NotFoundError

    h = PurgeHome(tmp_path / "home")
    h.say("a", "hi")
    h.say("gone", "bye")
    h.drain()
    with pytest.raises(InvalidInputError):
        h.purge("a")
    with pytest.raises(NotFoundError):
        h.purge("never-deleted")
    h.append("sessions.delete", {"session_ids": ["gone"]})
    with pytest.raises(InvalidInputError):  # spooled but not applied yet: it still exists
        h.purge("gone")
    h.drain()
    assert h.purge("gone")["records_purged"] == 1


_DRIVER = """
import sys, time
from pathlib import Path
from quill.ops.purge.procedure import purge
root, at = Path(sys.argv[1]), sys.argv[2]
def step(name):
    if name.startswith(at):
        (root / "at-step").write_text(name)
        time.sleep(600)
purge(root / "spool", root / "state.db", root / "snapshots", ["b"], on_step=step)
(root / "finished").write_text("yes")
"""

STEPS = [
    "planned",
    "sealed",
    "tmp-written",
    "renamed",
    "segment-",
    "quarantine",
    "snapshot",
    "snapshot-",
]


@pytest.mark.parametrize("at", STEPS)
def test_kill_9_at_each_step_loses_nothing_and_a_rerun_finishes(tmp_path, at):
    h = PurgeHome(tmp_path / "home")
    populate(h)
    segs = h.segments()
    live = dump(h.db)
    proc = subprocess.Popen(
        [sys.executable, "-c", _DRIVER, str(h.root), at],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    while not (h.root / "at-step").exists():
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (h.root / "finished").exists()
    # nothing lost: every segment line is the original or a whole tombstone, every other byte equal
    check_unchanged_except_tombstones(segs, {n: b for n, b in h.segments().items() if n in segs})
    assert verify(h.spool_dir)["damaged"] == []
    assert dump(h.db) == live
    assert sorted(h.snapshots.glob("snapshot-*.db"))  # a verified recovery point always exists
    figures = h.purge("b")
    assert files_holding(h.root, SECRET) == []
    assert not list(h.spool_dir.glob("*.purge-tmp")) and not list(h.snapshots.glob(".*.tmp"))
    assert (
        check_unchanged_except_tombstones(
            segs, {n: b for n, b in h.segments().items() if n in segs}
        )
        == 7
    )
    for snap in sorted(h.snapshots.glob("snapshot-*.db")):
        target = tmp_path / f"rebuilt-{snap.name}"
        shutil.copyfile(snap, target)
        replay(h.spool_dir, target, None, quarantine=Quarantine.for_store(target))
        assert dump(target) == live, snap.name
    assert figures["sessions"] == ["b", "b-sub"]


def _push(quill, ops: list[dict]) -> None:
    quill.run("push", input="\n".join(json.dumps(o) for o in ops))


def _ops(sid: str, text: str, **create) -> list[dict]:
    return [
        {"op": "session.create", "data": {"session_id": sid, **create}},
        {
            "op": "messages.append",
            "data": {"session_id": sid, "messages": [{"role": "user", "content": text}]},
        },
    ]


def test_cli_delete_purge_with_a_running_fleet(quill, fleet):
    _push(
        quill,
        _ops("a", "alpha words")
        + _ops("b", "SECRET-b words", key="chat:b")
        + _ops("b2", "SECRET-b again", key="chat:b"),
    )
    quill.wait_idle()
    quill.run("snapshot")
    out = quill.json("sessions", "delete", "--key", "chat:b", "--purge", "--yes", "--wait", "120")
    assert out["session_ids"] == ["b", "b2"]
    figures = out["purge"]
    assert (
        figures["sessions"] == ["b", "b2"] and figures["records_purged"] == 4 and figures["sealed"]
    )
    assert len(figures["snapshots_removed"]) == 1 and figures["snapshot"]
    assert files_holding(quill.home, SECRET) == []
    # producers moved on to the new segment; the fleet keeps applying
    _push(quill, _ops("c", "after the purge"))
    quill.wait_idle()
    assert sorted(s["id"] for s in quill.json("sessions", "list", "--all")["sessions"]) == [
        "a",
        "c",
    ]
    assert quill.json("search", "SECRET")["hits"] == []
    assert quill.json("spool", "verify")["damaged"] == []


def test_cli_purge_later_and_its_refusals(quill):
    _push(quill, _ops("a", "alpha") + _ops("b", "SECRET-b text"))
    quill.drain()
    # no writer running: the delete is spooled, the purge waits and says what to run later
    late = quill.run("sessions", "delete", "b", "--purge", "--yes", "--wait", "0.2", check=False)
    assert late.returncode == 4 and "quill spool purge b" in late.stderr
    # with the default wait it does not sit out 60 s when no fleet would apply the delete
    t0 = time.monotonic()
    soon = quill.run("sessions", "delete", "b", "--purge", "--yes", check=False)
    assert soon.returncode == 4 and "no fleet is running" in soon.stderr, soon.stderr
    assert time.monotonic() - t0 < 30
    assert (
        quill.run("spool", "purge", "b", check=False).returncode == 2
    )  # not applied yet: still exists
    quill.drain()
    assert quill.run("spool", "purge", "a", check=False).returncode == 2  # alive
    assert quill.run("spool", "purge", "zz", check=False).returncode == 3  # never deleted
    figures = quill.json("spool", "purge", "b")
    assert figures["records_purged"] == 2
    assert files_holding(quill.home, SECRET) == []
    assert quill.json("spool", "purge", "b")["records_purged"] == 0


@pytest.mark.parametrize("seed", SEEDS)
def test_property_purge_then_every_remaining_snapshot_plus_spool_equals_the_live_store(
    tmp_path, seed
):
    """Random op sequences (tests/test_property_rebuild.py: every op kind, jobs, snapshots,
    quarantined records); then every deleted session absent from the store is purged. The
    spool keeps every other line's bytes, holds no record of a purged session before its
    delete, and each remaining snapshot + replay equals the live store."""
    run = Run(tmp_path, seed)
    try:
        run.sequence(70)
        run.spool.append(
            "sessions.delete",
            {
                "session_ids": run.rng.sample(SESSIONS, 2),
                "reason": "user_request",
                "actor": "user:property",
                "purge": True,
            },
        )
        run.drain()
        deleted = {
            sid
            for e in SpoolReader(run.spool_dir).read(Position(1, 0), max_bytes=1 << 30)
            if e.record and e.record["op"] == "sessions.delete"
            for sid in e.record["data"]["session_ids"]
        }
        gone = sorted(
            s
            for s in deleted
            if not run.conn.execute("SELECT 1 FROM sessions WHERE id = ?", (s,)).fetchone()
        )
        segs = {
            n: (run.spool_dir / segment_name(n)).read_bytes() for n in list_segments(run.spool_dir)
        }
        live = dump(run.db)
        figures = purge(run.spool_dir, run.db, tmp_path / "snapshots", gone) if gone else None
    finally:
        run.close()
    assert dump(run.db) == live
    if figures is None:
        pytest.skip(f"seed {seed} deleted no session for good")
    after = {
        n: (run.spool_dir / segment_name(n)).read_bytes() for n in list_segments(run.spool_dir)
    }
    assert check_unchanged_except_tombstones(segs, after) == figures["records_purged"]
    entries = list(SpoolReader(run.spool_dir).read(Position(1, 0), max_bytes=1 << 30))
    bounds = {
        sid: e.position
        for e in entries
        if e.record and e.record["op"] == "sessions.delete"
        for sid in e.record["data"]["session_ids"]
    }
    for e in entries:
        rec = e.record
        if (
            rec
            and rec["op"] not in ("spool.purged", "sessions.delete")
            and isinstance(rec["data"], dict)
        ):
            sid = rec["data"].get("session_id")
            assert not (sid in gone and e.position < bounds[sid]), (sid, e.position)
    snaps = sorted((tmp_path / "snapshots").glob("snapshot-*.db"))
    assert snaps
    for i, snap in enumerate(snaps):
        target = tmp_path / f"rebuilt-{i}.db"
        shutil.copyfile(snap, target)
        replay(run.spool_dir, target, None, quarantine=Quarantine.for_store(target))
        assert dump(target) == live, snap.name


def test_a_line_too_damaged_to_attribute_is_reported_not_guessed_at(tmp_path):
    """A spool line before the delete whose JSON no longer parses may be the purged session's:
    the purge leaves it (it cannot tell whose it is) and lists its position in ``damaged``."""
    h = PurgeHome(tmp_path / "home")
    h.append("session.create", {"session_id": "x", "source": "cli"})
    h.say("x", "WORD-x-secret mangled")
    seg = h.spool_dir / segment_name(1)
    data = bytearray(seg.read_bytes())
    at = data.find(b'"session_id":"x","messages"')
    data[at] = ord("{")  # the JSON body no longer parses
    seg.write_bytes(bytes(data))
    h.drain()
    h.append("sessions.delete", {"session_ids": ["x"], "purge": True, "reason": "user_request"})
    h.drain()
    line_start = bytes(data).rfind(b"\n", 0, at) + 1
    assert h.purge("x")["damaged"] == [f"1:{line_start}"]

"""A long-lived producer handle whose segment was sealed (a purge, or another producer's
rotation at a smaller ``segment_bytes``) and then garbage-collected together with the segment
after it: its next append must go to the newest segment, never into the deleted file (an
acknowledged record nobody can read). And ``wait`` on a batch the store never saw says so
instead of calling it quarantined."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import stop_fleet

import quill as quill_pkg
from quill.spool import START, Ack, Position, Spool, SpoolReader, purge, retention
from quill.spool.segments import list_segments

MSG = {"session_id": "agent", "messages": [{"role": "user", "content": "turn"}]}


def _fill_to_segment(spool_dir: Path, segment: int) -> None:
    """Another producer (rotating at 4 KiB) appends until segment ``segment`` exists."""
    with Spool(spool_dir, segment_bytes=4096) as busy:
        while max(list_segments(spool_dir)) < segment:
            busy.append(
                "messages.append",
                {"session_id": "busy", "messages": [{"role": "user", "content": "x" * 900}]},
            )


def _collect_all_but_newest(spool_dir: Path) -> list[int]:
    newest = max(list_segments(spool_dir))
    done = Position(newest, 0)
    return retention.collect(spool_dir, done, done, retention_s=0)["deleted"]


@pytest.mark.parametrize("retired_by", ["purge-seal", "rotation-at-a-smaller-size"])
def test_append_after_its_segment_was_collected_lands_in_the_newest(tmp_path, retired_by):
    spool_dir = tmp_path / "spool"
    agent = Spool(spool_dir, segment_bytes=1 << 20)  # long-lived, and a larger rotation size
    first = agent.append("messages.append", MSG)
    assert first.position.segment == 1
    if retired_by == "purge-seal":
        assert purge.seal(spool_dir, 1)  # segment 1 retired at a few hundred bytes
    _fill_to_segment(spool_dir, 3)
    assert _collect_all_but_newest(spool_dir) == [1, 2]

    second = agent.append("messages.append", MSG)
    assert second.position.segment == 3, f"acknowledged into a deleted segment: {second}"
    read = {
        e.record["batch"]: e.position
        for e in SpoolReader(spool_dir).read(START, max_bytes=1 << 30)
        if e.record
    }
    assert read[second.batch_id] == second.position
    agent.close()


def test_append_after_only_its_own_segment_was_unlinked_moves_on(tmp_path):
    """The segment after ours still exists but ours is gone: the seal check alone would move
    on too; the unlink check must not get in its way (and a group-commit handle likewise)."""
    spool_dir = tmp_path / "spool"
    agent = Spool(spool_dir, segment_bytes=1 << 20, group_commit=True)
    agent.append("messages.append", MSG)
    _fill_to_segment(spool_dir, 3)
    os.unlink(spool_dir / "00000001.jsonl")
    ack = agent.append("messages.append", MSG)
    assert ack.position.segment == 3
    agent.close()


def test_client_append_after_purge_and_spool_gc_is_applied(home, quill):
    """The scenario end to end, through the CLI and a running fleet: purge seals,
    GC deletes the sealed segment and the next, and the long-lived agent's second turn is
    applied."""
    home.mkdir(parents=True)
    (home / "config.toml").write_text("[spool]\nsegment_bytes = 4096\nretention_s = 0\n")
    fleet = quill.start_fleet()
    try:
        agent = quill_pkg.Client(home)
        assert (
            agent.wait(
                agent.append("agent", [{"role": "user", "content": "first turn"}]), 60
            ).status
            == "applied"
        )
        other = quill_pkg.Client(home)
        assert (
            other.wait(other.append("secret", [{"role": "user", "content": "hunter2"}]), 60).status
            == "applied"
        )
        quill.run("sessions", "delete", "secret", "--yes", "--purge", "--wait", "60")
        _fill_to_segment(home / "spool", max(list_segments(home / "spool")) + 2)
        quill.wait_idle()
        quill.run("snapshot")
        quill.run("jobs", "run", "spool_gc", "--wait", "60")
        assert 1 not in list_segments(home / "spool")

        ack = agent.append("agent", [{"role": "user", "content": "second turn"}])
        assert agent.wait(ack, 60).status == "applied"
        assert [m["content"] for m in agent.messages("agent")] == ["first turn", "second turn"]
    finally:
        assert stop_fleet(fleet) == 0


def test_wait_on_a_batch_the_store_never_saw_is_not_called_quarantined(home, quill):
    client = quill_pkg.Client(home)
    real = client.append("s", [{"role": "user", "content": "hi"}])
    quill.drain()
    ghost = Ack(
        real.position, "00000000-0000-4000-8000-000000000000"
    )  # nothing was appended for it
    outcome = client.wait(ghost, 10)
    assert outcome.status == "missing"
    assert outcome.reason == "not-found"
    assert client.wait(real, 10).status == "applied"

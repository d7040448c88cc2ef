"""Layer 0 (``quill.home``): the run directory's typed records, the one defaults table, and the
fire reference the scheduler hands down to persisted schedules."""

from __future__ import annotations

import inspect
import json
import multiprocessing
import os

import pytest

from quill import home
from quill.home import DEFAULTS, Halt, RunDir, SwapRequest


def test_a_halt_round_trips_and_names_its_store_file(tmp_path):
    store = tmp_path / "state.db"
    store.write_bytes(b"x")
    rd = RunDir(tmp_path)
    rd.path.mkdir()
    cause = Halt("CorruptError", "quick_check: messages", 1.5, cursor="3:40")
    assert Halt.from_json(cause.to_json()) == cause
    assert rd.record_halt(cause, store)
    recorded = json.loads(rd.halt_file.read_text())
    assert recorded["store_ino"] == os.stat(store).st_ino and recorded["pid"] == os.getpid()
    assert rd.halt(store) == cause._replace(store_ino=os.stat(store).st_ino)
    replaced = tmp_path / "new.db"
    replaced.write_bytes(b"y")
    os.replace(replaced, store)  # another file in place: the halt is history
    assert rd.halt(store) is None


def test_a_halt_written_before_halts_named_their_file_still_applies(tmp_path):
    rd = RunDir(tmp_path)
    rd.path.mkdir()
    rd.halt_file.write_text(json.dumps({"cause": "CorruptError", "detail": "old"}))
    halt = rd.halt(tmp_path / "state.db")
    assert halt is not None and halt.store_ino == home.ANY_STORE and halt.next == "quill recover"
    assert "store_ino" not in halt.to_json()
    assert halt.at is None  # an unreadable time stays unknown, never 0 or "now"
    bad = Halt.from_json({"cause": "CorruptError", "at": "yesterday"})
    assert bad is not None and bad.at is None
    rd.halt_file.write_text("{}")  # an empty record is no halt
    assert rd.halt(tmp_path / "state.db") is None


def test_a_swap_request_counts_only_while_its_requester_lives(tmp_path):
    rd = RunDir(tmp_path)
    rd.path.mkdir()
    rd.request_swap(tmp_path / "rebuilt.db")
    assert rd.swap_request() == SwapRequest(tmp_path / "rebuilt.db")
    child = multiprocessing.Process(target=os.getpid)
    child.start()
    child.join()
    data = json.loads(rd.swap_file.read_text())
    rd.swap_file.write_text(json.dumps({**data, "pid": child.pid, "start_ticks": 1}))  # gone
    assert rd.swap_request() is None


def test_library_defaults_are_the_settings_defaults():
    from quill.jobs import prune, worker_jobs
    from quill.spool import Spool, retention
    from quill.store.sqlite import indexer

    def default(fn, name):
        return inspect.signature(fn).parameters[name].default

    assert DEFAULTS == home.Settings(home=DEFAULTS.home)
    assert default(Spool, "segment_bytes") == DEFAULTS.segment_bytes
    assert default(retention.collect, "retention_s") == DEFAULTS.spool_retention_s
    assert default(indexer.index_slice, "max_rows") == DEFAULTS.index_slice_rows
    assert default(prune.auto_prune, "retention_s") == DEFAULTS.retention_s
    assert default(prune.auto_prune, "sources") == DEFAULTS.prune_sources
    assert default(worker_jobs.snapshot, "keep") == DEFAULTS.snapshot_keep


def test_snapshot_names_sort_by_time_and_carry_their_position():
    first, second = home.snapshot_name(12, 345, now_ns=10**18), home.snapshot_name(2, 0, 10**18 + 1)
    assert sorted([second, first]) == [first, second]
    assert home.parse_snapshot_name(first) == (12, 345)
    assert first.startswith("snapshot-") and first.endswith(".db")


def test_the_fire_reference_names_the_schedulers_fire_and_needs_a_served_data_dir():
    from apscheduler.util import ref_to_obj

    from quill.workers import FIRE_REF, scheduler

    assert ref_to_obj(FIRE_REF) is scheduler.fire
    assert FIRE_REF == "quill.workers.scheduler:fire"  # persisted in schedule rows: never changes
    if scheduler._serving is None:
        with pytest.raises(RuntimeError, match="no scheduler runs"):
            scheduler.fire("snapshot")


RUNNING_KEYS = {
    "queue_error",
    "queue_down_since",
    "idle",
    "halted",
    "cursor",
    "job",
    "error",
    "commit_hist",
    "backend",
    "spool_id",
    "applied",
    "duplicates",
    "rejected",
    "rows",
    "chunks",
    "fts_indexed_upto",
    "wal_blocked_since",
}


def test_the_writer_status_publishes_the_keys_readers_read(tmp_path):
    """``run/writer.json`` keeps its keys (``quill status --json`` shows them), and a published
    status reads back as the same record, with RunDir's stamps."""
    from quill.home import WriterStatus

    rd = RunDir(tmp_path)
    rd.path.mkdir()
    running = WriterStatus(
        idle=True,
        cursor="2:10",
        backend="sqlite",
        spool_id="s",
        applied=3,
        rows=7,
        chunks=1,
        commit_hist={"counts": [1], "count": 1, "sum": 0.1},
    )
    assert set(running.to_json()) == RUNNING_KEYS
    assert rd.publish("writer", running.to_json())
    back = WriterStatus.from_json(rd.last("writer"))
    assert back.alive and back.pid == os.getpid() and back.updated_at > 0
    assert back._replace(pid=None, updated_at=None, alive=False, age_s=None) == running
    halted = WriterStatus(
        halted=True,
        halt=Halt("CorruptError", "x", 1.0),
        cursor="2:10",
        backend="sqlite",
        spool_id="s",
    )
    assert set(halted.to_json()) == {"halted", "halt", "idle", "cursor", "backend", "spool_id"}
    assert WriterStatus.from_json(halted.to_json()) == halted
    assert WriterStatus.from_json(None) == WriterStatus() and not WriterStatus().halted
    with pytest.raises(ValueError):  # a store field that names no status field
        running._replace(**{"wal_blocked_snice": 1.0})

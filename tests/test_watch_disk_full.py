"""The watcher rides out a full disk under its data dir (the spool, ``watch-state.json``): a
round that meets it is reported once (throttled), the watcher stays up, and the next round
after space returns imports the file. The disk is really full: a small tmpfs holds the data
dir (root only; skipped where mounting is refused)."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import CORPUS, small_tmpfs
from test_bookkeeping_enospc import _events, _fill
from watch_helpers import watch_config

from quill import home as data_dir
from quill.ops import logs
from quill.ops.transfer.watch_ingest import ingest_session
from quill.spool import Position, SpoolReader
from quill.workers.watch import Watcher

pytestmark = pytest.mark.corpus

SAMPLE = CORPUS / "claude-code" / "d-kimuson__1af7fc5e-8455-4414-9ccd-011d40f70b2a.jsonl"


def test_the_watcher_stays_up_on_a_full_disk_and_imports_once_there_is_room(tmp_path):
    root = tmp_path / "agent"
    root.mkdir()
    shutil.copy(SAMPLE, root / SAMPLE.name)
    with small_tmpfs(tmp_path / "home", "2m") as home:
        watch_config(home, [root])
        cfg = data_dir.load(home)
        cfg.ensure_dirs()
        log = logs.configure(tmp_path / "logs", "watch")  # the log is not on the full disk
        watcher = Watcher(cfg, log, ingest_session(cfg, log))
        filler = _fill(home)
        for _ in range(5):  # a change or rescan each: the old watcher ended at the first
            watcher._round()
        full = _events(tmp_path / "logs" / "watch.log", "watch.disk_full")
        assert len(full) == 1, full  # once, the rest suppressed (within FULL_REPORT_S)
        assert watcher.full and not cfg.watch_state.exists()
        filler.unlink()
        watcher._round()
        assert watcher.full is None
        assert _events(tmp_path / "logs" / "watch.log", "watch.disk_writable_again")
        state = json.loads(cfg.watch_state.read_text())
        assert str(root / SAMPLE.name) in state["files"]
        assert list(SpoolReader(cfg.spool_dir).read(Position(1, 0), max_bytes=1 << 20))

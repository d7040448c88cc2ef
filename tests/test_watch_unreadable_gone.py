"""A file the watcher could not import (no importer recognised it) and that is then deleted is
forgotten, by the full scan and by its delete event alike: before, it stayed in
``watch-state.json`` and ``quill status`` listed it as unreadable for ever (every temp file an
agent wrote and removed under a root piled up there). Real files, the real watcher and spool
(in this process)."""

from __future__ import annotations

import pytest
from watch_helpers import watch_config

from quill import home as data_dir
from quill.ops import logs
from quill.ops.transfer.watch_ingest import ingest_session
from quill.workers.watch import Watcher
from quill.workers.watch_state import WatchState, lag


@pytest.mark.parametrize("how", ["scan", "event"])
def test_a_deleted_unreadable_file_is_forgotten(tmp_path, how):
    root = tmp_path / "agent"
    root.mkdir()
    home = tmp_path / "home"
    watch_config(home, [root])
    cfg = data_dir.load(home)
    cfg.ensure_dirs()
    watcher = Watcher(cfg, logs.configure(tmp_path / "logs", "watch"), ingest_session(cfg))
    bad = root / "notes.json"
    bad.write_text('{"not": "a transcript"}\n')
    watcher.round()
    assert [u["path"] for u in lag(cfg)["unreadable"]] == [str(bad)]
    bad.unlink()
    watcher.round(None if how == "scan" else [str(bad)])
    assert WatchState.load(cfg.watch_state).unreadable == {}
    assert lag(cfg)["unreadable"] == []

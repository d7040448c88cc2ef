"""``Store.maintenance("integrity_check")`` on the SQLite store whether or not the store is
connected: the PostgreSQL store's check needs no connected writer, and the SQLite one read
the writer's connection alone (``None`` once disconnected: ``AttributeError``). Real store
files."""

from __future__ import annotations

import pytest
from harness import drain, make_home

from quill.spool import Spool
from quill.store.errors import CantOpenError
from quill.store.factory import open_store


def test_integrity_check_runs_on_a_connected_and_a_disconnected_sqlite_store(tmp_path):
    cfg = make_home(tmp_path / "home")
    spool = Spool(cfg.spool_dir)
    spool.append("session.create", {"session_id": "s1", "source": "cli"})
    drain(cfg.home)
    store = open_store(cfg)  # connected
    try:
        assert store.maintenance("integrity_check") == {"ok": True, "problems": []}
        store.disconnect()
        assert store.maintenance("integrity_check") == {"ok": True, "problems": []}
        assert not store.connected  # the check opened (and closed) a connection of its own
    finally:
        store.close()


def test_integrity_check_before_the_store_file_exists_is_a_store_error(tmp_path):
    cfg = make_home(tmp_path / "home")
    store = open_store(cfg, connect=False)
    with pytest.raises(CantOpenError):
        store.maintenance("integrity_check")

"""An integer setting of ``config.toml`` must fit 64 bits: integers reach SQL (``[store]
pack_min_bytes`` is the SQL function ``quill_pack_min`` of the vacuum job's packing
statement), where a larger one raised ``OverflowError`` in the job, long after the config was
accepted. The largest allowed value works end to end: the packing statement runs on a real
store and packs nothing."""

from __future__ import annotations

import pytest
from semantics_helpers import Store

from quill.home import ConfigError, load
from quill.jobs.store_jobs import vacuum
from quill.spool import Spool
from quill.store.factory import open_url


def _config(home, section: str, key: str, value: int) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(f"[{section}]\n{key} = {value}\n")


@pytest.mark.parametrize(
    ("section", "key"),
    [("store", "pack_min_bytes"), ("writer", "chunk_rows"), ("spool", "segment_bytes")],
)
def test_an_integer_past_64_bits_is_refused_when_the_config_is_read(tmp_path, section, key):
    _config(tmp_path, section, key, 10**20)
    with pytest.raises(ConfigError, match="64-bit"):
        load(tmp_path)


def test_the_largest_pack_threshold_packs_nothing_and_the_vacuum_job_runs(tmp_path):
    _config(tmp_path, "store", "pack_min_bytes", 2**63 - 1)
    cfg = load(tmp_path)
    store = Store.__new__(Store)
    store.root, store.spool = tmp_path, Spool(tmp_path / "spool")
    store.backend = backend = open_url(
        None, tmp_path / "state.db", "test-spool", pack_min_bytes=cfg.pack_min_bytes
    )
    store.kind, store.conn = backend.kind, backend.conn
    try:
        msgs = [{"role": "user", "content": "x" * 5000, "id": "u1"}]
        assert store.apply("messages.append", {"session_id": "s", "messages": msgs}) == []
        assert vacuum(backend.conn, min_free_ratio=0.0)["packed_rows"] == 0
        assert backend.conn.execute("SELECT typeof(content) FROM messages").fetchall() == [
            ("text",)
        ]
    finally:
        backend.close()

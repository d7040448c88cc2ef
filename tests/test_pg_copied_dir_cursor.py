"""A data dir copied to a second place (``cp -a``: same spool id) reads the shared store's
cursor for that id, which is the *original's* progress. The copy's writer refuses it (the
claim, the cursor proof), but the readers trusted it as "this host's cursor": ``quill status``
reported the copy's unapplied records as applied (0 bytes pending) or its spool as cut short
("ACKNOWLEDGED RECORDS LOST"), and ``quill push --wait`` on the copy returned at once with the
batch "missing". Readers now take the cursor as this spool's only once proved against it
(``PgReader``, ``spool.cursor_proof``), as the writer does. PostgreSQL only: on SQLite a copy
carries its own ``state.db``, whose cursor is its own spool's."""

from __future__ import annotations

import subprocess

import pytest
from conftest import pg_data_dir

from quill import home as config
from quill.ops import logs
from quill.ops.client.wait import Looker, wait_applied
from quill.ops.recover.postgres import drain
from quill.ops.status import doctor, health
from quill.spool import Spool, WaitTimeoutError
from quill.store.factory import open_reader

pytest.importorskip("psycopg")


def _append(home, text: str):
    spool = Spool(home / "spool")
    try:
        return spool.append(
            "messages.append",
            {"session_id": "shared", "messages": [{"role": "user", "content": text}]},
        )
    finally:
        spool.close()


@pytest.fixture
def copied(tmp_path, pg_store_url):
    """``(original, copy)``: the original drained, copied with ``cp -a``, then one record on
    the copy (never applied: its writer is refused) and three on the original, applied, so
    the store's cursor for the shared id is past the copy's record."""
    orig, copy = tmp_path / "orig", tmp_path / "copy"
    pg_data_dir(orig, pg_store_url, 3)
    subprocess.run(["cp", "-a", str(orig), str(copy)], check=True)
    ack = _append(copy, "only on the copy")
    for i in range(3):
        _append(orig, f"original after the copy {i} " + "x" * 40)
    drain(config.load(orig), logs.configure(None, "test"))
    return orig, copy, ack


def test_the_copy_does_not_read_the_originals_cursor_as_its_own(copied):
    orig, copy, _ = copied
    with open_reader(config.load(orig)) as r:
        mine = r.figures()
    assert mine["cursor"] is not None and mine["cursor_problem"] is None
    with open_reader(config.load(copy)) as r:
        theirs = r.figures()
        assert r.applied_cursor() is None
    assert theirs["cursor"] is None
    assert "another spool" in theirs["cursor_problem"]


def test_status_and_doctor_on_the_copy_claim_neither_loss_nor_an_empty_lag(copied):
    _, copy, _ = copied
    cfg = config.load(copy)
    spool = health.collect(cfg)["spool"]
    assert spool["integrity"]["lost"] is False, spool["integrity"]["summary"]
    assert spool["pending_bytes"] is None and spool["cursor_source"] == "not-this-spool"
    lag = next(c for c in doctor.run_checks(cfg) if c["check"] == "spool lag")
    assert lag["status"] != "ok" and "not this spool's" in lag["detail"]


def test_a_wait_on_the_copy_does_not_end_on_the_originals_cursor(copied):
    _, copy, ack = copied
    with Looker(config.load(copy)) as look:
        assert look.cursor() is None
    with pytest.raises(WaitTimeoutError):
        wait_applied(config.load(copy), ack.position, timeout=1.0)

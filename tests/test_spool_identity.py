"""One live holder per spool id, and a resumed cursor proved to be this spool's.

A data dir copied with ``cp -a`` carries its ``spool-id``; two writers with one id on a shared
PostgreSQL store would share one cursor and silently skip acknowledged records (or resume in
the middle of a line). Real data dirs, real copies, the real PostgreSQL store and the
production writer: the copy (or the original, whichever claims second) is refused before it
applies anything, ``quill status`` shows why, and after ``quill spool reidentify`` every
acknowledged message is stored exactly once. A cursor shared some other way (a row copied
from another spool, a cursor moved into the middle of a line, a SQLite store restored from
another data dir) is caught on both backends. The claim needs PostgreSQL by nature."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
from conftest import QuillCLI
from harness import drain, make_home

from quill import home
from quill.ops import logs
from quill.spool import Spool
from quill.spool.identity import load_or_create
from quill.store.errors import CursorMismatchError, SpoolClaimedError
from quill.workers.writer import Writer

psycopg = pytest.importorskip("psycopg")


def _push(root: Path, session: str, *texts: str) -> list[str]:
    """Append one acknowledged batch per text (the producer API); returns the texts."""
    spool = Spool(root / "spool")
    try:
        for text in texts:
            spool.append(
                "messages.append",
                {"session_id": session, "messages": [{"role": "user", "content": text}]},
            )
    finally:
        spool.close()
    return list(texts)


def _stored(url: str) -> Counter:
    with psycopg.connect(url) as conn:
        return Counter(r[0] for r in conn.execute("SELECT content FROM messages"))


def _refused_in_status(root: Path) -> dict:
    """Step the production writer of ``root`` once in this process and return the halt
    ``quill status`` reports for it (the writer stays up, refused, while status runs)."""
    cfg = home.load(root)
    writer = Writer(cfg, logs.configure(cfg.logs_dir, "writer"))
    writer.initialize()
    try:
        writer.loop_once(time.monotonic())
        return QuillCLI(root).status()["fleet"]["halt"]
    finally:
        writer.shutdown()


@pytest.mark.parametrize("order", ["original_first", "copy_first"])
def test_a_copied_data_dir_is_refused_and_reidentify_stores_every_ack_exactly_once(
    tmp_path, pg_store_url, order
):
    a, b = tmp_path / "A", tmp_path / "B"
    make_home(a, pg_store_url)
    acked = _push(a, "s-a", "a0 before the copy")
    load_or_create(a / "spool-id")  # made on first use: the data dir has been used
    subprocess.run(["cp", "-a", str(a), str(b)], check=True)
    assert load_or_create(a / "spool-id") == load_or_create(b / "spool-id")
    if order == "original_first":
        acked += _push(a, "s-a", "a1", "a2", "a3 a longer message", "a4")
        drain(a)
        acked += _push(b, "s-b", "b1", "b2")
        first, refused = a, b
    else:
        acked += _push(b, "s-b", "b1", "b2")
        drain(b)
        acked += _push(a, "s-a", "a1", "a2", "a3 a longer message", "a4")
        first, refused = b, a
    before = _stored(pg_store_url)
    with pytest.raises(SpoolClaimedError):
        drain(refused)
    assert _stored(pg_store_url) == before  # refused before it applied anything
    halt = _refused_in_status(refused)
    assert halt["cause"] == "SpoolClaimedError" and halt["next"] == "quill spool reidentify"
    assert "claimed" in halt["detail"]
    old = load_or_create(refused / "spool-id")
    out = QuillCLI(refused).json("spool", "reidentify")
    assert out["old"] == old and out["new"] == load_or_create(refused / "spool-id") != old
    drain(refused)
    drain(first)  # the holder goes on with its own cursor
    stored = _stored(pg_store_url)
    assert {text: stored[text] for text in acked} == dict.fromkeys(acked, 1)
    assert sum(stored.values()) == len(acked)
    assert not list((refused / "spool" / "quarantine").glob("*.json"))


def test_the_same_data_dir_restarted_takes_its_own_claim_back_and_a_lost_claim_applies_nothing(
    tmp_path, pg_store_url
):
    a = tmp_path / "A"
    make_home(a, pg_store_url)
    _push(a, "s", "one")
    drain(a)
    _push(a, "s", "two")
    drain(a)  # restarted at once: same holder, no wait for its own claim to expire
    assert _stored(pg_store_url) == Counter({"one": 1, "two": 1})
    cfg = home.load(a)
    writer = Writer(cfg, logs.configure(cfg.logs_dir, "writer"))
    writer.initialize()
    try:
        writer.loop_once(time.monotonic())  # connected, claim renewed
        sid = load_or_create(a / "spool-id")
        with psycopg.connect(pg_store_url, autocommit=True) as conn:  # taken over meanwhile
            conn.execute(
                "UPDATE spool_claims SET holder = 'another-host', deadline = deadline + 600 "
                "WHERE spool_id = %s",
                (sid,),
            )
        _push(a, "s", "three")
        writer.loop_once(time.monotonic())
        assert writer.refusal is not None and writer.refusal.cause == "SpoolClaimedError"
        assert "three" not in _stored(pg_store_url)
    finally:
        writer.shutdown()


def _pg_cursor(url: str, spool_id: str) -> tuple[int, int]:
    with psycopg.connect(url) as conn:
        return conn.execute(
            'SELECT segment, "offset" FROM spool_cursor WHERE spool_id = %s', (spool_id,)
        ).fetchone()


@pytest.mark.parametrize("how", ["another_spools_cursor", "mid_line", "mid_line_unproved"])
def test_a_cursor_that_is_not_this_spools_halts_the_writer_instead_of_skipping(
    tmp_path, pg_store_url, how
):
    c, d = tmp_path / "C", tmp_path / "D"
    make_home(c, pg_store_url)
    make_home(d, pg_store_url)
    _push(d, "s-d", "d1 a somewhat longer message than C's", "d2", "d3", "d4")
    drain(d)
    _push(c, "s-c", "c1", "c2")
    drain(c)
    cid, did = load_or_create(c / "spool-id"), load_or_create(d / "spool-id")
    assert cid != did
    seg, off = _pg_cursor(pg_store_url, did if how == "another_spools_cursor" else cid)
    if how != "another_spools_cursor":
        off -= 7  # inside C's last line
    with psycopg.connect(pg_store_url, autocommit=True) as conn:
        conn.execute(
            'UPDATE spool_cursor SET segment = %s, "offset" = %s WHERE spool_id = %s',
            (seg, off, cid),
        )
        if how == "mid_line_unproved":  # a cursor written before proofs were kept
            conn.execute("UPDATE spool_cursor SET proof = NULL WHERE spool_id = %s", (cid,))
    _push(c, "s-c", "c3")
    with pytest.raises(CursorMismatchError):
        drain(c)
    assert "c3" not in _stored(pg_store_url)
    assert not list((c / "spool" / "quarantine").glob("*.json"))


def test_a_sqlite_store_restored_from_another_data_dir_is_caught(tmp_path):
    e, f = tmp_path / "E", tmp_path / "F"
    make_home(e)
    make_home(f)
    _push(f, "s-f", "f1 a longer message than E has", "f2", "f3")
    drain(f)
    _push(e, "s-e", "e1", "e2")
    drain(e)
    for suffix in ("", "-wal", "-shm"):  # E's store "restored" from F's backup
        Path(f"{e / 'state.db'}{suffix}").unlink(missing_ok=True)
    shutil.copy2(f / "state.db", e / "state.db")
    _push(e, "s-e", "e3")
    with pytest.raises(CursorMismatchError):
        drain(e)
    halt = _refused_in_status(e)
    assert halt["cause"] == "CursorMismatchError" and halt["next"] == "quill recover"
    assert not list((e / "spool" / "quarantine").glob("*.json"))

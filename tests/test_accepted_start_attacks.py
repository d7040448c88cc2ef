"""Attacks on the accepted start (``RunDir.accept_start``, ``quill recover --accept-loss``,
``quill spool reidentify``): a store that holds no cursor for this spool, on a spool whose
segment 1 was collected, must be refused (``HistoryNotInSpoolError``: nothing applied) unless
*this* spool's start was accepted for *this* store. An acceptance written for another spool
(a run dir copied from another data dir on the same PostgreSQL store), or one written by
``spool reidentify`` when this store never applied the collected segments (they went into the
SQLite store before the switch), would start the store silently without those sessions.
Real data dirs, real PostgreSQL, the production writer."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import QuillCLI

from quill import home as config
from quill.ops import logs
from quill.ops.recover.postgres import drain
from quill.spool import Position, Spool, retention
from quill.spool.segments import list_segments
from quill.store.errors import HistoryNotInSpoolError

SPOOL = "[spool]\nsegment_bytes = 4096\nretention_s = 0\n"


def _sqlite_life_then_postgres(root, url: str) -> int:
    """A data dir that applied 12 messages into its SQLite store, had its applied segments
    but the newest collected, then was switched to the PostgreSQL store ``url``; returns the
    spool's oldest segment."""
    root.mkdir(parents=True)
    (root / "config.toml").write_text(SPOOL)
    with Spool(root / "spool", segment_bytes=4096) as spool:
        for i in range(12):
            msg = {"role": "user", "content": f"{root.name} m{i} " + "x" * 900}
            spool.append("messages.append", {"session_id": f"{root.name}-s", "messages": [msg]})
    done = QuillCLI(root).drain()
    assert done["applied"] == 12
    cursor = Position.parse(done["to"])
    assert retention.collect(root / "spool", cursor, cursor, retention_s=0)["deleted"]
    (root / "config.toml").write_text(f'{SPOOL}[store]\nurl = "{url}"\n')
    return list_segments(root / "spool")[0]


def _drain(root) -> dict:
    return drain(config.load(root), logs.configure(None, "test"))


def _messages(url: str) -> int:
    import psycopg

    with psycopg.connect(url) as conn:
        return conn.execute("SELECT count(*) FROM messages").fetchone()[0]


def test_an_accepted_start_copied_from_another_data_dir_is_not_this_spools(tmp_path, pg_store_url):
    """Data dir A accepted its loss (``recover --accept-loss``); its run dir's acceptance,
    copied into data dir B on the same store, must not let B's writer start without B's
    collected history."""
    a, b = tmp_path / "a", tmp_path / "b"
    first_a = _sqlite_life_then_postgres(a, pg_store_url)
    first_b = _sqlite_life_then_postgres(b, pg_store_url)
    assert first_a >= first_b > 1
    QuillCLI(a).run("recover", "--accept-loss")  # A's own, deliberate acceptance
    with pytest.raises(HistoryNotInSpoolError):
        _drain(b)
    shutil.copy2(a / "run" / "accepted-start.json", b / "run" / "accepted-start.json")

    gap = QuillCLI(b).status()["spool"]["history_gap"]
    assert gap is not None and gap["first_segment"] == first_b, gap
    before = _messages(pg_store_url)
    with pytest.raises(HistoryNotInSpoolError):
        _drain(b)
    assert _messages(pg_store_url) == before, "B's writer applied from a copied acceptance"


def test_reidentify_does_not_accept_a_start_for_a_store_that_never_applied_the_spool(
    tmp_path, pg_store_url
):
    """The collected segments went into the SQLite store before the switch: the PostgreSQL
    store holds no cursor for the old id, so ``spool reidentify`` has no ground to accept
    the oldest segment left as the new id's start."""
    root = tmp_path / "h"
    first = _sqlite_life_then_postgres(root, pg_store_url)
    with pytest.raises(HistoryNotInSpoolError):
        _drain(root)
    out = json.loads(QuillCLI(root).run("spool", "reidentify", "--json").stdout)
    assert out["old"] != out["new"]

    gap = QuillCLI(root).status()["spool"]["history_gap"]
    assert gap is not None and gap["first_segment"] == first, gap
    with pytest.raises(HistoryNotInSpoolError):
        _drain(root)
    assert _messages(pg_store_url) == 0, "the writer started without the collected history"

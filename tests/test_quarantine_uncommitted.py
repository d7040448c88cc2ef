"""A refusal whose chunk fails to commit is not a quarantined record: the writer quarantines
a refused op inside its chunk's transaction, before the COMMIT; when the chunk then fails
(here: a really full disk), nothing of it was committed — the store holds no refusal and the
cursor is before the record — so its entry is withdrawn (``Quarantine.withdraw``): ``quill
spool quarantine list`` shows it apart as not committed, ``quill status`` does not count it,
and once the writer re-reads and refuses the record again it is quarantined as before."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from conftest import REPO, quill_env, small_tmpfs
from harness import InProcessWriter

from quill.spool import Position, Quarantine
from quill.store import Reader


def _quarantine_list(root) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", "from quill.ops.cli import main; main()"]
        + ["spool", "quarantine", "list", "--json"],
        env=quill_env(root),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_an_entry_of_a_chunk_that_failed_to_commit_is_withdrawn_not_listed(tmp_path):
    with small_tmpfs(tmp_path / "small", "4m") as mnt:
        w = InProcessWriter(mnt / "home", writer={"chunk_rows": 100})
        try:
            w.append("session.create", {"session_id": "full"})
            w.until_idle()
            # Refused by the store (no such message), first in the next chunk …
            w.append("session.read", {"session_id": "full", "message_id": 999_999})
            for b in range(5):  # … followed by rows that no longer fit on the disk
                w.append(
                    "messages.append",
                    {
                        "session_id": "full",
                        "messages": [
                            {"role": "user", "content": f"{b} {i} " + "x" * 16000}
                            for i in range(20)
                        ],
                    },
                )
            filler = mnt / "filler"
            with open(filler, "wb") as f:  # leave ~64 KiB: room for an entry, not the rows
                while (free := shutil.disk_usage(mnt).free) > 16 * 1024:
                    f.write(b"\0" * (65536 if free > 256 * 1024 else 4096))
                    f.flush()
            w.turn(1.0)  # one try: the entry is written, then the chunk fails to commit
            assert "disk full" in (w.writer.error or ""), w.writer.error
            q = Quarantine(w.cfg.spool_dir)
            assert q.count() == 0 and list(q.entries()) == []
            [withdrawn] = q.uncommitted()
            assert withdrawn["reason"] == "unknown-message"
            assert "uncommitted" in withdrawn
            listed = _quarantine_list(w.root)
            assert listed["entries"] == []
            assert [e["reason"] for e in listed["uncommitted"]] == ["unknown-message"]

            filler.unlink()  # space returns: the chunk commits and the refusal with it
            w.until_idle()
            [entry] = list(q.entries())
            assert entry["reason"] == "unknown-message" and q.uncommitted() == []
            assert [e["reason"] for e in _quarantine_list(w.root)["entries"]] == ["unknown-message"]
        finally:
            w.close()


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
def test_a_withdrawn_refusal_the_store_committed_after_all_is_quarantined_again(tmp_path, backend):
    """A ``COMMIT`` can fail for the writer yet succeed on the server (PostgreSQL: the
    connection lost with the ``COMMIT`` in flight): its entries were withdrawn, and the
    store's cursor is past their records, so no re-read puts them back. Here the withdrawal
    is made on a chunk that did commit (the state such a failure leaves); a restarted writer
    finds the refusal in the store's ledger and quarantines the entry again, on both
    backends. A withdrawn entry whose record the store applied stays withdrawn (the trace)."""
    w = InProcessWriter(tmp_path / "home", backend)
    try:
        created = w.spool.append("session.create", {"session_id": "s"})
        w.append("session.read", {"session_id": "s", "message_id": 999_999})  # refused
        w.until_idle()
        q = Quarantine(w.cfg.spool_dir)
        [entry] = list(q.entries())
        refused = Position.parse(entry["position"])
        applied = created.position  # the session.create, applied
        record = {"op": "session.create", "batch": created.batch_id}
        q.put(applied, "invalid-op", "refused by a chunk that failed", b"{}", record)
        q.withdraw(applied, "TransientError: the chunk failed; re-read and applied")
        q.withdraw(refused, "TransientError: connection lost with the COMMIT in flight")
        assert q.count() == 0

        w.restart()
        w.until_idle()
        assert [e["position"] for e in q.entries()] == [str(refused)]
        assert "uncommitted" not in next(iter(q.entries()))
        assert [e["position"] for e in q.uncommitted()] == [str(applied)]
        assert [e["reason"] for e in _quarantine_list(w.root)["entries"]] == ["unknown-message"]
    finally:
        w.close()


def test_no_room_for_a_quarantine_entry_pauses_the_drain_and_loses_nothing(tmp_path):
    """A refused op whose quarantine entry finds the disk full (a real full tmpfs): the
    writer does not crash nor skip the op; it publishes the full disk, backs off like a full
    store, and once space returns the entry is written and the ops after it are applied."""
    with small_tmpfs(tmp_path / "small", "4m") as mnt:
        w = InProcessWriter(mnt / "home", writer={"chunk_rows": 100})
        try:
            w.append("session.create", {"session_id": "s"})
            w.until_idle()
            w.append("session.read", {"session_id": "s", "message_id": 999_999})  # refused
            w.append("session.title", {"session_id": "s", "title": "after the refusal"})
            filler = mnt / "filler"
            with open(filler, "wb", buffering=0) as f:  # fill the disk to the last block
                try:
                    while True:
                        f.write(b"\0" * 4096)
                except OSError:
                    pass
            pauses = [w.turn(1.0) for _ in range(4)]  # no exception: the writer waits
            assert "spool is full" in (w.writer.error or ""), w.writer.error
            assert w.writer.halt_cause is None
            backoff = [p for p in pauses if p > 0]
            assert len(backoff) == 4 and backoff == sorted(backoff) and backoff[-1] > backoff[0]
            q = Quarantine(w.cfg.spool_dir)
            assert q.count() == 0 and not list(q.dir.glob("*.tmp"))  # nothing half-written

            filler.unlink()  # space returns
            w.until_idle()
            [entry] = list(q.entries())
            assert entry["reason"] == "unknown-message" and q.uncommitted() == []
            with Reader(w.cfg.state_db) as r:
                assert r.get_session("s")["title"] == "after the refusal"
            assert w.writer.error is None
        finally:
            w.close()

"""A Quill export imported around a delete of its session (``deletions_seen``,
store/apply/deletes.py): every op the import spools — ``messages.restore`` chunks included —
carries the deletions of its session the import saw. A delete applied after the import looked
makes the writer apply them as nothing (no placeholder, no restored rows) and ``quill spool
purge`` tombstones them; an import that looks after the delete sees it and restores the
whole session again (batch ids derived over the deletions, as every importer's are)."""

from __future__ import annotations

import pytest
from harness import InProcessWriter

from quill.ops.cli.base import run
from quill.ops.cli.root import cli
from quill.ops.purge.plan import plan, spool_entries
from quill.ops.transfer.export_reimport import import_export
from quill.ops.transfer.import_spool import open_store_view
from quill.store.sqlite.connection import open_reader

SID = "conv"
DELETE = {"session_ids": [SID], "reason": "deleted", "actor": "user:test"}


@pytest.fixture
def export(tmp_path, monkeypatch):
    """An export of session ``SID`` (three messages and a title) from another data dir."""
    src = InProcessWriter(tmp_path / "src")
    src.append("session.create", {"session_id": SID, "source": "cli", "title": "launch"})
    src.say(SID, "first", "second", "third")
    src.until_idle()
    src.close()
    out = tmp_path / "export.jsonl"
    monkeypatch.setenv("QUILL_HOME", str(src.cfg.home))
    assert run(cli, ["export", "-o", str(out)]) == 0
    return out


@pytest.fixture
def dst(tmp_path):
    h = InProcessWriter(tmp_path / "dst")
    yield h
    h.close()


def _held(h) -> tuple[bool, list[str]]:
    """(whether the store holds session ``SID``, its messages' texts in order)."""
    conn = open_reader(h.cfg.state_db)
    try:
        exists = conn.execute("SELECT 1 FROM sessions WHERE id = ?", (SID,)).fetchone()
        texts = conn.execute(
            "SELECT quill_text(content) FROM messages WHERE session_id = ? ORDER BY seq", (SID,)
        ).fetchall()
    finally:
        conn.close()
    return exists is not None, [t for (t,) in texts]


def _import(h, path) -> dict:
    view = open_store_view(h.cfg)
    try:
        return import_export(h.spool, path, view)
    finally:
        if view is not None:
            view.close()


def test_an_import_decided_before_a_delete_restores_nothing_and_is_purged(dst, export):
    # The store holds the session empty (a placeholder): the export's rows are new to it.
    dst.append("session.create", {"session_id": SID, "source": "cli"})
    dst.until_idle()
    view = open_store_view(dst.cfg)
    try:
        dst.append("sessions.delete", DELETE)  # spooled after the import looked
        report = import_export(dst.spool, export, view)
    finally:
        view.close()
    assert report["new"] == 3, report
    dst.until_idle()
    assert _held(dst) == (False, [])  # neither the session nor its rows came back
    assert dst.writer.run_dir.last("writer")["rejected"] == 0  # nothing quarantined
    purge = plan(dst.cfg.spool_dir, dst.cfg.state_db, [SID])
    spooled = [
        (e.record["op"], purge.wants(e.record, e.position))
        for e in spool_entries(dst.cfg.spool_dir)
        if e.record and e.record["op"] != "sessions.delete"
    ]
    restores = [wanted for op, wanted in spooled if op == "messages.restore"]
    assert restores and all(restores), spooled  # `quill spool purge` tombstones them
    assert all(wanted for _, wanted in spooled), spooled


def test_an_import_after_the_delete_restores_the_whole_session_again(dst, export):
    assert _import(dst, export)["new"] == 3
    dst.until_idle()
    assert _held(dst) == (True, ["first", "second", "third"])
    dst.append("sessions.delete", DELETE)
    dst.until_idle()
    assert _held(dst) == (False, [])
    report = _import(dst, export)  # sees the deletion: the documented re-import
    assert (report["new"], report["already_stored"]) == (3, 0), report
    dst.until_idle()
    assert _held(dst) == (True, ["first", "second", "third"])
    again = _import(dst, export)  # and a repeat is stored already
    assert (again["new"], again["already_stored"]) == (0, 3), again

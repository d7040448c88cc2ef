"""An import that read the store before a delete of its session and spooled after it (the
watcher importing a Gemini CLI log the moment a user ran ``quill sessions delete --purge``, or
a prune took the session), on both backends: every op of it carries the deletions it saw
(``deletions_seen``), so the writer applies them as nothing — the revised message (its tool
output, its tokens) and the new ones stay deleted, no fragment of the session is re-created.
An import after the delete (it saw it) brings the whole session back, as documented."""

from __future__ import annotations

from gemini_log_helpers import MAIN, PROJECT, SID
from harness import Home
from importers_helpers import write_jsonl

from quill.ops.transfer.import_spool import import_file, open_store_view
from quill.ops.transfer.pending_deletes import PendingDeletes
from quill.spool import START, Spool, SpoolReader

#: The log up to the first copy of g1 (its call still executing), then the whole log.
FIRST = MAIN[:5]


def _count(h: Home, table: str, sid: str) -> int:
    with open_store_view(h.cfg) as r:
        q = f"SELECT count(*) FROM {table} WHERE session_id = ?"  # table: a literal below
        return r.conn.execute(q, (sid,)).fetchone()[0]


def _import(h: Home, spool: Spool, log, pending: PendingDeletes | None = None):
    view = open_store_view(h.cfg)  # None before the store exists
    try:
        return import_file(spool, log, view, pending)
    finally:
        if view is not None:
            view.close()


def test_an_import_racing_a_delete_brings_nothing_back(tmp_path, backend):
    h = Home(tmp_path / "home", backend)
    try:
        chats = tmp_path / "tmp" / PROJECT / "chats"
        log = write_jsonl(chats / f"session-2026-05-03T16-00-{SID[:8]}.jsonl", FIRST)
        first = _import(h, h.spool, log)
        assert first.new > 0, first
        sid = first.sessions[0]  # the importer's id of the conversation
        h.drain()
        assert _count(h, "messages", sid) > 0
        # the agent writes on; the import reads the store (the session held, g1 in its first
        # copy) and decides — into a scratch spool, so the delete can land in between
        write_jsonl(log, MAIN)
        scratch = Spool(tmp_path / "scratch")
        report = _import(h, scratch, log, PendingDeletes())
        assert report.revised >= 1 and report.new >= 1
        ops = [e.record for e in SpoolReader(tmp_path / "scratch").read(START, max_bytes=1 << 30)]
        scratch.close()
        assert ops and all(o["data"]["deletions_seen"] == 0 for o in ops), ops
        h.append(
            "sessions.delete",
            {"session_ids": [sid], "reason": "user_request", "actor": "user:t", "purge": True},
        )
        for o in ops:  # spooled after the delete, as the race has it
            h.append(o["op"], o["data"], batch_id=o["batch"])
        h.drain()
        with open_store_view(h.cfg) as r:
            assert r.get_session(sid) is None
            assert r.deletions(sid) == 1
        assert _count(h, "messages", sid) == 0 and _count(h, "usage", sid) == 0
        # an import now sees the deletion: the documented re-import, whole
        again = _import(h, h.spool, log)
        h.drain()
        assert again.new == again.messages > 0
        with open_store_view(h.cfg) as r:
            assert r.get_session(sid) is not None
    finally:
        h.close()

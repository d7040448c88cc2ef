"""Shared by the purge tests: a data dir driven in-process (``harness.Home``) that can also
take snapshots and run ``ops.purge.procedure.purge``, and checks on what a purge left."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness import Home

from quill.jobs.worker_jobs import snapshot
from quill.ops.purge.procedure import purge
from quill.spool.purge import PURGED_OP
from quill.spool.segments import list_segments, segment_name


class PurgeHome(Home):
    """``harness.Home`` (producers append, ``drain`` runs the production writer) plus the
    operator's tools a purge test needs."""

    def snapshot(self) -> Path:
        """A verified snapshot of the store (kept: up to 100); returns its path."""
        return Path(snapshot(str(self.db), str(self.snapshots), keep=100)["path"])

    def segments(self) -> dict[int, bytes]:
        """Every spool segment's bytes by segment number."""
        return {
            n: (self.spool_dir / segment_name(n)).read_bytes()
            for n in list_segments(self.spool_dir)
        }

    def purge(self, *ids: str, **kw: Any) -> dict[str, Any]:
        """``purge`` of sessions ``ids`` by ``user:test``; returns its figures."""
        return purge(self.spool_dir, self.db, self.snapshots, list(ids), actor="user:test", **kw)


def files_holding(root: Path, needle: bytes, *, live: bool = True) -> list[str]:
    """Every file under ``root`` (spool, quarantine, snapshots, and with ``live`` the live
    store, its WAL and shm: a completed purge scrubs them too) whose bytes contain ``needle``,
    as paths relative to ``root``, sorted."""
    found = []
    for path in root.rglob("*"):
        if (
            path.is_file()
            and (live or not path.name.startswith("state.db"))
            and needle in path.read_bytes()
        ):
            found.append(str(path.relative_to(root)))
    return sorted(found)


def check_unchanged_except_tombstones(before: dict[int, bytes], after: dict[int, bytes]) -> int:
    """Every segment keeps its size and line boundaries; every line is byte-identical or a
    tombstone of the same batch. Returns the number of tombstones."""
    tombs = 0
    for n, old in before.items():
        new = after[n]
        assert len(new) == len(old), n
        old_lines, new_lines = old.splitlines(keepends=True), new.splitlines(keepends=True)
        assert [len(x) for x in old_lines] == [len(x) for x in new_lines]
        for o, w in zip(old_lines, new_lines):
            if o != w:
                rec_o, rec_w = json.loads(o), json.loads(w)
                assert rec_w["op"] == PURGED_OP and rec_w["batch"] == rec_o["batch"]
                assert rec_o["op"] != "sessions.delete"
                tombs += 1
    return tombs


def _rows(db: Path, sql: str) -> list[tuple]:
    import apsw

    from quill.store import packed

    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    packed.register(conn)  # quill_text(content): a long text is stored packed
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()

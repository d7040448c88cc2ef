"""The writes of ``quill.Client`` that read the store first: orphan adoption, session
deletes and purges, usage re-pricing. ``Maintenance`` is a base class of ``Client``
(``ops/client/client.py``); it appends through ``submit`` (``ops/client/writes.py``) and reads
through ``Reads`` (``ops/client/reads.py``).
"""

from __future__ import annotations

import getpass
import shlex
from collections.abc import Callable
from typing import Any

from quill.home import Settings
from quill.ops.client.errors import InvalidInputError, WaitTimeoutError, no_session
from quill.ops.client.reads import _public_errors
from quill.spool import Ack


class Maintenance:
    """``adopt_orphans``, ``delete_sessions``, ``purge_sessions`` and ``reprice_usage`` (a
    base class of ``quill.Client``, which provides ``config``, ``submit``, ``orphans`` and
    ``_reader``)."""

    # Provided by ``Client`` and its other bases (``Writes``, ``Reads``).
    config: Settings
    submit: Callable[..., Ack]
    orphans: Callable[..., list[dict[str, Any]]]
    _reader: Callable[[Exception | None], Any]  # a context manager yielding a store reader

    def adopt_orphans(self, *, window_s: float | None = None) -> list[tuple[dict[str, Any], Ack]]:
        """Give each unambiguous orphan its predecessor's key (and the predecessor as its
        compression parent when it has no parent) through the spool: a ``session.create``
        that only fills empty fields. Ambiguous orphans are left alone, and so are orphans
        whose predecessor or themselves a ``sessions.delete`` still pending in the spool names
        (``ops.transfer.pending_deletes``): the create would come after the delete and bring the
        session back bare. Returns ``(orphan, ack)`` pairs."""
        from quill.ops.client.wait import applied_position
        from quill.ops.transfer.pending_deletes import pending_deletes_from

        out = []
        with _public_errors():
            pending = pending_deletes_from(self.config.spool_dir, applied_position(self.config))
        for item in self.orphans(window_s=window_s):
            if (
                item["predecessor"] is None
                or item["session_id"] in pending
                or item["predecessor"] in pending
            ):
                continue
            data = {"session_id": item["session_id"], "key": item["key"]}
            if item["evidence"] == "quiet_sibling":
                data.update(parent_id=item["predecessor"], parent_kind="compression")
            out.append((item, self.submit("session.create", data)))
        return out

    def delete_sessions(
        self,
        session_ids: list[str] | None = None,
        *,
        key: str | None = None,
        reason: str = "user_request",
        actor: str | None = None,
        batch_id: str | None = None,
        purge: bool = False,
    ) -> tuple[list[str], Ack | None]:
        """Delete sessions on request — ``quill sessions delete``: the named ids, or every
        session of conversation ``key``, with their messages, usage and the blobs no other
        session references, through the spool (``sessions.delete``, docs/ops.md). Returns
        ``(ids, ack)``; ``ack`` is None when ``key`` names no session. Delegate children go
        with their parent. ``purge=True`` marks the op as a purge request (secure deletion of
        the rows); follow it with ``purge_sessions`` once applied. Raises ``InvalidInputError``
        unless exactly one of the two is given, ``NotFoundError`` (nothing is deleted) when a
        named id is not a stored session."""
        if (session_ids is None) == (key is None):
            raise InvalidInputError("give session ids or a key, not both")
        if key is not None and not isinstance(key, str):
            raise InvalidInputError(f"key must be a string, got {type(key).__name__}")
        if session_ids is not None and (
            isinstance(session_ids, str)
            or not isinstance(session_ids, (list, tuple))
            or not all(isinstance(s, str) for s in session_ids)
        ):
            raise InvalidInputError(
                "session_ids must be a list of session id strings",
                hint="pass a list, e.g. delete_sessions(['s1'])",
            )
        if key is not None:
            with self._reader(None) as r:
                session_ids = [] if r is None else r.key_sessions(key)
            if not session_ids:
                return [], None
        else:
            session_ids = list(dict.fromkeys(session_ids))
            with self._reader(None) as r:
                unknown = (
                    session_ids
                    if r is None
                    else [s for s in session_ids if r.get_session(s) is None]
                )
                deleted = (
                    r is not None and bool(unknown) and all(r.deletions(s) > 0 for s in unknown)
                )
            if unknown:  # deleting nothing is not success: say which ids are wrong, delete none
                raise no_session(unknown, store_missing=r is None, deleted=deleted)
        actor = actor or f"user:{getpass.getuser()}"
        data = {
            "session_ids": list(session_ids),
            "reason": reason,
            "actor": actor,
            **({"purge": True} if purge else {}),
        }
        return list(session_ids), self.submit("sessions.delete", data, batch_id=batch_id)

    def purge_sessions(
        self, session_ids: list[str], *, after: Ack | None = None, timeout: float = 60.0
    ) -> dict[str, Any]:
        """``quill sessions delete --purge`` / ``quill spool purge``: remove deleted sessions'
        content from spool segments, the quarantine and snapshots (``ops.purge.procedure``;
        figures as it returns them). ``after``: the delete's ack, waited for up to ``timeout``
        seconds first. Raises ``WaitTimeoutError``, ``InvalidInputError`` (a session still
        exists, or the store is PostgreSQL: not supported), ``NotFoundError`` (no applied
        delete names it)."""
        from quill.jobs.outage import persist
        from quill.jobs.queues import build_for
        from quill.ops.client.wait import wait_applied
        from quill.ops.purge import procedure as purge
        from quill.spool import WaitTimeoutError as SpoolWaitTimeout
        from quill.store.factory import capabilities

        if not capabilities(self.config).local_file:
            raise InvalidInputError(
                "--purge works on the embedded SQLite store only (snapshots and the spool's "
                "replay rules of a PostgreSQL store differ)",
                hint="delete without --purge; the spool keeps its copies until retention",
            )
        if after is not None:
            try:
                wait_applied(self.config, after.position, timeout, without_fleet=2.0)
            except SpoolWaitTimeout as exc:
                raise WaitTimeoutError(
                    str(exc),
                    hint="the delete is spooled; once the writer applied it, run "
                    f"`quill spool purge {' '.join(shlex.quote(s) for s in session_ids)}`",
                ) from None
        return purge.purge(
            self.config.spool_dir,
            self.config.state_db,
            self.config.snapshots_dir,
            list(session_ids),
            actor=f"user:{getpass.getuser()}",
            snapshot_keep=self.config.snapshot_keep,
            # a queue.db another process keeps locked is waited for, within a bound
            enqueue_scrub=lambda **kw: persist(
                lambda: build_for(self.config).enqueue("scrub", **kw)
            ),
        )

    def reprice_usage(self, *, dry_run: bool = False) -> dict[str, Any]:
        """``quill usage reprice``: compute the cost of every usage record not priced with
        the installed genai-prices version (unpriced ones included) and append the new costs
        as ``usage.reprice`` ops (≤ 2,000 rows each; the writer applies them only to rows
        still carrying the old version). Returns ``{"price_version", "considered",
        "repriced", "still_unpriced", "cost_change_usd", "batches"}`` (batches: their ids;
        empty for ``dry_run``)."""
        from quill.store.apply.reprice import MAX_ROWS, stale_rows
        from quill.store.apply.usage import price, price_version

        current = price_version()
        with self._reader(None) as r:
            if r is None:
                stale = []
            else:
                with r.snapshot() as conn:
                    stale = stale_rows(conn, current)
                    old_costs = dict(
                        conn.execute(
                            "SELECT id, cost_usd FROM usage WHERE price_version IS NULL "
                            "OR price_version != ?",
                            (current,),
                        ).fetchall()
                    )
        rows, unpriced, delta = [], 0, 0.0
        for rid, old, model, provider, ts, tokens in stale:
            cost = price(tokens, model, provider, ts)
            if cost is None:
                unpriced += 1  # still unknown to the table: stays unpriced (never $0)
                continue
            rows.append([rid, old, cost])
            delta += cost - (old_costs.get(rid) or 0.0)
        batches = []
        if not dry_run:
            actor = f"user:{getpass.getuser()}"
            for start in range(0, len(rows), MAX_ROWS):
                ack = self.submit(
                    "usage.reprice",
                    {
                        "price_version": current,
                        "rows": rows[start : start + MAX_ROWS],
                        "actor": actor,
                    },
                )
                batches.append(ack.batch_id)
        return {
            "price_version": current,
            "considered": len(stale),
            "repriced": len(rows),
            "still_unpriced": unpriced,
            "cost_change_usd": round(delta, 9),
            "batches": batches,
        }

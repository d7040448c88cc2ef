"""``quill.Client``: the library agents use to write and read transcripts.

::

    import quill
    q = quill.Client()                                 # data dir: argument, else $QUILL_HOME
    ack = q.append("s1", [{"role": "user", "content": "hi"}], source="my-agent")
    q.wait(ack, timeout=10)                            # Outcome(status='applied')
    q.messages("s1")                                   # what `quill sessions show s1 --json` lists

Writes are spool ops (docs/ops.md): each method checks its op the way the writer will
(``store.apply.precheck``), so a batch that can never apply raises ``InvalidInputError`` before
anything is appended, then appends it durably (fsync'd) and returns its ``Ack`` — the record's
spool position and batch id. The fleet's writer (``quill run``) applies it; ``wait`` blocks
until it did and says how (applied, or quarantined with the reason). Pass ``batch_id`` to
retry safely: a batch id is applied once.

Reads return exactly what the matching CLI command prints with ``--json`` (the CLI calls these
methods). Before the store exists, listings are empty and single-session reads raise
``NotFoundError``.

Threads and ``fork``: each thread of each process gets its own spool handle (a ``Spool`` is
single-threaded; concurrent handles group-commit their fsyncs), created on first use and
re-created after ``fork`` (a pid check), so one ``Client`` may be shared by threads and used
in a forked child. Reads open a short-lived read-only connection per call.

Errors are ``quill.QuillError`` subclasses (``ops/client/errors.py``) whose ``hint`` says what
to do.

This module holds the writes, ``wait`` and the writes that read first (orphans, deletes,
re-pricing); the reads are ``ops/client/reads.py`` (``Reads``, a base class of ``Client``).
"""

from __future__ import annotations

import getpass
import os
import shlex
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from quill.home import Settings, load
from quill.ops.client.errors import InvalidInputError, WaitTimeoutError, no_session
from quill.ops.client.reads import VIEWS, Reads, _public_errors
from quill.spool import Ack, Spool

__all__ = ["VIEWS", "WAIT_POLL_S", "Client", "Outcome"]
#: Polling interval of ``wait`` (seconds): the writer commits in chunks every few ms, so 20 ms
#: keeps read-your-writes latency low without a busy loop.
WAIT_POLL_S = 0.02


@dataclass(frozen=True)
class Outcome:
    """How the writer dealt with a batch: ``status`` is ``"applied"``, ``"quarantined"`` or
    ``"missing"``; for a quarantined batch ``reason`` is the rule's tag (docs/ops.md, e.g.
    ``no-such-turn``) and ``detail`` the explanation. The quarantined record is kept (``quill
    spool``). ``"missing"`` (reason ``not-found``): the writer is past the ack's position but
    the store has no record of the batch, applied or refused (``ops.client.wait``)."""

    status: str
    batch_id: str
    reason: str | None = None
    detail: str | None = None

    @property
    def applied(self) -> bool:
        return self.status == "applied"


def _check_ack(ack: Any) -> Ack:
    """``ack`` if it is an ``Ack`` (what the write methods return), else ``InvalidInputError``."""
    if isinstance(ack, Ack):
        return ack
    if isinstance(ack, tuple) and len(ack) == 2 and isinstance(ack[1], (Ack, type(None))):
        raise InvalidInputError(
            f"expected an Ack, got the (ids, ack) pair `delete_sessions` returns: {ack!r}",
            hint="`ids, ack = q.delete_sessions(...)`, then `q.wait(ack)` (ack is None when "
            "nothing was deleted)",
        )
    if not isinstance(ack, Ack):
        raise InvalidInputError(
            f"expected the Ack a write method returned (append, create …), got {ack!r}",
            hint="pass the value `append` returned; its batch id alone is not enough",
        )
    return ack


def _drop_none(**fields: Any) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}


class _Handle:
    """One thread's spool handle. Its segment descriptor is closed when the handle is dropped:
    when the thread ends (its locals go), when the client is garbage-collected, or when a
    forked child replaces the parent's copy — so short-lived threads leak no descriptors."""

    __slots__ = ("spool", "pid")

    def __init__(self, spool: Spool):
        self.spool = spool
        self.pid = os.getpid()

    def __del__(self) -> None:
        self.spool.close()


class Client(Reads):
    """A producer and reader on one data dir: ``home`` (a path), else ``$QUILL_HOME``, else
    the XDG data dir. ``config_`` (loaded ``quill.home.Settings``) may be given instead.
    Raises ``StorageError`` if ``config.toml`` there is invalid."""

    def __init__(
        self, home: str | os.PathLike[str] | None = None, *, config_: Settings | None = None
    ):
        with _public_errors():
            self.config = config_ or load(str(home) if home is not None else None)
        self._local = threading.local()

    @property
    def home(self) -> Path:
        return self.config.home

    def __repr__(self) -> str:
        return f"quill.Client({str(self.home)!r})"

    # -- writes -------------------------------------------------------------------------------

    def _spool(self) -> Spool:
        handle = getattr(self._local, "handle", None)
        if (
            handle is None or handle.pid != os.getpid()
        ):  # first use in this thread, or a forked child
            handle = self._local.handle = _Handle(
                Spool(self.config.spool_dir, segment_bytes=self.config.segment_bytes)
            )
        return handle.spool

    def submit(self, op: str, data: dict[str, Any], *, batch_id: str | None = None) -> Ack:
        """Append any op (``op`` one of docs/ops.md's kinds, ``data`` its payload) durably and
        return its ``Ack``. Raises ``InvalidInputError`` (with ``reason``) if the op can never
        apply — nothing is appended then — ``SpoolFullError`` or ``StorageError``."""
        from quill.store.apply.precheck import precheck
        from quill.store.errors import InvalidOpError

        try:
            precheck(op, data)
        except InvalidOpError as exc:
            raise InvalidInputError(
                f"{op}: {exc.reason}: {exc.detail}",
                reason=exc.reason,
                hint="fix the op or its messages (docs/ops.md); nothing was appended",
            ) from None
        with _public_errors():
            return self._spool().append(op, data, batch_id=batch_id)

    def append(
        self,
        session_id: str,
        messages: list[dict[str, Any]],
        *,
        source: str | None = None,
        model: str | None = None,
        batch_id: str | None = None,
    ) -> Ack:
        """Append ``messages`` (OpenAI chat shape, docs/ops.md "Message objects") to a session,
        all or nothing; creates the session if needed. ``model`` is recorded on the session
        (a ``session.create`` that fills only empty fields). Returns the messages' ``Ack``."""
        if model is not None:
            self.create(session_id, model=model, source=source)
        return self.submit(
            "messages.append",
            _drop_none(session_id=session_id, messages=messages, source=source),
            batch_id=batch_id,
        )

    def create(
        self,
        session_id: str,
        *,
        source: str | None = None,
        model: str | None = None,
        title: str | None = None,
        cwd: str | None = None,
        parent_id: str | None = None,
        parent_kind: str | None = None,
        started_at: float | None = None,
        meta: dict[str, Any] | None = None,
        key: str | None = None,
        batch_id: str | None = None,
    ) -> Ack:
        """Create a session, or fill fields it still lacks. ``parent_kind``: ``compression``,
        ``branch``, ``reset`` or ``delegate`` (with ``parent_id``). ``key``: the conversation
        identity (chat id, thread, working dir) ``resume`` finds it by. Times in epoch seconds."""
        return self.submit(
            "session.create",
            _drop_none(
                session_id=session_id,
                source=source,
                model=model,
                title=title,
                cwd=cwd,
                parent_id=parent_id,
                parent_kind=parent_kind,
                started_at=started_at,
                meta=meta,
                key=key,
            ),
            batch_id=batch_id,
        )

    def record_usage(
        self,
        session_id: str,
        usage: dict[str, Any],
        *,
        task: str = "turn",
        model: str | None = None,
        provider: str | None = None,
        source: str | None = None,
        response_id: str | None = None,
        ts: float | None = None,
        batch_id: str | None = None,
    ) -> Ack:
        """Record one model call that stored no message (title, compression, background
        review, embedding …): ``usage`` as the provider sent it (OpenAI or Anthropic shape).
        ``response_id`` makes it count once however often it is sent (docs/ops.md, Usage)."""
        return self.submit(
            "usage.record",
            _drop_none(
                session_id=session_id,
                usage=usage,
                task=task,
                model=model,
                provider=provider,
                source=source,
                response_id=response_id,
                ts=ts,
            ),
            batch_id=batch_id,
        )

    def end(
        self,
        session_id: str,
        reason: str = "ended",
        *,
        ended_at: float | None = None,
        batch_id: str | None = None,
    ) -> Ack:
        """End a session (first end wins). Automatic reasons (``agent_close`` …) are cleared
        by a later append; deliberate ones (``ended``, ``user_exit`` …) stay."""
        return self.submit(
            "session.end",
            _drop_none(session_id=session_id, reason=reason, ended_at=ended_at),
            batch_id=batch_id,
        )

    def compact(
        self,
        session_id: str,
        messages: list[dict[str, Any]],
        *,
        tail_count: int = 0,
        watermark: int | None = None,
        watermark_ext_id: str | None = None,
        batch_id: str | None = None,
    ) -> Ack:
        """Compaction in place: live rows up to ``watermark`` (default all) become
        ``compacted``; ``messages`` (summary + the last ``tail_count`` carried verbatim) become
        the live rows. Nothing is deleted; display and search still show the originals."""
        return self.submit(
            "messages.compact",
            _drop_none(
                session_id=session_id,
                messages=messages,
                tail_count=tail_count,
                watermark=watermark,
                watermark_ext_id=watermark_ext_id,
            ),
            batch_id=batch_id,
        )

    def rewind(
        self,
        session_id: str,
        *,
        message_id: int | None = None,
        ext_id: str | None = None,
        user_turn: int | None = None,
        expect_head_id: int | None = None,
        batch_id: str | None = None,
    ) -> Ack:
        """Rewind to a user message (exactly one of ``message_id``, ``ext_id``, ``user_turn``
        — 1 first, -1 last): it and every later live row become ``rewound`` (kept for audit)."""
        if sum(x is not None for x in (message_id, ext_id, user_turn)) != 1:
            raise InvalidInputError("rewind needs exactly one of message_id, ext_id, user_turn")
        return self.submit(
            "messages.rewind",
            _drop_none(
                session_id=session_id,
                message_id=message_id,
                ext_id=ext_id,
                user_turn=user_turn,
                expect_head_id=expect_head_id,
            ),
            batch_id=batch_id,
        )

    def replace(
        self,
        session_id: str,
        messages: list[dict[str, Any]],
        *,
        from_message_id: int | None = None,
        from_ext_id: str | None = None,
        expect_head_id: int | None = None,
        batch_id: str | None = None,
    ) -> Ack:
        """Edit / regenerate: live rows from ``from_message_id`` / ``from_ext_id`` on (all live
        rows if neither) become ``rewound`` and ``messages`` are appended live. With
        ``expect_head_id`` the op is refused (``stale-head``) unless that is the newest live id."""
        return self.submit(
            "messages.replace",
            _drop_none(
                session_id=session_id,
                messages=messages,
                from_message_id=from_message_id,
                from_ext_id=from_ext_id,
                expect_head_id=expect_head_id,
            ),
            batch_id=batch_id,
        )

    def title(self, session_id: str, title: str | None, *, batch_id: str | None = None) -> Ack:
        """Set (``None`` or ``""`` clears) a session's title; ≤ 200 chars, unique among titles."""
        return self.submit(
            "session.title", {"session_id": session_id, "title": title}, batch_id=batch_id
        )

    def flags(
        self,
        session_id: str,
        *,
        archived: bool | None = None,
        pinned: bool | None = None,
        hidden: bool | None = None,
        batch_id: str | None = None,
    ) -> Ack:
        """Set any of the ``archived`` / ``pinned`` / ``hidden`` flags."""
        fields = _drop_none(archived=archived, pinned=pinned, hidden=hidden)
        if not fields:
            raise InvalidInputError("flags needs at least one of archived, pinned, hidden")
        return self.submit("session.flags", {"session_id": session_id, **fields}, batch_id=batch_id)

    def mark_read(
        self, session_id: str, message_id: int | None = None, *, batch_id: str | None = None
    ) -> Ack:
        """Move the session's last-read mark to ``message_id`` (default: the newest message)."""
        return self.submit(
            "session.read",
            _drop_none(session_id=session_id, message_id=message_id),
            batch_id=batch_id,
        )

    # -- read-your-writes ---------------------------------------------------------------------

    def wait(self, ack: Ack, timeout: float = 30.0) -> Outcome:
        """Block until the writer dealt with ``ack``'s batch (at most ``timeout`` seconds) and
        return its ``Outcome``. Raises ``WaitTimeoutError`` (the batch stays durable and is
        applied when a writer runs) — the usual cause is that ``quill run`` is not running."""
        return self.wait_all([ack], timeout)[0]

    def wait_all(self, acks: list[Ack], timeout: float = 30.0) -> list[Outcome]:
        """``wait`` for several acks at once; outcomes in the same order. Raises
        ``InvalidInputError`` for anything that is not an ``Ack``."""
        acks = [_check_ack(a) for a in acks]
        if not acks:
            return []
        if not timeout >= 0:
            raise InvalidInputError(f"timeout must be ≥ 0 seconds, got {timeout!r}")
        from quill.ops.client.wait import outcomes, wait_applied
        from quill.spool import WaitTimeoutError as SpoolWaitTimeout

        last = max(acks, key=lambda a: a.position)
        try:
            wait_applied(self.config, last.position, timeout, poll=WAIT_POLL_S)
        except SpoolWaitTimeout:
            raise WaitTimeoutError(
                f"batch {last.batch_id} (spool position {last.position}) not applied "
                f"within {timeout:g} s"
            ) from None
        with _public_errors():
            found = outcomes(self.config, self.config.spool_dir, acks)
        return [
            Outcome(o["outcome"], a.batch_id, o.get("reason"), o.get("detail"))
            for a, o in zip(acks, found)
        ]

    def applied(self, ack: Ack) -> bool:
        """Whether the writer has dealt with ``ack`` yet (never blocks). Raises
        ``InvalidInputError`` for anything that is not an ``Ack``."""
        ack = _check_ack(ack)
        from quill.ops.client.wait import applied_position

        with _public_errors():
            cursor = applied_position(self.config)
        return cursor is not None and cursor > ack.position

    # -- writes that read first (keys, orphans, deletes, re-pricing) -------------------------

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
        exists, or the store is PostgreSQL: not supported), ``NotFoundError`` (no applied delete
        names it)."""
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
                wait_applied(self.config, after.position, timeout)
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
            enqueue_scrub=lambda **kw: build_for(self.config).enqueue("scrub", **kw),
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

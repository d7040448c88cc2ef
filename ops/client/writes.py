"""The op writes of ``quill.Client``: ``submit`` (precheck, then one fsync'd spool append)
and one method per op kind of docs/ops.md (``append``, ``create``, ``record_usage`` …), each
returning the record's ``Ack``. ``Writes`` is a base class of ``Client``
(``ops/client/client.py`` has the module doc, ``wait`` and the constructor, which sets the
``config`` and ``_local`` attributes used here).

Threads and ``fork``: each thread of each process gets its own spool handle (``_Handle``),
created on first use and re-created after ``fork`` (``spool.forks``: a check without a system
call).
"""

from __future__ import annotations

import threading
import warnings
from typing import Any

from quill.home import Settings
from quill.ops.client.errors import InvalidInputError
from quill.ops.client.reads import _public_errors
from quill.spool import Ack, Spool, forks


def _drop_none(**fields: Any) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}


class _Handle:
    """One thread's spool handle. Its segment descriptor is closed when the handle is dropped:
    when the thread ends (its locals go), when the client is garbage-collected, or when a
    forked child replaces the parent's copy — so short-lived threads leak no descriptors."""

    __slots__ = ("spool", "generation")

    def __init__(self, spool: Spool):
        self.spool = spool
        self.generation = forks.generation()

    def __del__(self) -> None:
        self.spool.close()


class Writes:
    """The op-writing methods of ``quill.Client`` (a base class of it). Needs ``config``
    (``quill.home.Settings``) and ``_local`` (a ``threading.local``), set by ``Client``."""

    config: Settings
    _local: threading.local

    def _spool(self) -> Spool:
        handle = getattr(self._local, "handle", None)
        # None: first use in this thread; another fork generation (``spool.forks``, no system
        # call): a forked child holding the parent's copy
        if handle is None or handle.generation != forks.generation():
            handle = self._local.handle = _Handle(Spool.for_settings(self.config))
        return handle.spool

    def fits(self, op: str, data: dict[str, Any], *, batch_id: str | None = None) -> None:
        """Refuse, before anything is appended, an op whose spool record would exceed
        ``[spool] max_record_bytes``: raises ``InvalidInputError`` (reason
        ``record-too-large``). For callers that append several ops and must append none of
        them when one is refused (``submit`` checks each record itself)."""
        with _public_errors():
            self._spool().fits(op, data, batch_id)

    def submit(self, op: str, data: dict[str, Any], *, batch_id: str | None = None) -> Ack:
        """Append any op (``op`` one of docs/ops.md's kinds, ``data`` its payload) durably and
        return its ``Ack``. An op on a session the store holds (rename, flags, end, read mark)
        carries ``deletions_seen`` (``ops.client.fence``): a delete applied before it makes it a
        no-op instead of re-creating the session; when the store cannot be read to stamp it,
        the op is appended unstamped and a ``FenceWarning`` says so. Raises
        ``InvalidInputError`` (with ``reason``) if the op can never apply —
        ``record-too-large`` past ``[spool] max_record_bytes``; nothing is appended then —
        ``SpoolFullError`` or ``StorageError``."""
        from quill.ops.client.fence import FenceWarning, needs_stamp, stamp_ops
        from quill.store.apply.precheck import precheck
        from quill.store.errors import InvalidOpError

        if needs_stamp(op, data):  # an op on a session it saw: fenced against a delete since
            stamped = stamp_ops(self.config, [(op, data, batch_id)])
            data = stamped.ops[0][1]
            if stamped.unfenced:  # appended all the same (never block an agent), and said
                warnings.warn(FenceWarning(f"{op}: {stamped.why}"), stacklevel=2)
        try:
            plain = precheck(op, data, batch_id)
        except InvalidOpError as exc:
            raise InvalidInputError(
                f"{op}: {exc.reason}: {exc.detail}",
                reason=exc.reason,
                hint="fix the op or its messages (docs/ops.md); nothing was appended",
            ) from None
        return self._append_checked(op, data, batch_id=batch_id, plain=plain)

    def _append_checked(
        self, op: str, data: dict[str, Any], *, batch_id: str | None = None, plain: bool = False
    ) -> Ack:
        """``submit`` for a caller that has run ``store.apply.precheck.precheck`` on this op
        itself (the HTTP API checks every op of a request before appending any): one fsync'd
        append, no second check. ``plain`` is what that precheck returned. Raises
        ``InvalidInputError`` (``record-too-large``), ``SpoolFullError`` or ``StorageError``."""
        with _public_errors():
            return self._spool().append(op, data, batch_id=batch_id, plain=plain)

    def _append_many_checked(
        self, ops: list[tuple[str, dict[str, Any], str | None]], plain: list[bool]
    ) -> list[Ack]:
        """``_append_checked`` for several ops (each prechecked by the caller, ``plain`` its
        results): all written, then made durable by one ``fdatasync`` (``Spool.append_many``);
        returns their ``Ack``s in order. Raises what ``_append_checked`` raises, with ``acks``
        set to the acks of the ops made durable before the failure (a prefix, maybe empty)."""
        with _public_errors():
            return self._spool().append_many(ops, plain=plain)

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
        expect_head_ext_id: str | None = None,
        batch_id: str | None = None,
    ) -> Ack:
        """Rewind to a user message (exactly one of ``message_id``, ``ext_id``, ``user_turn``
        — 1 first, -1 last): it and every later live row become ``rewound`` (kept for audit).
        ``expect_head_id`` / ``expect_head_ext_id`` as in ``replace``."""
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
                expect_head_ext_id=expect_head_ext_id,
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
        expect_head_ext_id: str | None = None,
        batch_id: str | None = None,
    ) -> Ack:
        """Edit / regenerate: live rows from ``from_message_id`` / ``from_ext_id`` on (all live
        rows if neither) become ``rewound`` and ``messages`` are appended live. With
        ``expect_head_id`` (store id) or ``expect_head_ext_id`` (producer id) the op is refused
        (``stale-head``) unless that is the newest live row. Store ids are the applying store's
        own: a spool replayed into another store (a switch to PostgreSQL, a restored dump) may
        number rows differently, so producer ids are the references that replay as applied."""
        return self.submit(
            "messages.replace",
            _drop_none(
                session_id=session_id,
                messages=messages,
                from_message_id=from_message_id,
                from_ext_id=from_ext_id,
                expect_head_id=expect_head_id,
                expect_head_ext_id=expect_head_ext_id,
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

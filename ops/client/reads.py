"""The read half of ``quill.Client``: what the CLI prints with ``--json`` (``Reads`` is a base
class of ``Client``; ``ops/client/client.py`` has ``wait`` and the module doc, ``writes.py``
and ``maintenance.py`` the writes).

Each read opens a short-lived read-only store connection (``_reader``); before the store
exists, listings are empty and single-session reads raise ``NotFoundError``. Errors of the
lower layers are re-raised as the public tree (``_public_errors``).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

from quill.home import Settings
from quill.ops.client.errors import (
    POSTGRES_HINTS,
    InvalidInputError,
    NotFoundError,
    QuillError,
    StoreDamagedError,
    from_exception,
    no_session,
)
from quill.ops.client.stores import where
from quill.store import paging

VIEWS = ("display", "model", "audit")
#: Messages a page of ``transcript`` holds when only ``after`` is given (the default page of
#: ``quill sessions show`` and ``GET /sessions/{id}/messages``), and the most any page holds.
MESSAGES_PAGE, MESSAGES_MAX = 1000, 10_000


@contextlib.contextmanager
def _public_errors() -> Iterator[None]:
    """Re-raise lower-layer errors (spool, store, OS) as the public tree, classified by type.
    A spool error's ``acks`` (the records made durable before a batch append failed) stay on
    the public error."""
    try:
        yield
    except QuillError:
        raise
    except Exception as exc:
        public = from_exception(exc)
        if public is None:
            raise
        if hasattr(exc, "acks"):
            public.acks = exc.acks  # type: ignore[attr-defined]
        raise public from exc


def _ask_for_check(cfg: Any, job: str = "quick_check") -> str:
    """A reader met a damaged page: queue ``job`` (the backend's check: SQLite's
    ``quick_check``, PostgreSQL's ``pg_integrity_check``) so the store is checked now instead
    of at its next scheduled check; a confirmed damage halts the writers. Returns what
    happened, for the error message (the queue may be unreachable; the check then runs on
    schedule)."""
    from quill.jobs.errors import QueueUnavailableError as QueueDown
    from quill.jobs.queues import build_for

    try:
        build_for(cfg).enqueue(job)
    except QueueDown as exc:
        return f"could not queue a {job} ({exc}); it runs on its schedule"
    return f"a {job} was queued: the writers halt if it confirms the damage"


def _check_numbers(*, limit: Any = 1, since: Any = None, until: Any = None) -> None:
    """Reads take a whole ``limit`` ≥ 1 and finite epoch seconds; anything else is refused
    (as the CLI refuses `--limit 0` or `--since nan`), never passed on to a query."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit < 2**63:
        raise InvalidInputError(f"limit must be a whole number ≥ 1, got {limit!r}")
    for name, value in (("since", since), ("until", until)):
        if value is not None and (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or abs(value) >= 2**63
        ):
            raise InvalidInputError(f"{name} must be finite epoch seconds, got {value!r}")


def _check_types(**values: Any) -> None:
    """Each named read argument has its documented JSON type, else ``InvalidInputError``
    naming it: text arguments (ids, filters, queries) are ``None`` or a string, flags ``None``
    or a bool, lists (``kinds``, ``by``) lists of strings. A wrong type would otherwise reach
    a set lookup, a string method or an SQL binding and surface as a raw TypeError."""
    from quill.store.apply.rules import is_unicode

    for name, value in values.items():
        if value is None and name not in _REQUIRED:
            continue
        if name in _BOOLS:
            ok, want = isinstance(value, bool), "true or false"
        elif name in _LISTS:
            ok, want = (
                isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value),
                "a list of strings",
            )
        else:
            ok, want = isinstance(value, str) and is_unicode(value), "a string of valid Unicode"
        if not ok:
            raise InvalidInputError(
                f"{name} must be {want}, got {type(value).__name__} {value!r:.80}"
            )


_BOOLS = frozenset(
    {"include_hidden", "archived", "pinned", "hidden", "chains", "substring", "audit", "context"}
)
_LISTS = frozenset({"kinds", "by"})
_REQUIRED = frozenset({"session_id", "query", "view"})


class Reads:
    """Read methods of ``Client`` (they need ``self.config``, a loaded ``quill.home.Settings``)."""

    config: Settings

    @contextlib.contextmanager
    def _reader(self, missing: Exception | None) -> Iterator[Any]:
        """A read-only store connection; before the store exists, raise ``missing`` or yield
        None (an empty answer)."""
        from quill.ops.client.stores import open_reader
        from quill.store.errors import CantOpenError, CorruptError, HaltedError, StructuralError

        with _public_errors():
            try:
                reader = open_reader(self.config)
            except CantOpenError:
                from quill.ops.client.stores import lost_store

                lost = lost_store(self.config)
                if lost is not None:
                    raise lost from None
                if missing is not None:
                    raise missing from None
                yield None
                return
            try:
                with reader:
                    yield reader
            except CorruptError as exc:
                if isinstance(exc, HaltedError):
                    raise
                if getattr(exc, "backend", None) == "postgresql":
                    if isinstance(exc, StructuralError):  # no check finds a missing table
                        raise
                    raise StoreDamagedError(
                        f"{exc} ({_ask_for_check(self.config, 'pg_integrity_check')})",
                        hint=POSTGRES_HINTS["damaged"],
                    ) from exc
                raise StoreDamagedError(
                    f"{exc} ({_ask_for_check(self.config)})",
                    hint="`quill status` shows the halt once the check confirms the damage; "
                    "`quill recover` rebuilds the store from the newest snapshot plus the spool",
                ) from exc

    def transcript(
        self,
        session_id: str,
        view: str = "display",
        *,
        latest: int | None = None,
        before_id: int | None = None,
        clip: int | None = None,
        limit: int | None = None,
        after: str | None = None,
    ) -> dict[str, Any]:
        """``{"session", "chain", "messages", "context", "next"}`` — ``quill sessions show ID
        --json`` and ``GET /api/v1/sessions/{id}/messages``, read in one snapshot. ``view``:
        ``display`` (what a UI shows), ``model`` (what the model is fed, OpenAI shape),
        ``audit`` (every row with its state). ``context``: the system prompt and tool array in force
        (``{"system_prompt", "tools"}``, None when never sent; the audit view adds ``history``,
        every change, as ``context()``). ``latest``: only the last N. ``before_id``: only
        messages positioned before that message id (the next older page). ``clip``: texts cut
        to that many characters and large fields left unread, each cut named in the
        message's ``clipped`` (a page for reading, never an exact copy: see
        ``store.read.projections.read``). ``limit`` / ``after``: a page of at most ``limit``
        messages from the first, or after the page whose ``next`` cursor ``after`` is (the
        same session and view; keyset on the view's positions: messages appended meanwhile
        are neither repeated nor skipped); ``next`` is the next page's cursor, None on the
        last page and for a read that is not paged (not with ``latest`` or ``before_id``).
        Raises ``NotFoundError`` for an unknown session, ``InvalidInputError`` for a bad
        argument (``BadCursorError`` for a cursor of another listing, session or view)."""
        _check_types(session_id=session_id, view=view, after=after)
        if view not in VIEWS:
            raise InvalidInputError(f"view must be one of {', '.join(VIEWS)}, got {view!r}")
        paged = limit is not None or after is not None
        if paged and (latest is not None or before_id is not None):
            raise InvalidInputError(
                "limit/after page from the first message: not with latest or before_id"
            )
        for name, value in (
            ("latest", latest),
            ("before_id", before_id),
            ("clip", clip),
            ("limit", limit),
        ):
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or not 1 <= value < 2**63
            ):
                raise InvalidInputError(f"{name} must be a whole number ≥ 1, got {value!r}")
        scope = paging.scope_of(session_id, view)
        after_pos = None
        if after is not None:  # refused before the store is read (or found missing)
            with _public_errors():
                (after_pos,) = paging.decode(after, "messages", (int,), scope)
        missing = no_session(session_id, store_missing=True)
        cursor = None
        with self._reader(missing) as r, r.snapshot():
            session = r.get_session(session_id)
            if session is None:
                raise no_session(session_id)
            if paged:
                messages, last = r.get_messages_page(
                    session_id,
                    view,
                    limit=MESSAGES_PAGE if limit is None else limit,
                    after_pos=after_pos,
                    clip=clip,
                )
                cursor = None if last is None else paging.encode("messages", (last,), scope)
            else:
                messages = r.get_messages(
                    session_id,
                    view,
                    limit=latest,
                    latest=latest is not None,
                    before_id=before_id,
                    clip=clip,
                )
            chain = r.compression_chain(session_id)
            context = r.context(session_id)
        if view != "audit":
            del context["history"]  # every change, with its place: the audit view's business
        return {
            "session": session,
            "chain": chain,
            "messages": messages,
            "context": context,
            "next": cursor,
        }

    def messages(
        self, session_id: str, view: str = "display", *, latest: int | None = None
    ) -> list[dict[str, Any]]:
        """A session's messages in ``view``, oldest first (``transcript(...)["messages"]``)."""
        return self.transcript(session_id, view, latest=latest)["messages"]

    def session(self, session_id: str) -> dict[str, Any]:
        """One session's row (``transcript(...)["session"]``). Raises ``NotFoundError``."""
        _check_types(session_id=session_id)
        missing = no_session(session_id, store_missing=True)
        with self._reader(missing) as r:
            session = r.get_session(session_id)
        if session is None:
            raise no_session(session_id)
        return session

    def resume(self, *, key: str | None = None, cwd: str | None = None) -> dict[str, Any]:
        """The session to resume for a conversation ``key`` (or working directory ``cwd``) —
        ``quill sessions resume --key K --json``: ``{"session_id", "chain", "last_active",
        "candidates", "session"}``, the tip of the newest compression chain (never a branch,
        delegate or hidden session). Raises ``NotFoundError`` when nothing has that key."""
        if (key is None) == (cwd is None):
            raise InvalidInputError("give exactly one of key or cwd")
        _check_types(key=key, cwd=cwd)
        if cwd is not None and len(cwd) > 1:
            cwd = (
                cwd.rstrip("/") or "/"
            )  # `--cwd /repo/` names the directory importers record as /repo
        what = f"key {key!r}" if key is not None else f"cwd {cwd!r}"
        missing = NotFoundError(
            f"no session for {what} (no store at {where(self.config)} yet)",
            hint="push or import something, then `quill run` applies it",
        )
        with self._reader(missing) as r, r.snapshot():
            found = r.resume_target(key=key, cwd=cwd)
            if found is None:
                raise NotFoundError(
                    f"no session for {what}",
                    hint=(
                        "sessions get a key with session.create's `key`"
                        if key is not None
                        else "a session matches a cwd it started in exactly; "
                        "`quill sessions list --json` shows each cwd"
                    ),
                )
            found["session"] = r.get_session(found["session_id"])
        return found

    def context(self, session_id: str) -> dict[str, Any]:
        """A session's system prompt and tool array — ``{"system_prompt", "tools", "history"}``
        (each distinct value stored once; ``history`` lists every change). Raises
        ``NotFoundError`` for an unknown session."""
        _check_types(session_id=session_id)
        missing = no_session(session_id, store_missing=True)
        with self._reader(missing) as r, r.snapshot():
            if r.get_session(session_id) is None:
                raise no_session(session_id)
            return r.context(session_id)

    def orphans(self, *, window_s: float | None = None) -> list[dict[str, Any]]:
        """Sessions that never got their key, with the predecessor each continues when the
        evidence is unambiguous (else ``reason``) — ``quill sessions orphans --json``."""
        from quill.store.read.resume import QUIET_WINDOW_S

        if window_s is not None and (
            isinstance(window_s, bool)
            or not isinstance(window_s, (int, float))
            or not 0 <= window_s < 2**63
        ):
            raise InvalidInputError(
                f"window_s must be a finite number of seconds ≥ 0, got {window_s!r:.80}"
            )
        with self._reader(None) as r:
            return (
                []
                if r is None
                else r.orphans(window_s=QUIET_WINDOW_S if window_s is None else window_s)
            )

    def usage(
        self,
        by: tuple[str, ...] | list[str] = (),
        *,
        since: float | None = None,
        until: float | None = None,
        session_id: str | None = None,
        source: str | None = None,
        model: str | None = None,
        task: str | None = None,
    ) -> list[dict[str, Any]]:
        """Token and cost totals — ``quill usage --json``: one row per group of ``by``
        (``session``, ``model``, ``source``, ``task``, ``provider``, ``day``), each with
        ``calls``, the token fields, ``cost_usd`` (USD; None when nothing is priced) and
        ``unpriced`` (calls without a price). No ``by``: one grand total (zeros before any
        usage). Raises ``InvalidInputError`` for an unknown grouping."""
        from quill.store.read.usage import empty_totals

        by = self._usage_groups(by, since, until, session_id, source, model, task)
        with self._reader(None) as r:
            rows = (
                []
                if r is None
                else r.usage_totals(
                    tuple(dict.fromkeys(by)),
                    since=since,
                    until=until,
                    session_id=session_id,
                    source=source,
                    model=model,
                    task=task,
                )
            )
        return rows if rows or by else [empty_totals()]

    @staticmethod
    def _usage_groups(
        by: Any,
        since: Any,
        until: Any,
        session_id: Any,
        source: Any,
        model: Any,
        task: Any,
    ) -> tuple[str, ...]:
        """``usage``'s arguments checked (``InvalidInputError``): ``by`` as a tuple."""
        from quill.store.read.usage import GROUPS

        _check_numbers(since=since, until=until)
        by = () if by is None else by
        _check_types(by=by, source=source, model=model, task=task)
        if session_id is not None:
            _check_types(session_id=session_id)
        bad = [b for b in by if b not in GROUPS]
        if bad:
            raise InvalidInputError(
                f"unknown usage grouping {bad[0]!r}; choose from {', '.join(GROUPS)}"
            )
        return tuple(by)

    def search_health(self) -> dict[str, Any]:
        """``{"fts_state", "fts_pending", "degraded"}`` of the search index (empty store: ok)."""
        with self._reader(None) as r:
            return (
                {"fts_state": "ok", "fts_pending": 0, "degraded": False}
                if r is None
                else r.search_health()
            )

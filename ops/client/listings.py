"""The paged listings of ``Client`` (a base class, as ``reads.Reads``): ``sessions_page``
(``quill sessions list --json``, ``GET /api/v1/sessions``: a page and its ``next`` cursor),
``sessions`` (its rows) and ``usage_page`` (``quill usage``, ``GET /api/v1/usage``)."""

from __future__ import annotations

from typing import Any

from quill.ops.client.reads import _check_numbers, _check_types, _public_errors
from quill.store import paging


class Listings:
    """``sessions``, ``sessions_page`` and ``usage_page``; needs ``Reads._reader``."""

    def sessions(self, **filters: Any) -> list[dict[str, Any]]:
        """The rows of ``sessions_page`` (same arguments): a list of session dicts."""
        return self.sessions_page(**filters)["sessions"]

    def sessions_page(
        self,
        *,
        source: str | None = None,
        limit: int = 50,
        include_hidden: bool = False,
        title_contains: str | None = None,
        since: float | None = None,
        until: float | None = None,
        archived: bool | None = None,
        pinned: bool | None = None,
        hidden: bool | None = None,
        chains: bool = False,
        after: str | None = None,
    ) -> dict[str, Any]:
        """Sessions, most recently active first, a page of at most ``limit`` — ``quill
        sessions list --json`` and ``GET /api/v1/sessions``: ``{"sessions": [...], "next":
        cursor | None}``. ``since`` / ``until`` in epoch seconds, both bounding the session's
        last activity (newest message time, else start; ``store.read.listing``);
        ``chains=True`` lists every session of a compression chain (default: one row per
        chain, its tip). ``after``: the ``next`` of the previous page with the same filters
        (keyset: stable under concurrent writes). Empty before the store exists. Raises
        ``BadCursorError`` (an ``InvalidInputError``) for a cursor of another listing or
        filters, or none at all."""
        _check_numbers(limit=limit, since=since, until=until)
        _check_types(
            source=source,
            title_contains=title_contains,
            include_hidden=include_hidden,
            archived=archived,
            pinned=pinned,
            hidden=hidden,
            chains=chains,
            after=after,
        )
        filters = dict(
            source=source,
            include_hidden=include_hidden,
            title_contains=title_contains,
            since=since,
            until=until,
            archived=archived,
            pinned=pinned,
            hidden=hidden,
            lineage="all" if chains else "tips",
        )
        if after is not None:  # refused before the store is read (or found missing)
            from quill.store.read.listing import scope_of

            with _public_errors():
                paging.decode(after, "sessions", (float, str), scope_of(**filters))
        with self._reader(None) as r:  # type: ignore[attr-defined]
            if r is None:
                return {"sessions": [], "next": None}
            return r.sessions_page(after=after, limit=limit, **filters)

    def usage_page(
        self,
        by: tuple[str, ...] | list[str] = (),
        *,
        limit: int = 1000,
        after: str | None = None,
        since: float | None = None,
        until: float | None = None,
        session_id: str | None = None,
        source: str | None = None,
        model: str | None = None,
        task: str | None = None,
    ) -> dict[str, Any]:
        """Token and cost totals a page at a time — ``quill usage --json`` and ``GET
        /api/v1/usage``: ``{"usage": rows, "next": cursor | None}``, the rows of ``usage``
        (same grouping and filters) ordered by the group key (NULL first), at most ``limit``
        after the group the cursor ``after`` names (the ``next`` of the previous page with the
        same ``by`` and filters; keyset in SQL: a NULL group value travels as JSON null). No
        ``by``: the grand total, one row (zeros before any usage), ``next`` None. Raises
        ``InvalidInputError`` for an unknown grouping, ``BadCursorError`` (one) for a cursor
        of another listing, grouping or filter."""
        from quill.store.read.usage import cursor_key, empty_totals

        groups = self._usage_groups(  # type: ignore[attr-defined]
            by, since, until, session_id, source, model, task
        )
        by = tuple(dict.fromkeys(groups))
        _check_numbers(limit=limit)
        _check_types(after=after)
        filters = dict(
            since=since, until=until, session_id=session_id, source=source, model=model, task=task
        )
        if after is not None:  # refused before the store is read (or found missing)
            with _public_errors():
                cursor_key(after, by, **filters)
        with self._reader(None) as r:  # type: ignore[attr-defined]
            found = (
                {"usage": [], "next": None}
                if r is None
                else r.usage_page(by, limit=limit, after=after, **filters)
            )
        if not by and not found["usage"]:
            found["usage"] = [empty_totals()]
        return found

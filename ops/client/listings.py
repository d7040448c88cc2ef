"""The session listing of ``Client`` (a base class, as ``reads.Reads``): ``sessions_page``
(``quill sessions list --json``, ``GET /api/v1/sessions``: a page and its ``next`` cursor)
and ``sessions`` (its rows)."""

from __future__ import annotations

from typing import Any

from quill.ops.client.reads import _check_numbers, _check_types, _public_errors
from quill.store import paging


class Listings:
    """``sessions`` and ``sessions_page``; needs ``Reads._reader``."""

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

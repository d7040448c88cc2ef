"""Search reads of ``Client`` (a base class, as ``reads.Reads``): ``search`` (the hit list)
and ``search_results`` (hits capped per session, with a bounded total)."""

from __future__ import annotations

import inspect
from dataclasses import asdict, dataclass, fields
from typing import Any

from quill.ops.client.errors import InvalidInputError
from quill.ops.client.reads import _check_numbers, _check_types
from quill.store.errors import BadCursorError
from quill.store.search.group import COUNT_MAX, PER_SESSION


@dataclass(frozen=True)
class SearchParams:
    """Every search parameter but the query, with its default: the one definition behind
    ``Client.search`` and ``Client.search_results`` (their signatures are made from it, the
    arguments checked by ``Search._search``), ``quill search`` (which passes its options on
    by these names) and ``GET /api/v1/search``. ``per_session`` defaults to no cap here and
    to ``PER_SESSION`` in ``search_results``. ``after``: the ``next`` cursor of the previous
    page of the same search (same query and filters; ``limit`` and ``context`` may differ)."""

    limit: int = 20
    session_id: str | None = None
    role: str | None = None
    source: str | None = None
    since: float | None = None
    until: float | None = None
    substring: bool = False
    audit: bool = False
    context: bool = True
    kinds: list[str] | None = None
    order: str = "newest"
    per_session: int | None = None
    after: str | None = None


#: The names of the search parameters (``SearchParams``), in order.
SEARCH_PARAMS = tuple(f.name for f in fields(SearchParams))


def _params(given: dict[str, Any], **defaults: Any) -> dict[str, Any]:
    """``given`` over ``defaults`` over ``SearchParams``' defaults, as a dict. Raises
    ``TypeError`` for a name that is not a search parameter."""
    unknown = sorted(set(given) - set(SEARCH_PARAMS))
    if unknown:
        raise TypeError(f"search() got an unexpected keyword argument {unknown[0]!r}")
    return {**asdict(SearchParams()), **defaults, **given}


def _signature(per_session: int | None) -> inspect.Signature:
    """``(self, query: str, *, <every SearchParams field>)``, ``per_session`` defaulting to
    ``per_session``: what ``help()`` and ``inspect`` show for the two search methods."""
    keyword = inspect.Parameter.KEYWORD_ONLY
    return inspect.Signature(
        [
            inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
            inspect.Parameter("query", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=str),
            *(
                inspect.Parameter(
                    f.name,
                    keyword,
                    default=per_session if f.name == "per_session" else f.default,
                    annotation=f.type,
                )
                for f in fields(SearchParams)
            ),
        ]
    )


class Search:
    """``search`` and ``search_results``; needs ``Reads._reader``."""

    def search(self, query: str, **params: Any) -> list[dict[str, Any]]:
        """Full-text search, most recently stored first (the order messages reached the store,
        not their own ``ts``): the hit list of ``search_results`` (hits with
        their neighbouring messages as context; ``context=False`` leaves it out), with no
        per-session cap unless ``per_session`` is given and no total. Any text is a valid
        query. Empty before the store exists. When the index is being rebuilt after damage,
        results come from a bounded scan (``search_health()`` says so). ``kinds`` limits where
        to look: ``text``, ``tool`` (call names and arguments), ``reasoning`` (default: all).
        ``order="relevance"`` ranks word queries over the 1,000 most recently stored matches
        (BM25 on SQLite,
        ``store/search/rank.py``; ``ts_rank`` on PostgreSQL); raises ``InvalidInputError`` for
        another order, or for a query or store it cannot rank. Parameters: ``SearchParams``."""
        return self._search(query, _params(params), page=False)["hits"]

    def search_results(self, query: str, **params: Any) -> dict[str, Any]:
        """``search`` grouped — ``quill search QUERY --json`` and ``GET /api/v1/search``:
        ``{"hits": [...], "total": int, "total_exact": bool, "more": bool, "per_session":
        int | None, "sessions": [{"session_id", "title", "shown", "matches"}]}``.

        At most ``per_session`` hits (default 3; None or 0: no cap; ignored with
        ``session_id``) come from one session, so one chatty session cannot hide the others;
        ``sessions`` lists every session with a counted match in order of its best hit, with
        how many of its hits are shown and how many matched. ``total`` counts matching
        messages up to 1,000 (``store.search.group.COUNT_MAX``): exact when ``total_exact``,
        else a lower bound ("1000+"); ``more`` says matches exist beyond ``hits`` (and the
        pages before them). ``next``: the cursor of the next page (pass it as ``after`` with
        the same query and filters), None when no hit follows; pages are slices of the
        first page's result (rows stored meanwhile are not in it), the same hits in the
        same order as one page of their size (``store.search.request``). Arguments and
        errors as ``search``; ``BadCursorError`` for an ``after`` that is not a cursor of
        this search."""
        return self._search(query, _params(params, per_session=PER_SESSION), page=True)

    search.__signature__ = _signature(None)  # type: ignore[attr-defined]
    search_results.__signature__ = _signature(PER_SESSION)  # type: ignore[attr-defined]

    def _search(self, query: str, a: dict[str, Any], *, page: bool) -> dict[str, Any]:
        """Check the arguments ``a`` and run the reader's ``search_page`` (``page``: with the
        bounded count) or ``search`` (wrapped as ``{"hits": ...}``)."""
        _check_numbers(limit=a["limit"], since=a["since"], until=a["until"])
        per_session = a.pop("per_session")
        if per_session is not None and (
            isinstance(per_session, bool)
            or not isinstance(per_session, int)
            or not 0 <= per_session < 2**31
        ):
            raise InvalidInputError(
                f"per_session must be a whole number ≥ 0 or None, got {per_session!r}"
            )
        _check_types(
            query=query,
            role=a["role"],
            source=a["source"],
            order=a["order"],
            kinds=a["kinds"],
            substring=a["substring"],
            audit=a["audit"],
            context=a["context"],
            after=a["after"],
        )
        if a["session_id"] is not None:
            _check_types(session_id=a["session_id"])
        order, kinds = a.pop("order"), a.pop("kinds")
        if order not in ("newest", "relevance"):
            raise InvalidInputError(f"order must be 'newest' or 'relevance', got {order!r}")
        audit = a.pop("audit")
        with self._reader(None) as r:  # type: ignore[attr-defined]
            if r is None:
                return {
                    "hits": [],
                    "total": 0,
                    "total_exact": True,
                    "more": False,
                    "per_session": None if a["session_id"] is not None else per_session or None,
                    "sessions": [],
                    "next": None,
                }
            kw = dict(
                a,
                projection="audit" if audit else "display",
                **({"kinds": list(kinds)} if kinds else {}),
                **({"order": order} if order != "newest" else {}),
                **({"per_session": per_session} if per_session else {}),
            )
            try:
                if page:
                    return r.search_page(query, **kw)
                return {"hits": r.search(query, **kw)}
            except ValueError as exc:  # the reader's refusal of a ranked query it cannot rank
                if order == "newest" or isinstance(exc, BadCursorError):
                    raise
                raise InvalidInputError(
                    str(exc), hint="use the default order (newest first)"
                ) from None


__all__ = ["COUNT_MAX", "PER_SESSION", "SEARCH_PARAMS", "Search", "SearchParams"]

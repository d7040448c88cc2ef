"""Paging a listing on the command line, the one way every ``quill`` listing pages
(``sessions list``, ``search``, ``jobs history``, ``spool quarantine list``, ``sessions
orphans``): ``--limit N`` rows a page, ``--after CURSOR`` the page after the row that cursor
names. The cursor of the next page is the ``next`` member of the ``--json`` document (null on
the last page); without ``--json``, a note on stderr under a page with more to come gives it.
A listing with no rows says so in words (``no_rows``); its ``--json`` is the document with
no rows.

Cursors are ``quill.store.paging``'s (one format for the CLI, ``quill.Client`` and the HTTP
API): the keyset of a page's last row, bound to its listing, so the next page continues
strictly after it (a row removed meanwhile, a quarantine entry retried, never makes a page
start over or repeat one) and a cursor of another listing is refused (exit 2).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import click

from quill.ops.client.errors import BadCursorError
from quill.store import paging as cursors
from quill.store.errors import BadCursorError as StoreBadCursorError

#: A row's sort key: JSON scalars (numbers, text), compared as a tuple.
Key = cursors.Key


def after_option(func: Callable[..., Any]) -> Callable[..., Any]:
    """The ``--after CURSOR`` option (parameter ``after``)."""
    return click.option(
        "--after",
        metavar="CURSOR",
        help="The next page: the `next` cursor of the previous page (--json), or the one "
        "its note on stderr gave.",
    )(func)


def decode(cursor: str, listing: str, kinds: tuple[type | tuple[type, ...], ...]) -> Key:
    """The key of ``cursor``, a cursor of ``listing`` (``store.paging.decode``). Raises
    ``BadCursorError`` (exit 2, nothing read) for anything else."""
    try:
        return cursors.decode(cursor, listing, kinds)
    except StoreBadCursorError as exc:
        raise BadCursorError(str(exc), foreign=exc.foreign) from None


def page(
    rows: Iterable[dict[str, Any]],
    key: Callable[[dict[str, Any]], Key],
    limit: int,
    after: Key | None,
    listing: str,
    *,
    descending: bool = False,
) -> tuple[list[dict[str, Any]], str | None]:
    """One page of ``rows`` (in the listing's order: ascending by ``key``, or ``descending``):
    at most ``limit`` rows after ``after`` (a decoded cursor; None: from the start), and the
    cursor of the next page of ``listing`` (None when no row follows): ``store.paging.page_rows``.
    """
    return cursors.page_rows(rows, key, limit, after, listing, descending=descending)


def note_next(what: str, limit: int, cursor: str | None, shown: str | None = None) -> None:
    """On stderr, when ``cursor`` is set: more ``what`` match, which ones are shown (``shown``,
    e.g. ``the 20 most recently stored``; default: the count ``limit``), and the next page's
    option."""
    if cursor is not None:
        click.echo(
            f"quill: more {what} match; showing {shown or limit}; the next page: --after {cursor} "
            "(or --limit N)",
            err=True,
        )


def no_rows(text: str) -> None:
    """An empty listing, in words (``text``: ``no quarantined records`` …) on stdout."""
    click.echo(text)

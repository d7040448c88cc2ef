"""Paging a listing on the command line, the way ``quill sessions list`` pages: ``--limit N``
rows a page, ``--after CURSOR`` the page after the row that cursor names, and on a page
with more rows to come a note on stderr giving that cursor (with ``--json`` too: stdout
stays the listing's JSON). A listing with no rows says so in words (``no_rows``); its
``--json`` is the empty listing.

A cursor is the keyset of a page's last row (its sort key, as JSON, URL-safe base64): the
next page continues strictly after it, so a row removed meanwhile (a quarantine entry
retried) never makes a page start over or repeat one.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable
from typing import Any

import click

#: A row's sort key: JSON scalars (numbers, text), compared as a tuple.
Key = tuple[Any, ...]


def after_option(func: Callable[..., Any]) -> Callable[..., Any]:
    """The ``--after CURSOR`` option (parameter ``after``)."""
    return click.option(
        "--after",
        metavar="CURSOR",
        help="The next page: the cursor the previous page's note gave (rows after its last one).",
    )(func)


def encode(key: Key) -> str:
    """The cursor of a row whose sort key is ``key``."""
    text = json.dumps(list(key), separators=(",", ":"))
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def decode(cursor: str, kinds: tuple[type, ...]) -> Key:
    """``encode``'s key back, its items of ``kinds`` (one type per item; ``float`` takes an
    int too). Raises ``click.BadParameter`` (exit 2, nothing read) for anything else."""
    try:
        key = json.loads(base64.urlsafe_b64decode((cursor + "=" * (-len(cursor) % 4)).encode()))
    except (ValueError, TypeError, UnicodeError):
        key = None
    fits = (
        isinstance(key, list)
        and len(key) == len(kinds)
        and all(
            isinstance(v, (int, float) if k is float else k) and not isinstance(v, bool)
            for v, k in zip(key, kinds)
        )
    )
    if not fits:
        raise click.BadParameter(
            f"not a cursor of this listing: {cursor[:40]!r}", param_hint="--after"
        )
    return tuple(key)


def page(
    rows: Iterable[dict[str, Any]],
    key: Callable[[dict[str, Any]], Key],
    limit: int,
    after: Key | None,
    *,
    descending: bool = False,
) -> tuple[list[dict[str, Any]], str | None]:
    """One page of ``rows`` (in the listing's order: ascending by ``key``, or ``descending``):
    at most ``limit`` rows after ``after`` (a decoded cursor; None: from the start), and the
    cursor of the next page (None when no row follows)."""
    out, more = [], False
    for row in rows:
        k = key(row)
        if after is not None and (k >= after if descending else k <= after):
            continue
        if len(out) == limit:
            more = True
            break
        out.append(row)
    return out, encode(key(out[-1])) if more else None


def note_next(what: str, limit: int, cursor: str | None) -> None:
    """On stderr, when ``cursor`` is set: more ``what`` match, and the next page's option."""
    if cursor is not None:
        click.echo(
            f"quill: more {what} match; showing {limit}; the next page: --after {cursor} "
            "(or --limit N)",
            err=True,
        )


def no_rows(text: str) -> None:
    """An empty listing, in words (``text``: ``no quarantined records`` …) on stdout."""
    click.echo(text)

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
import math
from collections.abc import Callable, Iterable
from typing import Any

import click

#: A row's sort key: JSON scalars (numbers, text), compared as a tuple.
Key = tuple[Any, ...]
#: The integers a cursor may hold: a store's (SQLite's INTEGER, PostgreSQL's bigint). A larger
#: one can be no row's key, and binding it in SQL raises ``OverflowError``.
_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1


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


def _fits(value: Any, kind: type) -> bool:
    """Whether ``value`` (decoded JSON) is an item of ``kind`` some row's key can hold: a
    64-bit integer, a finite number, text."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return kind in (int, float) and _INT_MIN <= value <= _INT_MAX
    if isinstance(value, float):
        return kind is float and math.isfinite(value)
    return isinstance(value, kind)


def decode(cursor: str, kinds: tuple[type, ...]) -> Key:
    """``encode``'s key back, its items of ``kinds`` (one type per item; ``float`` takes an
    int too; integers within 64 bits, numbers finite: no row has another key). Raises
    ``click.BadParameter`` (exit 2, nothing read) for anything else."""
    try:
        key = json.loads(base64.urlsafe_b64decode((cursor + "=" * (-len(cursor) % 4)).encode()))
    except (ValueError, TypeError, UnicodeError):
        key = None
    fits = (
        isinstance(key, list)
        and len(key) == len(kinds)
        and all(_fits(v, k) for v, k in zip(key, kinds))
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

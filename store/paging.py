"""Page cursors: the one format every paged listing of Quill uses (sessions, search hits, a
session's messages, job runs, quarantine entries, orphans), on the CLI (``--after``), in
``quill.Client`` (``after=``) and over HTTP (``?after=``).

A cursor is opaque, URL-safe text: base64url (unpadded) of the JSON ``[listing, scope,
key...]``.

* ``listing`` names the list it pages (``sessions``, ``search`` …);
* ``scope`` is a digest of what else fixes the list (a search's query and filters, the
  session and view of a message listing; ``""`` when nothing does);
* ``key`` is the keyset of the page's last row (its sort key): the next page continues
  strictly after it, so rows inserted meanwhile never shift a page (no row is repeated or
  skipped, as they would be with an OFFSET).

A key item may be SQL NULL (a group of ``quill usage`` with no model, say): it travels as
JSON ``null``, never as ``""`` or ``0`` (a group ``""`` is another group), and ``decode``
accepts it only where the listing's kind for that item admits ``None`` (``NULLABLE_STR``).

``decode`` refuses a cursor of another listing or scope (a search cursor given to another
query, a sessions cursor given to ``jobs history``) and anything malformed with
``BadCursorError``: a cursor is never read as "from the start".
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
from collections.abc import Callable, Iterable
from typing import Any

from quill.store.errors import BadCursorError

#: A row's sort key: JSON scalars (numbers, text), compared as a tuple.
Key = tuple[Any, ...]
#: A key item's kind that is text or SQL NULL (``decode``'s ``kinds``).
NULLABLE_STR = (str, type(None))
#: The integers a cursor may hold: a store's (SQLite's INTEGER, PostgreSQL's bigint). A larger
#: one can be no row's key, and binding it in SQL raises ``OverflowError``.
_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1


def scope_of(*parts: Any) -> str:
    """A short digest of ``parts`` (JSON-serialisable): a cursor's scope. Equal parts give
    equal scopes; any difference gives another (with overwhelming probability)."""
    text = json.dumps(parts, separators=(",", ":"), sort_keys=True, default=str)
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def encode(listing: str, key: Key, scope: str = "") -> str:
    """The cursor continuing ``listing`` (within ``scope``) after the row whose sort key is
    ``key``."""
    text = json.dumps([listing, scope, *key], separators=(",", ":"))
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def _fits(value: Any, kind: type | tuple[type, ...]) -> bool:
    """Whether ``value`` (decoded JSON) is an item of ``kind`` (a type, or a tuple of types
    any of which will do) some row's key can hold: a 64-bit integer, a finite number, text,
    None (SQL NULL) only where ``kind`` names ``type(None)``."""
    if isinstance(kind, tuple):
        return any(_fits(value, k) for k in kind)
    if value is None:
        return kind is type(None)
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return kind in (int, float) and _INT_MIN <= value <= _INT_MAX
    if isinstance(value, float):
        return kind is float and math.isfinite(value)
    return isinstance(value, kind)


def decode(
    cursor: Any, listing: str, kinds: tuple[type | tuple[type, ...], ...], scope: str = ""
) -> Key:
    """``encode``'s key back, checked: a cursor of ``listing`` and ``scope`` whose key has one
    item of each of ``kinds`` (``float`` takes an int too; integers within 64 bits, numbers
    finite: no row has another key; None only for a kind such as ``NULLABLE_STR``). Raises
    ``BadCursorError`` for anything else: not a cursor, a cursor of another listing, or of the
    same listing for another query (``foreign``)."""
    if not isinstance(cursor, str):
        raise BadCursorError(f"a cursor is text, got {type(cursor).__name__}")
    shown = cursor[:40]
    try:
        data = json.loads(base64.urlsafe_b64decode((cursor + "=" * (-len(cursor) % 4)).encode()))
    except (ValueError, TypeError, UnicodeError):
        data = None
    if not (
        isinstance(data, list) and len(data) >= 2 and all(isinstance(v, str) for v in data[:2])
    ):
        raise BadCursorError(f"not a page cursor: {shown!r}")
    if data[0] != listing or data[1] != scope:
        what = data[0] if data[0] == listing else f"the {data[0]} listing"
        raise BadCursorError(
            f"cursor {shown!r} pages {what}"
            + (" for another query or filter" if data[0] == listing else "")
            + f", not this {listing} listing",
            foreign=True,
        )
    key = data[2:]
    if not (len(key) == len(kinds) and all(_fits(v, k) for v, k in zip(key, kinds))):
        raise BadCursorError(f"not a cursor of the {listing} listing: {shown!r}")
    return tuple(key)


def page_rows(
    rows: Iterable[dict[str, Any]],
    key: Callable[[dict[str, Any]], Key],
    limit: int,
    after: Key | None,
    listing: str,
    scope: str = "",
    *,
    descending: bool = False,
) -> tuple[list[dict[str, Any]], str | None]:
    """One page of a listing held whole in memory (a bounded one: the job catalog, the
    schedules, tokens): ``rows`` in the listing's order (ascending by ``key``, or
    ``descending``), at most ``limit`` of them after ``after`` (a ``decode``d key; None: from
    the start), and the cursor of the next page of ``listing`` within ``scope`` (None when no
    row follows). The keyset rule is the stores' listings': a row removed meanwhile never
    makes a page start over or repeat one."""
    out, more = [], False
    for row in rows:
        k = key(row)
        if after is not None and (k >= after if descending else k <= after):
            continue
        if len(out) == limit:
            more = True
            break
        out.append(row)
    return out, encode(listing, key(out[-1]), scope) if more else None

"""The SQL dialect ``PgConnection`` translates: the shared store modules write one SQL subset
against apsw's calling convention, and ``translate`` turns it into PostgreSQL's.

What it translates is a fixed, small list:

* ``?`` and ``?NNN`` placeholders → ``%s`` (numbered ones re-ordered; a ``?`` inside a string
  literal or quoted identifier is left alone), every ``%`` doubled;
* ``LIKE`` → ``ILIKE``: SQLite's LIKE ignores (ASCII) case, PostgreSQL's does not;
* ``INSERT OR IGNORE INTO …`` → ``INSERT INTO … ON CONFLICT DO NOTHING``;
* ``BEGIN IMMEDIATE`` (a write transaction) → ``BEGIN`` (READ COMMITTED: writers serialize
  per session with advisory locks, see ``store.postgres.apply``), and a plain ``BEGIN`` (a
  read snapshot, ``Reader.snapshot``) → ``BEGIN ISOLATION LEVEL REPEATABLE READ``, which gives
  a reader one committed state for all its queries, as a SQLite read transaction does.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any

from quill.store import packed

_TOKENS = re.compile(r"""('(?:[^']|'')*')|("(?:[^"]|"")*")|(\?\d*)|(%)|(\bLIKE\b)""", re.S | re.I)
_OR_IGNORE = re.compile(r"^\s*INSERT\s+OR\s+IGNORE\s+INTO\b", re.I)


@functools.lru_cache(maxsize=1024)
def translate(sql: str) -> tuple[str, tuple[int, ...] | None]:
    """``(postgres_sql, order)``: ``order`` lists, for each ``%s``, the 0-based index of the
    argument it takes (None when placeholders are plain ``?`` in order)."""
    stripped = sql.strip().rstrip(";").strip()
    upper = stripped.upper()
    if upper == "BEGIN IMMEDIATE":
        return "BEGIN", None
    if upper == "BEGIN":
        return "BEGIN ISOLATION LEVEL REPEATABLE READ", None
    order: list[int] = []
    numbered = False

    def sub(m: re.Match) -> str:
        nonlocal numbered
        if m.group(3):
            if len(m.group(3)) > 1:
                numbered = True
                order.append(int(m.group(3)[1:]) - 1)
            else:
                order.append(len(order))
            return "%s"
        if m.group(5):
            return "ILIKE"
        # psycopg reads every % in the text, inside literals too: double them all.
        return m.group(0).replace("%", "%%")

    # store.packed's expressions read as their column (PostgreSQL's TOAST compresses itself)
    out = _TOKENS.sub(sub, packed.for_postgres(sql))
    if _OR_IGNORE.match(out):
        out = _OR_IGNORE.sub("INSERT INTO", out).rstrip().rstrip(";") + " ON CONFLICT DO NOTHING"
    return out, (tuple(order) if numbered else None)


def ordered_args(order: tuple[int, ...] | None, args: Sequence[Any] | None) -> Sequence[Any]:
    """``args`` in the order ``translate``'s ``order`` takes them (as given when None)."""
    args = () if args is None else tuple(args)
    return args if order is None else tuple(args[i] for i in order)

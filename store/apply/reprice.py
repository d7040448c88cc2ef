"""``usage.reprice``: new costs for usage rows priced with an older price table.

A usage row's cost is computed once, when it is applied, with the installed ``genai-prices``
and that version recorded in ``price_version``. Re-pricing is a decision taken outside the
writer (``ops.reprice``: compute each row's cost with the current table) and applied as an op,
so the spool stays the log of every change and a rebuild applies the very same numbers: the op
carries the costs, never "re-price with whatever is installed".

Payload: ``{"price_version": "genai-prices==X", "rows": [[usage id, old price_version | null,
cost_usd], ...], "actor": "user:alice"}``. Each row is updated only while it still carries
``old`` (``IS``: null matches an unpriced row), so a row re-priced or re-recorded since the
decision is left alone and re-applying the op changes nothing.
"""

from __future__ import annotations

import math
from typing import Any

import apsw

from quill.store.apply.rules import atomic, opt
from quill.store.errors import InvalidOpError

#: Most rows one op may carry (bounds the op's transaction and its spool line).
MAX_ROWS = 2_000
VERSION_MAX_CHARS = 64


def check_reprice(data: dict) -> list[tuple[int, str | None, float]]:
    """Validate a ``usage.reprice`` payload without a database (the applier and
    ``store.apply.precheck`` share it). Returns ``(id, old version, cost)`` triples. Raises
    ``InvalidOpError('invalid-field')``."""
    version = data.get("price_version")
    if (
        not isinstance(version, str)
        or not version
        or len(version) > VERSION_MAX_CHARS
        or "\x00" in version
    ):
        raise InvalidOpError(
            "invalid-field", f"price_version must be a string of 1..{VERSION_MAX_CHARS} chars"
        )
    rows = data.get("rows")
    if not isinstance(rows, list) or not rows or len(rows) > MAX_ROWS:
        raise InvalidOpError(
            "invalid-field", f"rows must be a list of 1..{MAX_ROWS} [id, old_version, cost]"
        )
    out = []
    for row in rows:
        if not (isinstance(row, list) and len(row) == 3):
            raise InvalidOpError(
                "invalid-field", "each row is [usage id, old price_version or null, cost_usd]"
            )
        rid, old, cost = row
        if not isinstance(rid, int) or isinstance(rid, bool) or not 0 < rid < 2**63:
            raise InvalidOpError(
                "invalid-field", f"usage id must be a positive integer, got {rid!r}"
            )
        if old is not None and (
            not isinstance(old, str) or len(old) > VERSION_MAX_CHARS or "\x00" in old
        ):
            raise InvalidOpError("invalid-field", "old price_version must be a string or null")
        if (
            isinstance(cost, bool)
            or not isinstance(cost, (int, float))
            or cost < 0
            or cost >= 2**63
            or not math.isfinite(cost)
        ):  # a huge int would overflow isfinite
            raise InvalidOpError(
                "invalid-field", f"cost_usd must be a finite number ≥ 0, got {cost!r}"
            )
        out.append((rid, old, float(cost)))
    opt(data, "actor", str)
    return out


@atomic
def usage_reprice(conn: apsw.Connection, data: dict, batch_id: str, arrived_at: float) -> int:
    """Set ``cost_usd`` and ``price_version`` of each listed usage row that still carries its
    old version (module doc). Returns 0 (no rows inserted). Raises ``InvalidOpError``."""
    rows = check_reprice(data)
    for rid, old, cost in rows:
        conn.execute(
            "UPDATE usage SET cost_usd = ?, price_version = ? "
            "WHERE id = ? AND price_version IS NOT DISTINCT FROM ?",
            (cost, data["price_version"], rid, old),
        )
    return 0


def stale_rows(
    conn: Any, current: str
) -> list[tuple[int, str | None, str | None, str | None, float, dict]]:
    """Usage rows not priced with ``current``: ``(id, price_version, model, provider, ts,
    tokens)``, in id order (unpriced rows included: a newer table may know their model)."""
    from quill.store.apply.usage import TOKEN_FIELDS

    cols = ", ".join(TOKEN_FIELDS)
    return [
        (r[0], r[1], r[2], r[3], r[4], dict(zip(TOKEN_FIELDS, r[5:])))
        for r in conn.execute(
            f"SELECT id, price_version, model, provider, ts, {cols} FROM usage "
            "WHERE price_version IS NULL OR price_version != ? ORDER BY id",
            (current,),
        ).fetchall()
    ]

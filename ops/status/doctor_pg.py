"""``quill doctor``'s checks of a PostgreSQL store (``[store] url``)."""

from __future__ import annotations

import time
from typing import Any

from quill.home import Settings
from quill.ops import human
from quill.ops.client.stores import where
from quill.ops.status import guard
from quill.ops.status.checks import check, overdue_check
from quill.ops.status.overdue import overdue_jobs


def pg_checks(cfg: Settings, out: list[dict[str, Any]]) -> guard.StoreRead:
    """Checks of a PostgreSQL store (``[store] url``): reachable with a Quill schema, its
    figures, every host's cursor, the last amcheck run, overdue jobs. Returns the guarded
    read (its value: the store figures). The password in the URL is never shown."""
    found = guard.read_store(
        cfg,
        lambda r: (r.figures(), r.server_figures(time.time()), overdue_jobs(cfg, r.conn)),
    )
    if found.state == "missing":  # reachable, nothing applied yet: what set-up leaves
        out.append(
            check(
                "store (postgresql)",
                True,
                f"{where(cfg)}: no Quill schema yet (the writer creates it at its start: "
                "quill run)",
            )
        )
        return found
    if not found.ok:
        out.append(check("store (postgresql)", False, f"cannot read {where(cfg)}: {found.error}"))
        return found
    figures, pg, overdue = found.value
    out.append(
        check(
            "store (postgresql)",
            True,
            f"PostgreSQL {pg['server_version']} at {pg['url']}: "
            f"{human.store_counts(figures)}, store {pg['size_bytes']} bytes, database "
            f"{pg['database_bytes']} bytes; this host's cursor "
            + (
                str(figures["cursor"])
                if not figures.get("cursor_problem")
                else "unknown (not this spool's: see spool lag)"
            ),
        )
    )
    out.append(
        check(
            "cursors",
            True,
            "; ".join(
                f"{sp['spool_id']} at {sp['cursor']}, last commit {sp['age_s']} s ago"
                for sp in pg["spools"]
            )
            or "no spool applied yet",
        )
    )
    a = pg["amcheck"]
    if a is None:
        out.append(
            check(
                "amcheck", False, "pg_integrity_check has never run on this store", warn_only=True
            )
        )
    else:
        detail = (
            f"last pg_integrity_check {a['outcome']} at "
            f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(a['at']))}"
        )
        out.append(
            check(
                "amcheck",
                a["outcome"] in ("ok", "running"),
                detail + (f": {a['error']}" if a.get("error") else ""),
            )
        )
    out.append(overdue_check(overdue))
    return found._replace(value=(figures, None))

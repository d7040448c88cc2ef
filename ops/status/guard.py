"""The one door through which status, doctor, ``/metrics``, the dashboard and ``quill spool
status`` read the store, and the one rule for how far the writer has got when the store
cannot say.

``read_store(cfg, read)`` runs ``read(reader)`` on the configured store and turns every store
failure (a damaged page, a truncated file, an unusable ``-shm``, a stopped PostgreSQL) into a
reported ``StoreRead`` instead of an exception: these surfaces answer *because* something is
wrong, so they must show the halt, the fleet, the spool and the lag whatever the store does.

``progress(cfg, store)`` says where the applied part of the spool ends. The store's own cursor
when it can be read; otherwise the cursor the writer last published (``run/writer.json``,
``WriterStatus.cursor``) or recorded with its halt, with that record's age; otherwise
"unknown". Never "nothing applied" for a store that exists but cannot be read: that would
count the whole spool as pending and fire the lag alert on any database blip.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, NamedTuple

import apsw

from quill.home import Halt, RunDir, WriterStatus
from quill.ops.client.stores import open_reader
from quill.spool import Position
from quill.spool.reader import lag_seconds, stats
from quill.store.errors import CantOpenError, SharedMemoryError, StoreError, translate
from quill.store.factory import capabilities
from quill.store.sqlite.connection import shm_problem


class StoreRead(NamedTuple):
    """What ``read_store`` found. ``state``: ``"ok"`` (``value`` is what the read returned),
    ``"missing"`` (no store yet: no ``state.db``, or no Quill schema) or ``"unreadable"``
    (``error`` names the store error class and its message; ``value`` is None)."""

    state: str
    value: Any = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.state == "ok"


def read_store(cfg: Any, read: Callable[[Any], Any]) -> StoreRead:
    """Run ``read(reader)`` on ``cfg``'s store (``stores.open_reader``) inside one read
    guard. Never raises a store error: ``StoreError`` (the whole tree, a PostgreSQL server
    that went away included) and raw ``apsw.Error`` from a read on ``reader.conn`` become
    ``StoreRead("unreadable", error=...)``, classified by type (``store.errors.translate``);
    ``CantOpenError`` becomes ``StoreRead("missing")``. Any other exception is a bug in the
    read and propagates."""
    shm = shm_problem(cfg.state_db) if capabilities(cfg).local_file else None
    try:
        if shm:  # SQLite would read the store through it as if it were empty
            raise SharedMemoryError(shm)
        with open_reader(cfg) as r:
            return StoreRead("ok", read(r))
    except CantOpenError:
        return StoreRead("missing")
    except apsw.Error as exc:
        err = translate(exc)
        return StoreRead("unreadable", error=f"{type(err).__name__}: {err}")
    except StoreError as exc:
        return StoreRead("unreadable", error=f"{type(exc).__name__}: {exc}")


def published_cursor(cfg: Any, now: float) -> dict[str, Any] | None:
    """The newest cursor the writer made known outside the store: its last published status
    (``run/writer.json``, alive or not: the cursor only moves forward, so an older one is a
    lower bound of what is applied) or the cursor recorded with its halt, whichever is newer.
    ``{"cursor": Position, "source": "writer" | "halt", "age_s": float}`` or None."""
    rd = RunDir(cfg.home)
    found = []
    published = rd.last("writer")
    writer = WriterStatus.from_json(published)
    if writer.cursor and writer.updated_at is not None:
        found.append((writer.updated_at, writer.cursor, "writer"))
    halt: Halt | None = rd.halt(cfg.state_db) or writer.halt
    if halt is not None and halt.cursor:
        found.append((halt.at, halt.cursor, "halt"))
    for at, cursor, source in sorted(found, reverse=True):
        try:
            pos = Position.parse(cursor)
        except ValueError:
            continue  # a damaged record is no evidence; try the other one
        return {"cursor": pos, "source": source, "age_s": round(max(0.0, now - at), 1)}
    return None


def progress(
    cfg: Any, store: StoreRead, store_cursor: str | None, problem: str | None = None
) -> dict[str, Any]:
    """The spool's figures against the applied cursor (module doc): ``segments``, ``bytes``,
    ``end`` (``spool.reader.stats``) plus ``cursor`` (``"SEG:OFF"`` or None), ``cursor_source``
    (``"store"``, ``"writer"``, ``"halt"`` or ``"unknown"``), ``cursor_age_s`` (seconds since
    that cursor was published; 0.0 for the store's own, None when unknown), ``pending_bytes``
    (int; None when unknown) and ``lag_s`` (age in seconds of the oldest unapplied record;
    None when unknown). ``store_cursor``: the store's cursor when ``store.ok`` (None: nothing
    applied yet). ``problem``: why the store's cursor for this spool id is not this spool's
    (``figures()["cursor_problem"]``: a copied data dir): the cursor is then unknown
    (``cursor_source`` ``"not-this-spool"``, ``pending_bytes``/``lag_s`` None), never the other
    data dir's progress read as this one's."""
    now = time.time()
    if store.ok and problem is not None:
        base = stats(cfg.spool_dir, None) if cfg.spool_dir.exists() else {"end": None}
        return {
            **base,
            "cursor": None,
            "cursor_source": "not-this-spool",
            "cursor_problem": problem,
            "cursor_age_s": None,
            "pending_bytes": None,
            "lag_s": None,
        }
    if store.ok:
        found: dict[str, Any] | None = {
            "cursor": Position.parse(store_cursor) if store_cursor else None,
            "source": "store",
            "age_s": 0.0,
        }
    else:
        found = published_cursor(cfg, now)
        if found is None and store.state == "missing":
            # No store and no writer ever said it applied anything: nothing is applied.
            found = {"cursor": None, "source": "store", "age_s": 0.0}
    if not cfg.spool_dir.exists():
        base = {"segments": 0, "bytes": 0, "end": None, "pending_bytes": 0}
    else:
        base = stats(cfg.spool_dir, found["cursor"] if found else None)
    if found is None:
        return {
            **base,
            "cursor": None,
            "cursor_source": "unknown",
            "cursor_age_s": None,
            "pending_bytes": None,
            "lag_s": None,
        }
    pending = base["pending_bytes"]
    lag = lag_seconds(cfg.spool_dir, found["cursor"], now) if pending else 0.0
    return {
        **base,
        "cursor": str(found["cursor"]) if found["cursor"] else None,
        "cursor_source": found["source"],
        "cursor_age_s": found["age_s"],
        "lag_s": round(lag, 1),
    }


def describe_progress(sp: dict[str, Any]) -> str:
    """``"N bytes pending (lag S s)"`` with where the cursor came from when it is not the
    store's own, or that it is unknown."""
    if sp["cursor_source"] == "not-this-spool":
        return (
            "pending unknown: the store's cursor for this spool id is not this spool's "
            f"({sp['cursor_problem']}); a copied data dir? `quill spool reidentify`"
        )
    if sp["cursor_source"] == "unknown":
        return "pending unknown (the store cannot be read and no writer published a cursor)"
    text = f"{sp['pending_bytes']} bytes pending (lag {sp['lag_s']} s)"
    if sp["cursor_source"] != "store":
        how = "published" if sp["cursor_source"] == "writer" else "recorded with its halt"
        text += f", from the cursor the writer {how} {sp['cursor_age_s']} s ago"
    return text

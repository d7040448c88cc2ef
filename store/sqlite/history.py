"""Carrying the job history of a damaged store into the store ``quill recover`` rebuilt.

A rebuilt store is the newest verified snapshot plus a spool replay. Job runs are not spool
ops, so the rebuild alone holds only the runs up to the snapshot, and the snapshot job's own
row as it was while the copy was taken (``running``). The incident itself (the check that
found the damage, the job that met or declared it, every run since the snapshot) lives only
in the damaged file. ``carry_job_runs`` copies every readable ``job_runs`` row of that file
into the rebuilt one, finishes each row still ``running`` with an honest outcome, and adds
one row for the halt and one for the recovery, so ``quill jobs history`` tells the incident.

Rows are read in id ranges so a damaged page costs only the rows on it (a failing range is
split down to single rows, which are counted, never guessed), as ``salvage`` reads messages.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import apsw

from quill.home import Halt
from quill.store.sqlite import effects
from quill.store.sqlite.connection import open_reader, transaction
from quill.store.sqlite.job_runs import (
    HALT_JOB,
    HALTED,
    INTERRUPTED,
    RECOVER_JOB,
    RUNNING,
    read_figures,
)
from quill.store.sqlite.salvage import readable_rows

_COLS = ("id", "job", "started_at", "ended_at", "outcome", "figures", "error")
_RANGE = 256
#: Why a run the rebuild left ``running`` is closed when nothing shows what became of it.
_UNKNOWN = (
    "outcome unknown: the store was rebuilt from a snapshot taken while this run was going, "
    "and the damaged file did not hold its end"
)


def _read_range(conn: apsw.Connection, lo: int, hi: int, bad: list[int]) -> list[tuple]:
    """Readable rows with ``lo <= id < hi``; ids of unreadable single rows go to ``bad``."""
    return readable_rows(conn, "job_runs", ", ".join(_COLS), lo, hi, bad)


def read_job_runs(path: Path) -> tuple[list[tuple], dict[str, Any]]:
    """Every readable ``job_runs`` row of the store file ``path`` (a damaged one: read-only),
    in id order, and figures: ``unreadable_rows`` (ids in range whose page is damaged) and
    ``error`` (why nothing could be read: missing file, unreadable table; else None)."""
    if not Path(path).exists():
        return [], {"unreadable_rows": 0, "error": f"{path} does not exist"}
    try:
        conn = open_reader(Path(path))
    except Exception as exc:  # noqa: BLE001 — reported as the reason nothing was carried
        return [], {"unreadable_rows": 0, "error": f"{type(exc).__name__}: {exc}"}
    try:
        try:
            top = conn.execute("SELECT max(id) FROM job_runs").fetchone()[0] or 0
        except apsw.Error as exc:
            return [], {"unreadable_rows": 0, "error": f"{type(exc).__name__}: {exc}"}
        bad: list[int] = []
        rows: list[tuple] = []
        for lo in range(1, top + 1, _RANGE):
            rows += _read_range(conn, lo, min(lo + _RANGE, top + 1), bad)
        return rows, {"unreadable_rows": len(bad), "error": None}
    finally:
        conn.close()


def _judged(
    job: str, started: float, figures: str | None, snapshots_dir: Path | None, at: float
) -> tuple[str, str] | None:
    """A ``running`` snapshot run closed ``ok`` from its effect: ``(figures, verdict)`` when
    ``snapshots_dir`` holds a verified snapshot made between ``started`` and ``at`` (epoch s;
    ``effects.judge_snapshot``), ``figures`` (the row's JSON text) with ``judged`` added. None
    for other jobs, without ``snapshots_dir``, or when no such snapshot proves it."""
    if job != effects.SNAPSHOT_JOB or snapshots_dir is None:
        return None
    verdict = effects.judge_snapshot(snapshots_dir, started, at)
    if verdict is None or verdict[0] != "ok":
        return None
    # Figures that do not read are kept, marked unreadable with the reason (``read_figures``).
    return json.dumps({**read_figures(figures), "judged": verdict[1]}), verdict[1]


def _finish(row: tuple, halt: Halt | None, at: float, snapshots_dir: Path | None) -> tuple:
    """``row`` (``_COLS``) as carried: a ``running`` row gets an outcome and an end. The run
    named by the halt met (or declared) the damage: ``halted``. A snapshot run whose verified
    snapshot is in ``snapshots_dir`` completed: ``ok``, judged from it. Any other ``running``
    row was cut short by the halt or the rebuild: ``interrupted`` (a job still running
    elsewhere, the consumer's check, may still finish it: ``record_job_run`` updates
    interrupted rows)."""
    rid, job, started, ended, outcome, figures, error = row
    if outcome != RUNNING:
        return row
    cause = f"{halt.cause}: {halt.detail}" if halt else "no halt recorded"
    if halt is not None and halt.job == job and halt.job_started == started:
        return (rid, job, started, halt.at, HALTED, figures, f"the writer halted: {cause}")
    judged = _judged(job, started, figures, snapshots_dir, at)
    if judged is not None:
        return (rid, job, started, ended if ended is not None else at, "ok", judged[0], None)
    why = (
        f"still running when quill recover rebuilt the store (halt {cause}); "
        "the run never recorded its end in the store"
    )
    return (rid, job, started, ended if ended is not None else at, INTERRUPTED, figures, why)


def carry_job_runs(
    conn: apsw.Connection,
    old: Path,
    *,
    halt: Halt | None,
    started_at: float,
    now: float,
    figures: dict[str, Any],
    snapshots_dir: Path | None = None,
) -> dict[str, Any]:
    """Carry the job history of the damaged store ``old`` into the rebuilt store open on the
    writable connection ``conn`` (one transaction; run it with ``Store.run_job``), then
    record the halt (``HALT_JOB``, when ``halt``) and this recovery (``RECOVER_JOB``:
    ``started_at``..``now``, epoch s, with ``figures`` plus what was carried). A snapshot run
    left ``running`` (in ``old``, or in the rebuilt store: the copy holds its own run's start)
    whose verified snapshot is in ``snapshots_dir`` is closed ``ok``, judged from it. A row the
    rebuilt store holds for the same run (job and start time: it came with the snapshot) is
    replaced by the old file's, the newer one. Returns ``{"carried", "unreadable_rows",
    "finished", "error"}``. Raises the store error tree for the rebuilt store; damage in
    ``old`` is counted, never raised."""
    rows, read = read_job_runs(old)
    carried = [_finish(r, halt, now, snapshots_dir) for r in rows]
    with transaction(conn):
        for _, job, started, *_ in carried:
            conn.execute("DELETE FROM job_runs WHERE job = ? AND started_at = ?", (job, started))
        conn.executemany(
            "INSERT INTO job_runs (job, started_at, ended_at, outcome, figures, error) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            [r[1:] for r in carried],
        )
        # Runs the snapshot caught mid-way (its own snapshot row) that the old file did not
        # give back: judged from a verified snapshot they made, else their end is unknown, and
        # nothing will ever finish them here.
        left = conn.execute(
            "SELECT id, job, started_at, figures FROM job_runs WHERE outcome = ?", (RUNNING,)
        ).fetchall()
        for rid, job, started, fig in left:
            judged = _judged(job, started, fig, snapshots_dir, now)
            conn.execute(
                "UPDATE job_runs SET outcome = ?, ended_at = ?, figures = ?, error = ? "
                "WHERE id = ?",
                (INTERRUPTED, now, fig, _UNKNOWN, rid)
                if judged is None
                else ("ok", now, judged[0], None, rid),
            )
        left_running = len(left)
        result = {
            "carried": len(carried),
            "finished": sum(1 for a, b in zip(rows, carried, strict=True) if a != b) + left_running,
            "unreadable_rows": read["unreadable_rows"],
            "error": read["error"],
        }
        if halt is not None:
            conn.execute(
                "INSERT INTO job_runs (job, started_at, ended_at, outcome, figures, error) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (
                    HALT_JOB,
                    halt.at,
                    now,
                    HALTED,
                    json.dumps({"runner": "writer", **halt.to_json()}),
                    f"{halt.cause}: {halt.detail}",
                ),
            )
        conn.execute(
            "INSERT INTO job_runs (job, started_at, ended_at, outcome, figures, error) "
            "VALUES (?, ?, ?, 'ok', ?, NULL)",
            (
                RECOVER_JOB,
                started_at,
                now,
                json.dumps({"runner": "cli", **figures, "job_history": result}, default=str),
            ),
        )
    return result

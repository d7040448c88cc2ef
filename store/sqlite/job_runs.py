"""The ``job_runs`` table: one row per run of a scheduled job, written in the store so that
``quill jobs``, ``status`` and ``doctor`` read one history on either backend.

The same statements run on SQLite and on PostgreSQL (through ``PgConnection``'s translation).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from quill.home import runner_dead
from quill.store.sqlite import effects
from quill.store.sqlite.connection import transaction

#: ``job_runs.outcome`` of a run that has started and not finished (yet).
RUNNING = "running"
#: ``job_runs.outcome`` of a run whose process died before it finished (kill -9, power cut).
INTERRUPTED = "interrupted"
#: ``job_runs.outcome`` of a run that met structural damage (or declared it, ``declare_corrupt``)
#: and ended in the writer's sticky halt: finished by whoever ends the halt, from the ``Halt``.
HALTED = "halted"
#: ``job_runs.job`` of the rows recovery writes about an incident: the writer's sticky halt
#: (started at the halt, ended by the recovery, outcome ``halted``) and the recovery itself.
HALT_JOB = "writer_halt"
#: ``job_runs.error`` of a run closed because the process running it is gone.
DIED = "the process running it died before it finished"
#: ... of a run from before runs named their process, closed because no process alive now
#: can have started it (``close_interrupted``'s ``untagged``).
UNKNOWN_HOLDER = (
    "interrupted (unknown holder, from before runs named their process): no writer alive "
    "now was running when it started"
)
RECOVER_JOB = "recover"
#: The key of the figures read from a ``job_runs.figures`` text that is not a JSON object
#: (``read_figures``): ``{"reason": why, "text": the stored text}``.
UNREADABLE = "unreadable"


def read_figures(raw: str | None) -> dict[str, Any]:
    """The figures dict of a ``job_runs.figures`` text (``{}`` for NULL). A text that is not
    a JSON object is never read as no figures: it comes back as ``{UNREADABLE: {"reason",
    "text"}}`` (why it could not be read, and the text as stored), so whoever shows or
    rewrites the row shows it as unreadable and keeps it. Never raises."""
    if raw is None:
        return {}
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError; nesting too deep
        return {UNREADABLE: {"reason": f"not JSON: {exc}", "text": raw}}
    if not isinstance(value, dict):
        return {UNREADABLE: {"reason": f"not a JSON object: a {type(value).__name__}", "text": raw}}
    return value


def record_job_run(
    conn: Any,
    job: str,
    started_at: float,
    ended_at: float | None = None,
    outcome: str = RUNNING,
    figures: dict | None = None,
    error: str | None = None,
) -> dict[str, Any]:
    """Record a job run in ``job_runs``: with ``outcome="running"`` (and no ``ended_at``) the
    start row, written *before* the work; later the same call with the final outcome updates
    that row (matched by ``job`` + ``started_at``), or inserts one if there was no start row.
    Used directly by the writer for store jobs and, through the ``record_job_run`` store
    task, by processes that cannot write the store (the job worker, ``quill snapshot``)."""
    with transaction(conn):
        conn.execute(
            "UPDATE job_runs SET ended_at = ?, outcome = ?, figures = ?, error = ? "
            "WHERE job = ? AND started_at = ? AND outcome IN (?, ?)",
            (
                ended_at,
                outcome,
                json.dumps(figures or {}),
                error,
                job,
                started_at,
                RUNNING,
                INTERRUPTED,
            ),
        )
        if conn.changes() == 0:
            conn.execute(
                "INSERT INTO job_runs (job, started_at, ended_at, outcome, figures, error) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (job, started_at, ended_at, outcome, json.dumps(figures or {}), error),
            )
    return {}


def close_interrupted(
    conn: Any,
    runner: str,
    before: float,
    snapshots_dir: str | None = None,
    *,
    exclusive: bool = False,
    judge: Callable[[dict[str, Any]], bool | None] | None = None,
    untagged: bool | Callable[[float], bool] = True,
) -> dict[str, Any]:
    """Mark ``running`` rows of ``runner`` (the ``figures.runner`` of their start row: writer,
    consumer or cli) that started before ``before`` (epoch s) as ``interrupted``: the process
    that ran them has been replaced, so they will never finish. ``exclusive``: the caller
    holds ``runner``'s exclusive lease (the SQLite writer), so every such row is another
    process's, gone. Otherwise a row whose start names its process (``figures.holder``,
    ``home.runner_tag``) is closed only when that process is proved gone: by ``judge(holder)``
    (True/False; None: it cannot tell), else on this host by ``home.runner_dead``; a row it
    cannot prove gone (another host's) is left running — so a restart never closes a run
    another live process is still doing. Rows written before runners named their process
    are closed by ``runner`` alone, unless ``untagged`` is False; when it is a callable,
    ``untagged(started_at)`` says whether no live process can be running such a row (its
    error then says so: ``UNKNOWN_HOLDER``). A run whose effect shows is
    judged from it instead (``store.sqlite.effects``): a ``vacuum``/``scrub`` run (with
    ``figures.before`` from its start) from the file, a ``snapshot`` run from
    ``snapshots_dir`` when given; ``ok`` with ``figures.judged`` saying "completed (judged
    from effect: …)" when the effect is there, else ``interrupted`` with what was found.
    Figures: ``interrupted`` (rows closed, judged ones included), ``judged`` (rows judged
    complete), ``left_running`` (rows whose process may still run)."""
    # A LIKE on the JSON text record_job_run wrote (json.dumps: '"runner": "NAME"'), not
    # json_extract: the same statement runs on the PostgreSQL store.
    pattern = "%" + json.dumps({"runner": runner})[1:-1] + "%"
    judged = 0
    with transaction(conn):
        rows = conn.execute(
            "SELECT id, job, started_at, figures FROM job_runs "
            "WHERE outcome = ? AND started_at < ? AND figures LIKE ?",
            (RUNNING, before, pattern),
        ).fetchall()
        now: dict[str, Any] | None = None
        closed, unknown = [], set()
        ended = min(before, time.time())  # ``before`` may be +inf: "whenever it started"
        for rid, job, started, raw in rows:
            figures = read_figures(raw)
            holder = figures.get("holder")
            if not exclusive and isinstance(holder, dict):
                dead = judge(holder) if judge is not None else None
                if dead is None:
                    dead = runner_dead(holder)
                if not dead:
                    continue  # its process may still run: it finishes the row itself
            elif not exclusive and callable(untagged):
                if not untagged(started):
                    continue  # a live process may have started it
                unknown.add(rid)
            elif not exclusive and not untagged:
                continue
            closed.append(rid)
            if job in effects.JUDGED_JOBS and "before" in figures:
                now = now if now is not None else effects.measure(conn)
                verdict = effects.judge(figures["before"], now)
                figures["after"] = now
            elif job == effects.SNAPSHOT_JOB and snapshots_dir:
                verdict = effects.judge_snapshot(snapshots_dir, started, before)
            else:
                continue
            if verdict is None:
                continue
            outcome, text = verdict
            if outcome == "ok":
                judged += 1
                figures["judged"], error = text, None
            else:
                error = text
            conn.execute(
                "UPDATE job_runs SET outcome = ?, ended_at = ?, figures = ?, error = ? "
                "WHERE id = ?",
                (outcome, ended, json.dumps(figures), error, rid),
            )
        for rid in closed:
            conn.execute(
                "UPDATE job_runs SET outcome = ?, ended_at = coalesce(ended_at, ?), "
                "error = coalesce(error, ?) WHERE id = ? AND outcome = ?",
                (INTERRUPTED, ended, UNKNOWN_HOLDER if rid in unknown else DIED, rid, RUNNING),
            )
        left = len(rows) - len(closed)
        return {"interrupted": len(closed), "judged": judged, "left_running": left}

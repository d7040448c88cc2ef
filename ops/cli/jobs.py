"""``quill jobs list|run|history`` and ``quill schedule list|add|pause|resume|remove``.

Schedules live in ``schedule.db`` (APScheduler's SQLAlchemy job store). The CLI edits that
store through a paused scheduler instance — it never runs jobs itself — and the fleet's
scheduler re-reads the store every second.
"""

from __future__ import annotations

import time
from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from quill.home.layout import private_dirs
from quill.jobs import catalog, triggers
from quill.jobs.outage import persist
from quill.jobs.queues import build_for
from quill.ops import human
from quill.ops.cli import paging, render
from quill.ops.cli.base import emit_json, json_option
from quill.ops.client.errors import Exit, WaitTimeoutError
from quill.ops.client.stores import lost_store, open_reader
from quill.store import paging as cursors
from quill.store.errors import CantOpenError
from quill.store.factory import capabilities


def _history(cfg: Any, job: str | None, limit: int) -> list[dict[str, Any]]:
    """The newest ``limit`` runs (of ``job``), newest first ([] before the store exists)."""
    return _history_page(cfg, job, limit, None)["runs"]


def _history_page(cfg: Any, job: str | None, limit: int, after: str | None) -> dict[str, Any]:
    """``Reader.job_runs_page``: ``{"runs", "next"}`` (no runs before the store exists; a bad
    cursor is refused either way: ``BadCursorError``)."""
    if after is not None:  # checked before the store is opened (or found missing)
        cursors.decode(after, "job_runs", (int,), cursors.scope_of(job))
    try:
        with open_reader(cfg) as r:
            return r.job_runs_page(job=job, limit=limit, after=after)
    except CantOpenError:
        lost = lost_store(cfg)  # gone, not "no runs yet"
        if lost is not None:
            raise lost from None
        return {"runs": [], "next": None}


def _last_runs(cfg: Any, names: list[str]) -> dict[str, dict[str, Any]]:
    """``Reader.last_job_runs``: ``{job: last run}`` ({} before the store exists)."""
    try:
        with open_reader(cfg) as r:
            return r.last_job_runs(names)
    except CantOpenError:
        lost = lost_store(cfg)  # gone, not "no runs yet"
        if lost is not None:
            raise lost from None
        return {}


def default_of(spec: Any) -> dict[str, Any] | None:
    """A catalog job's default schedule as JSON values (None: on demand only)."""
    return {"trigger": spec.trigger, **spec.trigger_args} if spec.trigger else None


def describe_default(default: dict[str, Any] | None) -> str:
    """``{"trigger": "interval", "minutes": 5}`` → ``every 5 minutes``; a cron default as its
    crontab fields (``cron 30 3 * * *``); ``on demand`` for None (``jobs.triggers``)."""
    if default is None:
        return "on demand"
    args = {k: v for k, v in default.items() if k != "trigger"}
    return triggers.describe_args(default["trigger"], args)


@click.group()
def jobs() -> None:
    """Maintenance jobs: what exists, run one now, past runs."""


@jobs.command(name="list")
@click.option("--limit", type=click.IntRange(1, 100_000), default=100, show_default=True)
@paging.after_option
@json_option
@click.pass_obj
def jobs_list(cfg: Any, limit: int, after: str | None, as_json: bool) -> None:
    """Every job this data dir's store kind can run, by name, with where it runs, its default
    schedule and its last run (PostgreSQL jobs are listed only with a PostgreSQL store, and
    back); a page of --limit at a time (--after CURSOR: the next page). --json prints
    {"jobs": [...], "next": CURSOR or null}."""
    start = paging.decode(after, "jobs", (str,)) if after is not None else None
    specs = [
        j
        for j in sorted(catalog.JOBS, key=lambda j: j.name)
        if not j.internal and j.backend in ("any", capabilities(cfg).kind)
    ]
    last = _last_runs(cfg, [j.name for j in specs])
    rows = [
        {
            "name": j.name,
            "runs_on": "writer" if j.kind == "store" else "job worker",
            "description": j.description,
            "default": default_of(j),
            "last_outcome": last.get(j.name, {}).get("outcome"),
            "last_started_at": last.get(j.name, {}).get("started_at"),
        }
        for j in specs
    ]
    rows, cursor = paging.page(rows, lambda r: (r["name"],), limit, start, "jobs")
    if as_json:
        emit_json({"jobs": rows, "next": cursor})
        return
    if not rows:
        paging.no_rows("no jobs after that cursor")
        return
    table = Table(title="jobs", title_justify="left")
    for col in ("name", "runs on", "default", "last", "description"):
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(
            r["name"],
            r["runs_on"],
            escape(describe_default(r["default"])),
            f"{r['last_outcome'] or '-'} {render.when(r['last_started_at'])}",
            escape(r["description"]),
        )
    render.console().print(table)
    paging.note_next("jobs", limit, cursor)


#: ``jobs run --wait`` gives a fleet that is just starting this long (s) to take its lease
#: before saying that none is running (instead of waiting the whole --wait in silence).
FLEET_GRACE_S = 2.0


def _fleet_soon(rd: Any, grace_s: float) -> bool:
    deadline = time.monotonic() + grace_s
    while not rd.fleet_running():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


def runnable_job(cfg: Any, name: str, hint: str) -> catalog.JobSpec:
    """``catalog.runnable`` for this data dir, its refusals as usage errors (nothing queued)."""
    try:
        return catalog.runnable(name, cfg)
    except (KeyError, catalog.WrongStoreError) as exc:
        raise click.BadParameter(
            f"{exc.args[0]}; nothing was queued or scheduled", param_hint=hint
        ) from None


@jobs.command(name="run")
@click.argument("name")
@click.option(
    "--wait",
    "wait_s",
    type=click.FloatRange(min=0),
    default=None,
    help="Wait up to N seconds for the run's record.",
)
@click.option(
    "--mode",
    type=click.Choice(["passive", "full", "restart", "truncate"], case_sensitive=False),
    default=None,
    help="wal_checkpoint only: checkpoint mode (default passive; truncate resets the WAL).",
)
@json_option
@click.pass_context
def jobs_run(
    ctx: click.Context, name: str, wait_s: float | None, mode: str | None, as_json: bool
) -> None:
    """Queue job NAME to run now (the running fleet executes it)."""
    from quill.home import RunDir

    cfg = ctx.obj
    runnable_job(cfg, name, "NAME")
    if mode is not None and name != "wal_checkpoint":
        raise click.BadParameter("only wal_checkpoint takes a mode", param_hint="--mode")
    private_dirs(cfg.home)
    queued_at = time.time()
    # Parameters are resolved from config when it runs; only an explicit option travels. A
    # queue.db another process keeps locked is waited for, within a bound (``persist``).
    queues = build_for(cfg)
    persist(lambda: queues.enqueue(name, **({"mode": mode.upper()} if mode else {})))
    result: dict[str, Any] = {"job": name, "queued_at": queued_at}
    if wait_s is not None and not _fleet_soon(RunDir(cfg.home), min(wait_s, FLEET_GRACE_S)):
        raise WaitTimeoutError(
            f"{name} is queued, but no fleet is running on {cfg.home}, so nothing will run it now",
            hint=f"start `quill run` (it runs {name} first); `quill jobs history --job {name}` "
            "shows the outcome",
        )
    if wait_s is not None:
        from quill.ops.client.wait import wait_job_run

        run = wait_job_run(cfg.waiters_dir, lambda: _history(cfg, name, 5), queued_at, wait_s)
        if run is None:
            raise WaitTimeoutError(
                f"{name} queued but no run recorded within {wait_s:g} s",
                hint=f"is `quill run` running? `quill jobs history --job {name}` shows "
                "the outcome later",
            )
        result["run"] = run
    if as_json:
        emit_json(result)
    elif "run" in result:
        run = result["run"]
        detail = f"{human.figures(run['figures'])} {run['error'] or ''}"
        click.echo(f"{name}: {run['outcome']} {detail}".rstrip())
    else:
        click.echo(f"{name}: queued; `quill jobs history --job {name}` shows the outcome")
    if result.get("run", {}).get("outcome") == "error":
        ctx.exit(Exit.FAILED)


@jobs.command(name="history")
@click.option("--job", help="Only this job.")
@click.option("--limit", type=click.IntRange(1, 10_000), default=20, show_default=True)
@paging.after_option
@json_option
@click.pass_obj
def jobs_history(cfg: Any, job: str | None, limit: int, after: str | None, as_json: bool) -> None:
    """Past runs, newest first: start, end, outcome and figures; a page of --limit at a time
    (--after CURSOR: the next page of the same --job). --json prints {"runs": [...], "next":
    CURSOR or null}; without --json a note on stderr gives the next page's cursor."""
    found = _history_page(cfg, job, limit, after)
    runs, cursor = found["runs"], found["next"]
    if as_json:
        emit_json(found)
    elif not runs:
        paging.no_rows(
            "no job runs" + (f" of {job}" if job else "") + (" after that cursor" if after else "")
        )
    else:
        _print_runs(runs)
    if not as_json:
        paging.note_next("job runs", limit, cursor)


def _print_runs(runs: list[dict[str, Any]]) -> None:
    table = Table(title=f"{len(runs)} run(s)", title_justify="left")
    for col in ("job", "started", "seconds", "outcome", "figures / error"):
        table.add_column(col, overflow="fold")
    for r in runs:
        took = f"{(r['ended_at'] or r['started_at']) - r['started_at']:.2f}"
        table.add_row(
            r["job"],
            render.when(r["started_at"]),
            took,
            r["outcome"] or "",
            escape(r["error"] or human.figures(r["figures"])),
        )
    render.console().print(table)

"""``quill schedule list|add|pause|resume|remove``: when jobs run (APScheduler's job store).

Its own module so that ``quill jobs …`` does not import APScheduler and SQLAlchemy.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import click
from apscheduler.jobstores.base import JobLookupError
from apscheduler.triggers.interval import IntervalTrigger
from rich.markup import escape
from rich.table import Table

from quill.jobs import catalog, triggers
from quill.jobs import schedule as schedule_db
from quill.ops.cli import paging, render
from quill.ops.cli.base import emit_json, json_option
from quill.ops.cli.jobs import default_of, describe_default, runnable_job
from quill.ops.client.errors import NotFoundError
from quill.workers import FIRE_REF
from quill.workers.schedules import describe, edit_schedules

_EVERY = re.compile(r"^(\d+)\s*([smhd])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


@click.group()
def schedule() -> None:
    """When jobs run: list, add, pause, resume, remove schedules (persisted)."""


@schedule.command(name="list")
@click.option("--limit", type=click.IntRange(1, 100_000), default=100, show_default=True)
@paging.after_option
@json_option
@click.pass_obj
def schedule_list(cfg: Any, limit: int, after: str | None, as_json: bool) -> None:
    """Every schedule by id, with its trigger and next run time (none = paused); a page of
    --limit at a time (--after CURSOR: the next page). --json prints {"schedules": [...],
    "next": CURSOR or null}."""
    start = paging.decode(after, "schedules", (str,)) if after is not None else None
    with edit_schedules(cfg) as sched:
        _say_named(sched)
        rows = sorted(describe(sched), key=lambda r: r["id"])
    rows, cursor = paging.page(rows, lambda r: (r["id"],), limit, start, "schedules")
    if as_json:
        emit_json({"schedules": rows, "next": cursor})
        return
    if not rows:
        paging.no_rows("no schedules" + (" after that cursor" if after else ""))
        return
    table = Table(title="schedules", title_justify="left")
    for col in ("id", "trigger", "next run (UTC)"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            escape(r["id"]),
            escape(r["trigger"]),
            _when(r["next_run"], zone="") if r["next_run"] else "[yellow]paused[/yellow]",
        )
    render.console().print(table)
    paging.note_next("schedules", limit, cursor)


def _say_named(sched: Any) -> None:
    """Tell the operator (stderr) which stored schedules just had their numeric days of the
    week named as they have always fired (``workers.schedules.name_weekdays``)."""
    for r in getattr(sched, "weekdays_named", []):
        click.echo(
            f"schedule {r['id']}: stored {r['stored']} (an older Quill stored day numbers in "
            f"APScheduler's meaning, 0 = Monday); now stored as {r['now']}, the same days",
            err=True,
        )


def _trigger(every: str | None, cron: str | None) -> Any:
    if bool(every) == bool(cron):
        raise click.UsageError(
            "give exactly one of --every (e.g. 10m, 6h, 1d) or --cron ('30 3 * * *')"
        )
    if every:
        m = _EVERY.match(every.strip())
        if not m:
            raise click.BadParameter(
                "use a number and a unit: 30s, 10m, 6h, 1d", param_hint="--every"
            )
        if int(m.group(1)) <= 0:
            raise click.BadParameter(
                "the interval must be at least 1 of its unit", param_hint="--every"
            )
        return IntervalTrigger(**{_UNITS[m.group(2)]: int(m.group(1))}, timezone="UTC")
    try:
        return triggers.crontab(cron)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--cron") from None


@schedule.command(name="add")
@click.argument("job")
@click.option("--every", help="Interval: 30s, 10m, 6h, 1d.")
@click.option(
    "--cron",
    help="Crontab expression, UTC, days of the week as crontab numbers them (0 or 7: "
    "Sunday) or named: '30 3 * * *', '0 4 * * sun'.",
)
@click.option(
    "--id", "schedule_id", help="Schedule id (default: the job name; replaces that schedule)."
)
@json_option
@click.pass_obj
def schedule_add(
    cfg: Any, job: str, every: str | None, cron: str | None, schedule_id: str | None, as_json: bool
) -> None:
    """Schedule JOB (replacing the schedule with the same id).

    Without --id the schedule's id is the job name, so for a job with a default schedule
    (`quill jobs list`) this replaces the default; give --id to add a second schedule.
    """
    spec = runnable_job(cfg, job, "JOB")
    trigger = _trigger(every, cron)
    sid = schedule_id or job
    default = catalog.BY_NAME.get(sid)
    with edit_schedules(cfg) as sched:
        _say_named(sched)
        replaced = sched.get_job(sid)
        added = sched.add_job(
            trigger=trigger,
            id=sid,
            name=job,
            replace_existing=True,
            **schedule_db.fire_args(spec.name, FIRE_REF),
        )
        result = {
            "id": added.id,
            "job": job,
            "trigger": triggers.describe(added.trigger),
            **triggers.as_json(added.trigger),
            "next_run": added.next_run_time.isoformat() if added.next_run_time else None,
            "replaced": triggers.describe(replaced.trigger) if replaced else None,
            "replaces_default": bool(default and default.trigger),
        }
    if as_json:
        emit_json(result)
        return
    if result["replaces_default"]:
        click.echo(
            f"{sid}: this replaces the default schedule of {sid} "
            f"({describe_default(default_of(default))}); "
            f"it stays replaced across restarts. To keep the default and add another, use --id",
            err=True,
        )
    elif replaced:
        click.echo(f"{sid}: replaces the schedule {result['replaced']}", err=True)
    nxt = _when(result["next_run"]) if result["next_run"] else "none (paused)"
    click.echo(f"{added.id}: {result['trigger']}; next run {nxt}")


def _when(iso: str, zone: str = " UTC") -> str:
    """An ISO time (``next_run``) as the listings show times: ``YYYY-MM-DD HH:MM`` UTC, then
    ``zone`` (empty where a column header says UTC)."""
    return dt.datetime.fromisoformat(iso).astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M") + zone


def _modify(ctx: click.Context, schedule_id: str, action: str, as_json: bool) -> None:
    cfg = ctx.obj
    asked = action
    if (
        action == "remove"
        and schedule_id in catalog.BY_NAME
        and catalog.BY_NAME[schedule_id].trigger
    ):
        # A default schedule is re-created at every start; removing it would not last.
        action = "pause"
        click.echo(
            f"{schedule_id} is a default schedule: pausing it instead "
            "(it stays paused across restarts)",
            err=True,
        )
    with edit_schedules(cfg) as sched:
        _say_named(sched)
        try:
            getattr(sched, f"{action}_job")(schedule_id)
        except JobLookupError:
            raise NotFoundError(
                f"no schedule {schedule_id!r}", hint="`quill schedule list` shows the schedules"
            ) from None
    if as_json:
        emit_json({"id": schedule_id, "asked": asked, "done": f"{action}d"})
    else:
        click.echo(f"{schedule_id}: {action}d")


def _modify_command(action: str, doc: str) -> None:
    """Register ``quill schedule ACTION SCHEDULE_ID [--json]`` (``_modify``), with ``doc`` as
    its help."""

    @schedule.command(name=action, help=doc)
    @click.argument("schedule_id")
    @json_option
    @click.pass_context
    def command(ctx: click.Context, schedule_id: str, as_json: bool) -> None:
        _modify(ctx, schedule_id, action, as_json)


for _action, _doc in (
    ("pause", "Pause a schedule (it keeps its trigger)."),
    ("resume", "Resume a paused schedule."),
    (
        "remove",
        "Remove a schedule you added (a default schedule is paused instead: it would come back).",
    ),
):
    _modify_command(_action, _doc)

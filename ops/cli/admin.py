"""``quill snapshot``, ``quill recover``, ``quill doctor``."""

from __future__ import annotations

from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from quill.jobs.queues import run_recorded
from quill.jobs.run_records import said
from quill.ops import human
from quill.ops.cli import render
from quill.ops.cli.base import emit_json, json_option
from quill.ops.client.errors import InvalidInputError
from quill.ops.recover.sqlite import RecoverError
from quill.ops.recover.sqlite import recover as do_recover
from quill.ops.status.doctor import run_checks
from quill.store.errors import CantOpenError, CorruptError
from quill.store.factory import capabilities


@click.command()
@json_option
@click.pass_obj
def snapshot(cfg: Any, as_json: bool) -> None:
    """Take a verified snapshot now (backup API + integrity_check), stamped with its spool
    position."""
    from quill.jobs import catalog
    from quill.jobs.queues import build_for, resolve_params

    if not capabilities(cfg).local_file:  # refused before anything runs
        raise InvalidInputError(
            "snapshots are of the embedded SQLite store; this data dir uses the PostgreSQL store",
            hint="back it up with PostgreSQL's tools: `pg_dump --format=custom` or a base backup "
            "(docs/backends.md)",
        )
    spec = catalog.get("snapshot")
    queues = build_for(cfg)  # opens nothing yet: a locked queue.db never stops the snapshot
    try:
        # Recorded in `quill jobs history` like a scheduled snapshot (through the store queue:
        # the writer applies the record, now if a fleet runs, else at the next `quill run`);
        # a queue.db another process keeps locked is waited for, within a bound.
        result = run_recorded(
            spec, queues, resolve_params(spec, cfg, {}), runner="cli", one_shot=True
        )
    except CantOpenError as exc:
        raise click.ClickException(f"no store to snapshot: {exc}") from exc
    if result.get("unrecorded"):  # taken, but the job queue could not carry its record
        click.echo(
            f"quill: warning: the snapshot was taken, but it is not in `quill jobs history`: "
            f"{result['unrecorded']}",
            err=True,
        )
    if as_json:
        emit_json(result)
    else:
        click.echo(
            f"snapshot {result['path']} ({result['bytes']} bytes) covers spool position "
            f"{result['position']}; verified in {result['seconds']} s"
        )


@click.command()
@click.option(
    "--accept-loss",
    is_flag=True,
    help="Rebuild even though snapshot + spool no longer hold the full history (PostgreSQL: "
    "start a store holding no cursor for this spool at the spool's oldest segment).",
)
@json_option
@click.pass_obj
def recover(cfg: Any, accept_loss: bool, as_json: bool) -> None:
    """Rebuild the store from the newest verified snapshot + spool replay and swap it in.

    The damaged file (and its WAL) is kept under evidence/. Safe to repeat.
    """
    if not capabilities(cfg).local_file:  # a shared store: replay this host's spool from its cursor
        return _recover_postgres(cfg, accept_loss, as_json)
    try:
        # The snapshot (hence the replay start) is chosen inside recover: the bar counts bytes
        # replayed without a total.
        with render.progress(not as_json, unit="bytes") as bar:
            task = bar.add_task("replaying into the rebuilt store", total=None)
            result = do_recover(
                cfg, accept_loss=accept_loss, progress=lambda n: bar.advance(task, n)
            )
    except (RecoverError, CorruptError) as exc:
        raise click.ClickException(str(exc)) from exc
    if result.get("history_gap"):
        click.echo(
            f"quill: WARNING: rebuilt with history missing: {result['history_gap']}", err=True
        )
    found = result.get("leftovers") or {}
    if found.get("removed") or found.get("running") or found.get("unknown"):
        click.echo(f"quill: {result['leftovers_said']}", err=True)
    for damaged in result.get("damaged_snapshots") or ():
        click.echo(
            f"quill: WARNING: damaged snapshot skipped and moved to {cfg.home / 'evidence'}: "
            f"{damaged}",
            err=True,
        )
    if as_json:
        emit_json(result)
    else:
        click.echo(
            f"recovered from {result['snapshot'] or 'an empty store'} + spool "
            f"{result['from']} → {result['to']}: "
            f"{human.count(result['applied'], 'batch', 'batches')} replayed, "
            f"{human.count(result['rows'], 'message row')}; swapped in by "
            f"{result['swapped_by']}"
            + (f"; old files in {result['evidence']}" if result.get("evidence") else "")
        )


def _recover_postgres(cfg: Any, accept_loss: bool, as_json: bool) -> None:
    from quill.ops import logs
    from quill.ops.recover.postgres import recover as pg_recover
    from quill.store.errors import StoreError

    try:
        result = pg_recover(cfg, logs.configure(cfg.logs_dir, "recover"), accept_loss=accept_loss)
    except (StoreError, TimeoutError) as exc:
        raise click.ClickException(f"cannot replay into the PostgreSQL store: {exc}") from exc
    if result.get("accepted_start"):
        click.echo(
            f"quill: WARNING: this store starts at spool segment {result['accepted_start']}; "
            "what earlier segments held is in it only if you imported it (quill import)",
            err=True,
        )
    if as_json:
        emit_json(result)
    else:
        click.echo(
            f"replayed spool {result['spool_id']} into the PostgreSQL store "
            f"{result['from']} → {result['to']}"
            f" by the {result['replayed_by']}: "
            f"{human.count(result['applied'], 'batch', 'batches')}, "
            f"{human.count(result['rows'], 'message row')}"
        )


def _damage_check(cfg: Any) -> dict[str, Any]:
    from quill.jobs import catalog
    from quill.jobs.queues import build_for, resolve_params

    if not cfg.state_db.exists():
        return {"check": "damage check", "status": "ok", "detail": "no store yet"}
    spec = catalog.get("quick_check")
    params = resolve_params(spec, cfg, {})
    try:
        figures = run_recorded(spec, build_for(cfg), params, runner="cli", one_shot=True)
    except CorruptError as exc:
        return {
            "check": "damage check",
            "status": "fail",
            "detail": f"{said(exc)}; next: `quill recover`",
        }
    unrecorded = figures.get("unrecorded")
    return {
        "check": "damage check",
        "status": "ok",
        "detail": f"quick_check ok in {figures['seconds']} s"
        + (f"; not in `quill jobs history`: {unrecorded}" if unrecorded else ""),
    }


@click.command()
@click.option(
    "--check",
    "damage_check",
    is_flag=True,
    help="Also run the damage check (PRAGMA quick_check) now, as the hourly job does.",
)
@json_option
@click.pass_context
def doctor(ctx: click.Context, damage_check: bool, as_json: bool) -> None:
    """Check SQLite version, journal mode, file modes, leases, halt, WAL, free space, spool lag,
    overdue jobs; with --check, read the whole store for damage (recorded in job history;
    damage halts the writer exactly as when the scheduled check finds it)."""
    checks = run_checks(ctx.obj)
    if damage_check:
        checks.append(_damage_check(ctx.obj))
    if as_json:
        emit_json(checks)
    else:
        table = Table(title=f"quill doctor: {ctx.obj.home}", title_justify="left")
        for col in ("check", "status", "detail"):
            table.add_column(col, overflow="fold")
        style = {"ok": "green", "warn": "yellow", "fail": "bold red"}
        for c in checks:
            table.add_row(
                c["check"], f"[{style[c['status']]}]{c['status']}[/]", escape(c["detail"])
            )
        render.console().print(table)
    ctx.exit(1 if any(c["status"] == "fail" for c in checks) else 0)

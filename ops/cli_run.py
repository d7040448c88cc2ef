"""``quill run``: the fleet in the foreground."""
from __future__ import annotations

import click


from .errors import Exit


@click.command()
@click.option("--until-idle", is_flag=True, help="Drain everything, run due jobs, then exit 0.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=None,
              help="With --until-idle: give up after N seconds (exit 4).")
@click.pass_context
def run(ctx: click.Context, until_idle: bool, timeout: float | None) -> None:
    """Run the fleet (supervisor, writer, scheduler, job worker) in the foreground."""
    from quill.store.errors import LeaseHeldError
    from quill.workers.supervisor import Supervisor
    from . import logs

    from quill.workers.rundir import RunDir

    cfg = ctx.obj
    holder = RunDir(cfg.home).lease_holder("fleet")
    if holder:
        raise click.ClickException(f"a fleet is already running on {cfg.home} (supervisor pid {holder['pid']})")
    cfg.ensure_dirs()
    log = logs.configure(cfg.logs_dir, "supervisor", stderr=False)
    click.echo(f"quill: fleet on {cfg.home} ({'until idle' if until_idle else 'Ctrl-C to stop'}); logs in {cfg.logs_dir}",
               err=True)
    try:
        code = Supervisor(cfg, log, until_idle=until_idle, timeout=timeout,
                          console=lambda text: click.echo(text, err=True)).run()
    except LeaseHeldError as exc:
        raise click.ClickException(f"a fleet is already running on {cfg.home}: {exc}")
    if code:
        why = {Exit.TIMEOUT: "not idle before --timeout",
               Exit.HALTED: "the writer halted (`quill status` says why and what to run)",
               Exit.CRASH_LOOP: "a worker is crash-looping"}.get(code, "see the logs")
        click.echo(f"quill: fleet stopped with exit code {code}: {why}; logs in {cfg.logs_dir}", err=True)
    ctx.exit(code)

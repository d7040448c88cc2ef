"""``quill run``: the fleet in the foreground."""

from __future__ import annotations

import click

from quill.ops.client.errors import Exit, StorageError, busy_with


@click.command()
@click.option(
    "--until-idle",
    is_flag=True,
    help="Drain everything, run due jobs, then exit 0 (exit 1 when the writer keeps failing "
    "to apply for [writer] give_up_s).",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="With --until-idle: give up after N seconds (exit 4).",
)
@click.pass_context
def run(ctx: click.Context, until_idle: bool, timeout: float | None) -> None:
    """Run the fleet (supervisor, writer, scheduler, job worker) in the foreground."""
    from quill.home import RunDir
    from quill.ops import logs
    from quill.store.errors import LeaseHeldError
    from quill.workers.supervisor import Supervisor

    cfg = ctx.obj
    holder = RunDir(cfg.home).lease_holder("fleet")
    if holder:
        raise StorageError(
            f"a fleet is already running on {cfg.home}: pid {holder['pid']} holds the store",
            hint="`quill status` shows it; stop it before starting another",
        )
    cfg.ensure_dirs()
    log = logs.configure(cfg.logs_dir, "supervisor", stderr=False)
    # Say where the data goes when nobody chose it: the default dir is easy to not notice.
    chosen = ctx.find_root().params.get("home") is not None
    where = "" if chosen else " (the default data dir: neither --home nor $QUILL_HOME is set)"
    click.echo(
        f"quill: fleet on {cfg.home}{where} ({'until idle' if until_idle else 'Ctrl-C to stop'}); "
        f"logs in {cfg.logs_dir}",
        err=True,
    )
    watched = [str(p) for p in cfg.watch_paths if p.is_dir()] if cfg.watch_enabled else []
    if watched:  # transcripts copied from outside the data dir: never a silent surprise
        click.echo(
            f"quill: capturing the coding-agent transcripts in {', '.join(watched)} into "
            f"{cfg.home} as they are written ([watch] enabled = false in config.toml to stop)",
            err=True,
        )
    before = _quarantined(cfg.spool_dir)
    try:
        sup = Supervisor(
            cfg,
            log,
            worker_entry="quill.ops.worker_main",
            http_entry="quill.ops.service",
            until_idle=until_idle,
            timeout=timeout,
            console=lambda text: click.echo(text, err=True),
        )
        code = sup.run()
    except LeaseHeldError as exc:
        raise busy_with(
            exc,
            f"a fleet is already running on {cfg.home}",
            "`quill status` shows it; stop it before starting another",
        ) from None
    refused = _say_quarantined(cfg.spool_dir, before)
    if sup.cannot_apply is not None:
        raise StorageError(
            f"the writer cannot apply the spool: {sup.cannot_apply}; --until-idle gave up "
            f"after {cfg.writer_give_up_s:g} s of failures (nothing is lost: the spool keeps "
            "every record)",
            hint="fix what the error names (`quill status` shows it), then run again; "
            "[writer] give_up_s in config.toml sets how long to try, --timeout N bounds the run",
        )
    if until_idle and code == 0 and refused:
        # A drain-and-exit run is a batch job: a batch quarantined is exit 1, not "all applied"
        # (a fleet stopped by a signal exits 0 after saying so above).
        code = int(Exit.FAILED)
    if code:
        why = {
            Exit.TIMEOUT: "not idle before --timeout",
            Exit.HALTED: "the writer halted (`quill status` says why and what to run)",
            Exit.CRASH_LOOP: "a worker is crash-looping",
            Exit.QUEUE_UNAVAILABLE: "the spool is drained; the job queue is unreachable",
            Exit.FAILED: "records were quarantined, not applied (above)",
        }.get(code, "see the logs")
        click.echo(
            f"quill: fleet stopped with exit code {code}: {why}; logs in {cfg.logs_dir}", err=True
        )
    ctx.exit(code)


def _quarantined(spool_dir) -> set[str]:
    """File names of the live store's quarantine entries (one file per entry)."""
    from quill.spool.quarantine import Quarantine

    folder = Quarantine(spool_dir).dir
    return {p.name for p in folder.glob("*.json")} if folder.is_dir() else set()


def _say_quarantined(spool_dir, before: set[str]) -> int:
    """On stderr: records this run quarantined, counted by reason (an import whose ops were
    refused must not look like it went through: `quill import` only spools). Returns how many
    were refused or damaged; a producer's torn write (never acknowledged) is not counted."""
    import json
    from collections import Counter

    from quill.spool.quarantine import Quarantine
    from quill.spool.torn import TORN_WRITE

    new = sorted(_quarantined(spool_dir) - before)
    if not new:
        return 0
    folder, reasons = Quarantine(spool_dir).dir, Counter()
    for name in new:
        try:
            reasons[json.loads((folder / name).read_text("utf-8")).get("reason", "?")] += 1
        except (OSError, ValueError):
            reasons["?"] += 1
    click.echo(
        f"quill: warning: {len(new)} record(s) quarantined during this run, not applied ("
        + ", ".join(f"{r}: {n}" for r, n in sorted(reasons.items()))
        + "); `quill spool quarantine list` shows them",
        err=True,
    )
    return sum(n for reason, n in reasons.items() if reason != TORN_WRITE)

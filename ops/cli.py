"""``quill``: the operator's CLI. Human output by default, ``--json`` on every read command.

Exit codes: 0 ok · 1 failure or damage found · 2 usage error · 3 not found · 4 timed out.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import click
from rich.markup import escape

from quill.spool import Spool, SpoolError
from quill.store.errors import InvalidOpError, StoreError
from quill.store.lease import holder_alive, read_holder
from quill.store.precheck import precheck

from . import config, ingest, render
from .importers import iter_transcript_files, parse_file

EXIT_FAIL, EXIT_TIMEOUT = 1, 4  # 3 (not found) is returned by the read commands


def _cfg(ctx: click.Context) -> config.Config:
    return ctx.obj


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--home", type=click.Path(file_okay=False), envvar="QUILL_HOME",
              help="Data dir (default: $QUILL_HOME, else the XDG data dir).")
@click.pass_context
def cli(ctx: click.Context, home: str | None) -> None:
    """Quill keeps AI-agent transcripts safe: a durable spool, one writer, a searchable store."""
    os.umask(0o077)  # every file Quill creates is owner-only (DESIGN.md, "Data layout")
    try:
        ctx.obj = config.load(home)
    except config.ConfigError as exc:
        raise click.ClickException(str(exc))


@cli.command()
@click.option("--until-idle", is_flag=True, help="Drain everything, run due jobs, then exit 0.")
@click.option("--timeout", type=float, default=None, help="With --until-idle: give up after N seconds (exit 4).")
@click.pass_context
def run(ctx: click.Context, until_idle: bool, timeout: float | None) -> None:
    """Run the fleet (supervisor, writer, scheduler, job worker) in the foreground."""
    from quill.store.errors import LeaseHeldError
    from quill.workers.supervisor import Supervisor
    from . import logs

    cfg = _cfg(ctx)
    holder = read_holder(cfg.run_dir / "fleet.lock")
    if holder and holder_alive(holder):
        raise click.ClickException(f"a fleet is already running on {cfg.home} (supervisor pid {holder['pid']})")
    cfg.ensure_dirs()
    log = logs.configure(cfg.logs_dir, "supervisor", stderr=False)
    click.echo(f"quill: fleet on {cfg.home} ({'until idle' if until_idle else 'Ctrl-C to stop'}); logs in {cfg.logs_dir}",
               err=True)
    try:
        code = Supervisor(cfg, log, until_idle=until_idle, timeout=timeout).run()
    except LeaseHeldError as exc:
        raise click.ClickException(f"a fleet is already running on {cfg.home}: {exc}")
    if code:
        why = {4: "not idle before --timeout", 5: "the writer halted (`quill status` says why and what to run)",
               6: "a worker is crash-looping"}.get(code, "see the logs")
        click.echo(f"quill: fleet stopped with exit code {code}: {why}; logs in {cfg.logs_dir}", err=True)
    ctx.exit(code)


def _read_json_values(stream: Any, name: str) -> list[Any]:
    try:
        return _parse_json_values(stream.read(), name)
    except UnicodeDecodeError as exc:
        raise click.ClickException(f"{name}: not UTF-8 text ({exc.reason} at byte {exc.start}); nothing was pushed")
    except RecursionError:
        raise click.ClickException(f"{name}: JSON nested too deeply; nothing was pushed")


def _parse_json_values(text: str, name: str) -> list[Any]:
    stripped = text.lstrip()
    if not stripped:
        raise click.ClickException(f"{name}: no input")
    try:
        return [json.loads(stripped)]
    except json.JSONDecodeError:
        pass
    values = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                values.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise click.ClickException(f"{name}:{lineno}: not JSON ({exc.msg}); nothing was pushed")
    return values


@cli.command()
@click.argument("source", type=click.File("r", encoding="utf-8"), default="-")
@click.option("--session", "session_id", help="Session id for bare messages.")
@click.option("--wait", "wait_s", type=float, default=None, help="Wait up to N seconds until applied.")
@click.option("--json", "as_json", is_flag=True, help="Print the acks as JSON.")
@click.pass_context
def push(ctx: click.Context, source: Any, session_id: str | None, wait_s: float | None, as_json: bool) -> None:
    """Push a batch (JSON or JSONL, from a file or stdin) into the spool.

    Each value is an op ({"op", "data"}), a messages batch ({"session_id", "messages"}) or a
    bare message ({"role", "content", ...}; needs --session). Durable when this returns.
    Give a "batch" id (a UUID) in an op or batch to retry safely: a batch id is applied once.
    With --wait, each batch's outcome (applied / quarantined with the reason) is reported and
    the exit code is 1 if any was quarantined, 4 if the writer did not get to it in time.
    """
    cfg = _cfg(ctx)
    values = _read_json_values(source, source.name)
    try:
        ops = list(ingest.push_ops(values, session_id))
        for index, (op, data, _) in enumerate(ops):
            precheck(op, data)
    except InvalidOpError as exc:
        raise click.ClickException(f"batch {index}: {exc.reason}: {exc.detail}; nothing was pushed")
    except ValueError as exc:
        raise click.ClickException(f"{exc}; nothing was pushed")
    try:
        with Spool(cfg.spool_dir, segment_bytes=cfg.segment_bytes) as spool:
            acks = ingest.append_all(spool, ops)
    except SpoolError as exc:
        raise click.ClickException(str(exc))
    result = [{"op": op, "batch": a.batch_id, "position": str(a.position)} for (op, _, _), a in zip(ops, acks)]
    code = 0
    if wait_s is not None and acks:
        from quill.spool import WaitTimeoutError
        from .wait import outcomes, wait_applied
        try:
            waited = wait_applied(cfg.state_db, max(a.position for a in acks), wait_s)
        except WaitTimeoutError as exc:
            click.echo(f"quill: {exc}", err=True)
            for r in result:
                r["outcome"] = "pending"
            code = EXIT_TIMEOUT
        else:
            for r, o in zip(result, outcomes(cfg.state_db, cfg.spool_dir, acks)):
                r.update(o)
            code = EXIT_FAIL if any(r["outcome"] != "applied" for r in result) else 0
            if not as_json:
                click.echo(f"dealt with after {waited:.3f} s")
    if as_json:
        render.emit_json(result)
    else:
        for r in result:
            extra = f"  {r['outcome']}" + (f": {r['reason']}: {r['detail']}" if r.get("reason") else "") if "outcome" in r else ""
            click.echo(f"{r['op']:<16} batch {r['batch']}  at {r['position']}{extra}")
    ctx.exit(code)


@cli.command(name="import")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print a per-file report as JSON.")
@click.pass_context
def import_(ctx: click.Context, paths: tuple[Path, ...], as_json: bool) -> None:
    """Import transcript files or folders (Claude Code, Codex, ShareGPT/Hermes, OpenAI chat).

    The format is detected per file. Re-importing is safe: nothing is duplicated. Bad lines
    are reported (file, line, reason) and skipped; the rest of the file is imported.
    """
    from rich.progress import Progress

    cfg = _cfg(ctx)
    files = list(iter_transcript_files(paths))
    report: list[dict[str, Any]] = []
    con = render.console()
    with Spool(cfg.spool_dir, segment_bytes=cfg.segment_bytes) as spool, \
            Progress(console=render.console() if not as_json else None, transient=True,
                     disable=as_json or not sys.stderr.isatty()) as progress:
        task = progress.add_task("importing", total=len(files))
        for path in files:
            parsed = parse_file(path)
            entry = {"path": str(path), "format": parsed.format, "sessions": len(parsed.sessions),
                     "skipped": None if parsed.format else "format not recognised",
                     "messages": sum(len(s.messages) for s in parsed.sessions),
                     "session_ids": [s.session["session_id"] for s in parsed.sessions],
                     "problems": [{"line": p.line, "kind": p.kind, "reason": p.reason} for p in parsed.problems]}
            try:
                for s in parsed.sessions:
                    ingest.append_all(spool, ingest.session_ops(s.session, s.messages))
            except SpoolError as exc:
                raise click.ClickException(f"{path}: {exc}")
            report.append(entry)
            progress.advance(task)
    if as_json:
        render.emit_json(report)
        ctx.exit(0 if any(e["format"] for e in report) else EXIT_FAIL)
    for e in report:
        path = escape(e["path"])
        if e["format"] is None:
            con.print(f"[dim]skipped[/dim] {path}: format not recognised")
            continue
        con.print(f"{e['format']:<12} {path}: {e['sessions']} session(s), {e['messages']} message(s)")
        for p in e["problems"]:
            con.print(f"  [yellow]{p['kind']}[/yellow] {path}:{p['line']}: {escape(p['reason'])}")
    total = sum(e["messages"] for e in report)
    recognised = sum(1 for e in report if e["format"])
    running = holder_alive(read_holder(cfg.run_dir / "fleet.lock"))
    con.print(f"spooled {total} message(s) from {recognised} file(s); "
              + ("the running fleet applies them" if running else "`quill run` applies them"))
    if not recognised:
        ctx.exit(EXIT_FAIL)


from .cli_read import register  # noqa: E402  (read commands live in their own module)
from .cli_spool import spool as spool_group  # noqa: E402
from .cli_admin import register as register_admin  # noqa: E402
from .cli_jobs import register as register_jobs  # noqa: E402

register(cli)
register_admin(cli)
register_jobs(cli)
cli.add_command(spool_group)


def main() -> None:
    """Console-script entry point."""
    try:
        cli(standalone_mode=True)
    except (StoreError, SpoolError, config.ConfigError) as exc:
        click.echo(f"quill: {type(exc).__name__}: {exc}", err=True)
        sys.exit(EXIT_FAIL)
    except OSError as exc:  # read-only or missing data dir, full disk, permissions
        click.echo(f"quill: {exc.strerror or exc}: {exc.filename or ''}".rstrip(": "), err=True)
        sys.exit(EXIT_FAIL)

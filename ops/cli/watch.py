"""``quill watch``: live capture of agent transcript folders in the foreground (the fleet runs
the same watcher as its ``watch`` worker; docs/operations.md, "Live capture")."""

from __future__ import annotations

import signal
import threading

import click

from quill.ops.cli.base import emit_json, json_option
from quill.ops.client.errors import busy_with


@click.command()
@click.option("--once", is_flag=True, help="Import what changed since the last look, then exit.")
@json_option
@click.pass_context
def watch(ctx: click.Context, once: bool, as_json: bool) -> None:
    """Follow the agent folders of `[watch]` (Claude Code, Codex, Gemini CLI, Copilot CLI,
    opencode, and `roots`) and import sessions as they are written, until Ctrl-C. Nothing in
    the folders is changed. Refused while another watcher (a running fleet's) holds the
    data dir's watch lease."""
    from quill.ops import logs
    from quill.ops.transfer.watch_ingest import ingest_session
    from quill.store.errors import LeaseHeldError
    from quill.workers.watch import Watcher

    cfg = ctx.obj
    cfg.ensure_dirs()
    log = logs.configure(cfg.logs_dir, "watch", stderr=False)
    watcher = Watcher(cfg, log, ingest_session(cfg, log))
    try:
        if once:
            counts = watcher.once()
        else:
            stop = threading.Event()
            for s in (signal.SIGTERM, signal.SIGINT):
                signal.signal(s, lambda *_: stop.set())
            roots = ", ".join(str(p) for p in cfg.watch_paths)
            click.echo(f"quill: watching {roots} (Ctrl-C to stop)", err=True)
            watcher.run(stop, wait=False)
            counts = watcher.totals
    except LeaseHeldError as exc:
        raise busy_with(
            exc,
            f"another watcher follows these folders for {cfg.home}",
            "`quill status`",
            held="the watch lease (a `quill watch`, or a running `quill run`'s watcher)",
        ) from None
    if as_json:
        emit_json(counts)
    else:
        click.echo(
            f"imported {counts['imported']} file(s): {counts['new_messages']} new message(s)"
            f" ({counts['rewritten']} rewritten file(s), {counts['gone']} gone)"
        )

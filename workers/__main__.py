"""Entry point of a fleet child: ``python -m workers {writer|scheduler|consumer} --home DIR``.

Started by the supervisor; reads the configuration once, sets up JSON logging, turns
SIGTERM/SIGINT into a graceful stop and runs the role until stopped.
"""
from __future__ import annotations

import os
import signal
import sys
import threading

import click

from quill.ops import config, logs
from quill.store.errors import LeaseHeldError

from .lifeline import follow_parent


@click.command()
@click.argument("role", type=click.Choice(["writer", "scheduler", "consumer"]))
@click.option("--home", required=True, type=click.Path(file_okay=False))
@click.option("--parent", type=int, default=None, help="Supervisor pid: stop when it is gone.")
def main(role: str, home: str, parent: int | None) -> None:
    os.umask(0o077)  # every file Quill creates is owner-only (docs/architecture.md, "Data layout")
    cfg = config.load(home)
    # The data dir this process serves, for code that runs without a Config in hand (the
    # scheduler's ``fire``, called by APScheduler with the job name only).
    os.environ["QUILL_HOME"] = str(cfg.home)
    cfg.ensure_dirs()
    log = logs.configure(cfg.logs_dir, role)
    stop = threading.Event()
    if role != "consumer":  # huey's consumer installs its own handlers
        for s in (signal.SIGTERM, signal.SIGINT):
            signal.signal(s, lambda *_: stop.set())
    if parent is not None:
        follow_parent(parent, log)
    try:
        if role == "writer":  # either store: store.open decides which (docs/backends.md)
            from .writer import Writer
            Writer(cfg, log).run(stop)
        elif role == "scheduler":
            from . import scheduler
            scheduler.run(cfg, log, stop)
        else:
            from . import consumer
            consumer.run(cfg, log)
    except LeaseHeldError as exc:
        log.error(f"{role}.lease_held", error=str(exc), holder=exc.holder)
        sys.exit(75)  # EX_TEMPFAIL: the supervisor backs off and retries
    except Exception:
        log.exception(f"{role}.crashed")
        raise


if __name__ == "__main__":
    main()

"""Entry point of a fleet child:
``python -m quill.ops.worker_main {writer|scheduler|consumer|watch} --home DIR
[--parent PID]``.

The composition root of a worker process, which is why it sits in ``ops`` and not in
``workers``: started by the supervisor, it reads the settings once (``quill.home.load``), sets up
JSON logging (``ops.logs``), turns SIGTERM/SIGINT into a graceful stop, ties its life to the
supervisor's (``workers.lifeline``) and runs the role until stopped. The ``watch`` role is
composed here: the loop of ``workers/watch.py`` with the spool import of
``ops/transfer/watch_ingest.py`` (a worker may not import the importers).
"""

from __future__ import annotations

import os
import signal
import sys
import threading

import click

from quill import home
from quill.ops import logs
from quill.store.errors import LeaseHeldError
from quill.workers.lifeline import EXIT_LEASE_HELD, follow_parent


@click.command()
@click.argument("role", type=click.Choice(["writer", "scheduler", "consumer", "watch"]))
@click.option("--home", "home_dir", required=True, type=click.Path(file_okay=False))
@click.option("--parent", type=int, default=None, help="Supervisor pid: stop when it is gone.")
def main(role: str, home_dir: str, parent: int | None) -> None:
    """Run fleet role ``role`` on data dir ``home_dir`` until SIGTERM/SIGINT (or the parent's
    death). Exits ``EXIT_LEASE_HELD`` when another process holds the role's lease; any other
    error is logged (``<role>.crashed``) and re-raised (exit 1, the supervisor restarts it)."""
    os.umask(0o077)  # every file Quill creates is owner-only (docs/architecture.md, "Data layout")
    settings = home.load(home_dir)
    settings.ensure_dirs()
    log = logs.configure(settings.logs_dir, role)
    stop = threading.Event()
    if role != "consumer":  # huey's consumer installs its own handlers
        for s in (signal.SIGTERM, signal.SIGINT):
            signal.signal(s, lambda *_: stop.set())
    if parent is not None:
        follow_parent(parent, log)
    try:
        if role == "writer":  # either store: store.open decides which (docs/backends.md)
            from quill.workers.writer import Writer

            Writer(settings, log).run(stop)
        elif role == "scheduler":
            from quill.workers import scheduler

            scheduler.run(settings, log, stop)
        elif role == "watch":
            from quill.ops.transfer.watch_ingest import ingest_session
            from quill.workers.watch import Watcher

            Watcher(settings, log, ingest_session(settings, log)).run(stop)
        else:
            from quill.workers import consumer

            consumer.run(settings, log)
    except LeaseHeldError as exc:
        log.error(f"{role}.lease_held", error=str(exc), holder=exc.holder)
        sys.exit(EXIT_LEASE_HELD)
    except Exception:
        log.exception(f"{role}.crashed")
        raise


if __name__ == "__main__":
    main()

"""The fleet's ``http`` child: ``python -m quill.ops.service --home DIR --parent PID``.

Started by the supervisor when ``[http] listen`` is set; publishes ``run/http.json`` so
``quill status`` shows it, and stops with its parent (``workers.lifeline``).
"""

from __future__ import annotations

import os
import threading
import time

import click

from quill import home as data_dir
from quill.home import RunDir
from quill.ops import logs
from quill.ops.service.server import serve
from quill.workers.lifeline import follow_parent


@click.command()
@click.option("--home", required=True, type=click.Path(file_okay=False))
@click.option("--parent", type=int, default=None, help="Supervisor pid: stop when it is gone.")
def main(home: str, parent: int | None) -> None:
    os.umask(0o077)
    cfg = data_dir.load(home)
    cfg.ensure_dirs()
    log = logs.configure(cfg.logs_dir, "http")
    if parent is not None:
        follow_parent(parent, log)

    def started(host: str, port: int) -> None:
        rd, record = RunDir(cfg.home, log), {"listen": f"{host}:{port}", "ready": True}
        if rd.publish("http", record):
            return

        def retry() -> None:  # a full disk refused it (reported): published once it is back
            while not rd.publish("http", record):
                time.sleep(1.0)

        threading.Thread(target=retry, name="http-status", daemon=True).start()

    serve(cfg, log, cfg.http_listen, on_started=started)


if __name__ == "__main__":
    main()

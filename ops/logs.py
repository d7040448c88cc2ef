"""structlog set-up: one JSON event per line, per process, in ``logs/<role>.log``."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import structlog

from quill.home.layout import private_dirs


def configure(
    logs_dir: Path | None, role: str, *, stderr: bool = False
) -> structlog.stdlib.BoundLogger:
    """Send this process's events (and stdlib logging, e.g. huey/APScheduler) as JSON lines
    to ``logs_dir/<role>.log`` (and to stderr when asked). Returns a logger bound to role+pid.
    """
    handlers: list[logging.Handler] = []
    if logs_dir is not None:
        private_dirs(logs_dir)
        path = logs_dir / f"{role}.log"
        handlers.append(logging.FileHandler(path, encoding="utf-8"))
        os.chmod(path, 0o600)
    if stderr or not handlers:
        handlers.append(logging.StreamHandler(sys.stderr))
    shared = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    formatter = structlog.stdlib.ProcessorFormatter(
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
        foreign_pre_chain=shared,
    )
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    for h in handlers:
        h.setFormatter(formatter)
        root.addHandler(h)
    root.setLevel(logging.INFO)
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    return structlog.get_logger("quill").bind(role=role, pid=os.getpid())

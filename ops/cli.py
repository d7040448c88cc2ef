"""``quill``: the operator's CLI. Human output by default, ``--json`` on every command.

Exit codes (``quill.ops.errors.Exit``, shared by every command): 0 ok · 1 failure, damage
found or a batch quarantined · 2 usage error · 3 not found · 4 timed out · 5 the writer
halted · 6 a worker is crash-looping. Errors have one format (``ops/cli_base.py``).

This module is the root of every command, so it imports only click and the configuration:
each command's module is imported when that command runs (``LazyGroup``).
"""
from __future__ import annotations

import os
import sys

import click

from quill import __version__

from . import config
from .cli_base import CONTEXT, LazyGroup, run as run_cli

#: command name -> "module:attribute", imported when the command is used.
COMMANDS = {
    "push": "quill.ops.cli_push:push",
    "run": "quill.ops.cli_run:run",
    "import": "quill.ops.cli_import:import_",
    "sessions": "quill.ops.cli_read:sessions",
    "search": "quill.ops.cli_read:search",
    "status": "quill.ops.cli_read:status",
    "snapshot": "quill.ops.cli_admin:snapshot",
    "recover": "quill.ops.cli_admin:recover",
    "doctor": "quill.ops.cli_admin:doctor",
    "jobs": "quill.ops.cli_jobs:jobs",
    "schedule": "quill.ops.cli_jobs:schedule",
    "spool": "quill.ops.cli_spool:spool",
    "usage": "quill.ops.cli_usage:usage",
    "export": "quill.ops.cli_export:export_cmd",
    "serve": "quill.ops.cli_service:serve",
    "token": "quill.ops.cli_service:token",
}


@click.group(cls=LazyGroup, lazy=COMMANDS, context_settings=CONTEXT)
@click.version_option(__version__, "--version", prog_name="quill", message="%(prog)s %(version)s")
@click.option("--home", type=click.Path(file_okay=False), envvar="QUILL_HOME",
              help="Data dir (default: $QUILL_HOME, else the XDG data dir).")
@click.pass_context
def cli(ctx: click.Context, home: str | None) -> None:
    """Quill keeps AI-agent transcripts safe: a durable spool, one writer, a searchable store."""
    os.umask(0o077)  # every file Quill creates is owner-only (docs/architecture.md, "Data layout")
    ctx.obj = config.load(home)  # ConfigError is reported by cli_base.run


def main() -> None:
    """Console-script entry point."""
    sys.exit(run_cli(cli))

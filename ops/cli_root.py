"""The ``quill`` click group: the root of every command (entry point: ``ops/cli.py``).

It imports only click and the configuration: each command's module is imported when that
command runs (``LazyGroup``).
"""
from __future__ import annotations

import click

from quill import __version__

from .cli import setup
from .cli_base import CONTEXT, LazyGroup

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
    ctx.obj = setup(home)  # ConfigError is reported by cli_base.run

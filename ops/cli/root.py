"""The ``quill`` click group: the root of every command (entry point: ``ops/cli/__init__.py``).

It imports only click and the configuration (``startup.setup``): each command's module is
imported when that command runs (``LazyGroup``).
"""

from __future__ import annotations

import click

from quill import __version__
from quill.ops.cli.base import CONTEXT, LazyGroup
from quill.ops.cli.startup import setup

#: command name -> "module:attribute", imported when the command is used.
COMMANDS = {
    "push": "quill.ops.cli.push:push",
    "run": "quill.ops.cli.run:run",
    "import": "quill.ops.cli.import_:import_",
    "sessions": "quill.ops.cli.read:sessions",
    "search": "quill.ops.cli.read:search",
    "status": "quill.ops.cli.status:status",
    "snapshot": "quill.ops.cli.admin:snapshot",
    "recover": "quill.ops.cli.admin:recover",
    "doctor": "quill.ops.cli.admin:doctor",
    "jobs": "quill.ops.cli.jobs:jobs",
    "schedule": "quill.ops.cli.schedule:schedule",
    "spool": "quill.ops.cli.spool:spool",
    "usage": "quill.ops.cli.usage:usage",
    "export": "quill.ops.cli.export:export_cmd",
    "serve": "quill.ops.cli.service:serve",
    "token": "quill.ops.cli.service:token",
    "watch": "quill.ops.cli.watch:watch",
}


@click.group(cls=LazyGroup, lazy=COMMANDS, context_settings=CONTEXT)
@click.version_option(__version__, "--version", prog_name="quill", message="%(prog)s %(version)s")
@click.option(
    "--home",
    type=click.Path(),  # what it names is checked by quill.home.load, for every entry point
    envvar="QUILL_HOME",
    help="Data dir (default: $QUILL_HOME, else the XDG data dir).",
)
@click.pass_context
def cli(ctx: click.Context, home: str | None) -> None:
    """Quill keeps AI-agent transcripts safe: a durable spool, one writer, a searchable store."""
    ctx.obj = setup(home)  # ConfigError is reported by base.run

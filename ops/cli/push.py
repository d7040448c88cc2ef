"""``quill push`` as a click command (help, usage errors, unusual argv). The common argv skips
click entirely (``ops/cli/push_fast.py``, called from ``quill.ops.cli.main``); both run
``push.run``."""

from __future__ import annotations

from typing import Any

import click

from quill.ops.cli import push_fast as body
from quill.ops.cli.base import json_option


@click.command()
@click.argument("source", type=click.File("r", encoding="utf-8"), default="-")
@click.option(
    "--session", "session_id", help="Session id for bare messages and batches without one."
)
@click.option(
    "--wait",
    "wait_s",
    type=click.FloatRange(min=0),
    default=None,
    help="Wait up to N seconds until applied.",
)
@json_option
@click.pass_context
def push(
    ctx: click.Context, source: Any, session_id: str | None, wait_s: float | None, as_json: bool
) -> None:
    """Push a batch (JSON or JSONL, from a file or stdin) into the spool.

    Each value is an op ({"op", "data"}), a messages batch ({"session_id", "messages"}) or a
    bare message ({"role", "content", ...}; needs --session). --session also fills in an op's
    or batch's missing session_id; one that names another session is refused. Durable when
    this returns. Give a "batch" id (a UUID) in an op or batch to retry safely: a batch id is
    applied once. A batch that can never apply, or an input with nothing in it, is refused
    before anything is pushed (exit 2). With --wait, each batch's outcome (applied /
    quarantined with the reason) is reported and the exit code is 1 if any was quarantined,
    4 if the writer did not get to it in time.
    """
    ctx.exit(body.run(ctx.obj, source, source.name, session_id, wait_s, as_json))

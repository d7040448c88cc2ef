"""``quill push``: the producer path agents call per turn, so it imports only the spool, the
op pre-check and click (measured in ``bench/cli.py``)."""
from __future__ import annotations

import json
from typing import Any

import click

from quill.spool import Spool
from quill.store.errors import InvalidOpError
from quill.store.precheck import precheck

from . import ingest
from .cli_base import emit_json, json_option
from .errors import Exit, InvalidInputError

_NOTHING = "nothing was pushed"


def _read_json_values(stream: Any, name: str) -> list[Any]:
    try:
        return _parse_json_values(stream.read(), name)
    except UnicodeDecodeError as exc:
        raise InvalidInputError(f"{name}: not UTF-8 text ({exc.reason} at byte {exc.start}); {_NOTHING}")
    except RecursionError:
        raise InvalidInputError(f"{name}: JSON nested too deeply; {_NOTHING}")


def _parse_json_values(text: str, name: str) -> list[Any]:
    stripped = text.lstrip()
    if not stripped:
        raise InvalidInputError(f"{name}: no input", hint="pipe JSON or JSONL into `quill push`, or give a file")
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
                raise InvalidInputError(f"{name}:{lineno}: not JSON ({exc.msg}); {_NOTHING}")
    return values


@click.command()
@click.argument("source", type=click.File("r", encoding="utf-8"), default="-")
@click.option("--session", "session_id", help="Session id for bare messages.")
@click.option("--wait", "wait_s", type=click.FloatRange(min=0), default=None,
              help="Wait up to N seconds until applied.")
@json_option
@click.pass_context
def push(ctx: click.Context, source: Any, session_id: str | None, wait_s: float | None, as_json: bool) -> None:
    """Push a batch (JSON or JSONL, from a file or stdin) into the spool.

    Each value is an op ({"op", "data"}), a messages batch ({"session_id", "messages"}) or a
    bare message ({"role", "content", ...}; needs --session). Durable when this returns.
    Give a "batch" id (a UUID) in an op or batch to retry safely: a batch id is applied once.
    A batch that can never apply is refused before anything is pushed (exit 2). With --wait,
    each batch's outcome (applied / quarantined with the reason) is reported and the exit
    code is 1 if any was quarantined, 4 if the writer did not get to it in time.
    """
    cfg = ctx.obj
    values = _read_json_values(source, source.name)
    index = 0
    try:
        ops = list(ingest.push_ops(values, session_id))
        for index, (op, data, _) in enumerate(ops):
            precheck(op, data)
    except InvalidOpError as exc:
        raise InvalidInputError(f"batch {index}: {exc.reason}: {exc.detail}; {_NOTHING}", reason=exc.reason)
    except ValueError as exc:
        raise InvalidInputError(f"{exc}; {_NOTHING}")
    with Spool(cfg.spool_dir, segment_bytes=cfg.segment_bytes) as spool:
        acks = ingest.append_all(spool, ops)
    result = [{"op": op, "batch": a.batch_id, "position": str(a.position)} for (op, _, _), a in zip(ops, acks)]
    code = Exit.OK
    if wait_s is not None and acks:
        from quill.spool import WaitTimeoutError
        from .wait import outcomes, wait_applied
        try:
            waited = wait_applied(cfg.state_db, max(a.position for a in acks), wait_s)
        except WaitTimeoutError as exc:
            click.echo(f"quill: {exc}", err=True)
            for r in result:
                r["outcome"] = "pending"
            code = Exit.TIMEOUT
        else:
            for r, o in zip(result, outcomes(cfg.state_db, cfg.spool_dir, acks)):
                r.update(o)
            code = Exit.FAILED if any(r["outcome"] != "applied" for r in result) else Exit.OK
            if not as_json:
                click.echo(f"dealt with after {waited:.3f} s")
    if as_json:
        emit_json(result)
    else:
        for r in result:
            extra = f"  {r['outcome']}" + (f": {r['reason']}: {r['detail']}" if r.get("reason") else "") if "outcome" in r else ""
            click.echo(f"{r['op']:<16} batch {r['batch']}  at {r['position']}{extra}")
    ctx.exit(code)

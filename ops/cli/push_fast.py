"""``quill push``, click-free: parse the argv of the common case, read the batch, pre-check it,
append it durably and print the acks.

Agents call ``quill push`` once per turn, so its whole-process latency matters (target: p50 ≤
100 ms, ``bench/cli.py``). ``quill.ops.cli.main`` tries ``parse_argv`` first; when it accepts
the argv, ``run`` is called without importing click or the command tree. Anything it does not
accept exactly (``-h``, an unknown option, a bad number, an unopenable file …) returns None and
click parses the argv instead, so usage errors and help come from click alone. Both paths end in
``run`` and print errors through ``ops/cli/output.py``: one output, one error format, one
exit-code table (``ops/cli/push.py`` is the click command).
"""

from __future__ import annotations

import json
import math
import os
import sys
from typing import IO, Any, NamedTuple

from quill.ops.client.errors import Exit, InvalidInputError, from_exception

_NOTHING = "nothing was pushed"


class PushArgs(NamedTuple):
    """The argv of ``quill [--home DIR] push [SOURCE] [--session S] [--wait N] [--json]``."""

    home: str | None  # --home, else $QUILL_HOME (None: the default data dir)
    source: str  # a file path or "-" (stdin)
    session_id: str | None
    wait_s: float | None  # seconds, finite and ≥ 0
    as_json: bool


def parse_argv(argv: list[str]) -> PushArgs | None:
    """``PushArgs`` if ``argv`` is a ``push`` command line this parser accepts exactly as
    click would, else None (click then parses it and reports any usage error)."""
    args = list(argv)
    home = None
    while args and (args[0] == "--home" or args[0].startswith("--home=")):
        if args[0] == "--home":
            if len(args) < 2:
                return None
            home, args = args[1], args[2:]
        else:
            home, args = args[0].split("=", 1)[1], args[1:]
    if not args or args[0] != "push":
        return None
    args = args[1:]
    source: str | None = None
    session_id = None
    wait_s = None
    as_json = False
    while args:
        arg = args.pop(0)
        name, eq, inline = arg.partition("=")
        if arg == "--json":
            as_json = True
        elif name in ("--session", "--wait") and arg.startswith("--"):
            if not eq:
                if not args:
                    return None
                inline = args.pop(0)
            if name == "--session":
                session_id = inline
            else:
                try:
                    wait_s = float(inline)
                except ValueError:
                    return None
                if not math.isfinite(wait_s) or wait_s < 0:
                    return None
        elif arg == "-" or (not arg.startswith("-") and arg):
            if source is not None:
                return None
            source = arg
        else:  # -h, --help, --, unknown options: click's business
            return None
    home = home if home is not None else os.environ.get("QUILL_HOME") or None
    if source not in (None, "-") and not os.path.isfile(source):
        return None  # click.File reports it
    return PushArgs(home, source or "-", session_id, wait_s, as_json)


def open_source(source: str) -> IO[str]:
    """The batch's text stream: stdin or the file, decoded as UTF-8 (strict), as click.File does."""
    if source == "-":
        import io

        return io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="strict")
    return open(source, encoding="utf-8")


def read_json_values(stream: Any, name: str) -> list[Any]:
    """The JSON values of ``stream``: one JSON document, or JSON lines. Raises
    ``InvalidInputError`` (nothing is pushed then)."""
    try:
        return _parse_json_values(stream.read(), name)
    except UnicodeDecodeError as exc:
        raise InvalidInputError(
            f"{name}: not UTF-8 text ({exc.reason} at byte {exc.start}); {_NOTHING}"
        ) from None
    except RecursionError:
        raise InvalidInputError(f"{name}: JSON nested too deeply; {_NOTHING}") from None


def _parse_json_values(text: str, name: str) -> list[Any]:
    stripped = text.lstrip()
    if not stripped:
        raise InvalidInputError(
            f"{name}: no input", hint="pipe JSON or JSONL into `quill push`, or give a file"
        )
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
                raise InvalidInputError(
                    f"{name}:{lineno}: not JSON ({exc.msg} at column {exc.colno}); {_NOTHING}",
                    hint="give one JSON document, or one JSON value per line (JSONL)",
                ) from None
    return values


def run(
    cfg: Any, stream: Any, name: str, session_id: str | None, wait_s: float | None, as_json: bool
) -> int:
    """Push the values of ``stream`` into ``cfg``'s spool; print one line per op (or the
    ``--json`` list); return the exit code (``Exit``). Raises ``InvalidInputError`` for a
    batch that can never apply (nothing is pushed then) and the spool's errors."""
    from quill.ops.cli.output import echo, emit_json, human_lines
    from quill.ops.client.fence import needs_stamp
    from quill.ops.transfer import ingest
    from quill.spool import Spool
    from quill.store.apply.precheck import precheck
    from quill.store.errors import InvalidOpError

    values = read_json_values(stream, name)
    try:
        ops = list(ingest.push_ops(values, session_id))
    except ValueError as exc:
        raise InvalidInputError(f"{exc}; {_NOTHING}") from None
    unfenced: tuple[int, ...] = ()
    why = ""
    if any(needs_stamp(op, data) for op, data, _ in ops):  # the store is read only then
        from quill.ops.client.fence import stamp_ops

        stamped = stamp_ops(cfg, ops)
        ops, unfenced, why = stamped.ops, stamped.unfenced, stamped.why
    for index, (op, data, batch) in enumerate(ops):
        try:
            precheck(op, data, batch)
        except InvalidOpError as exc:
            raise InvalidInputError(
                f"batch {index}: {exc.reason}: {exc.detail}; {_NOTHING}", reason=exc.reason
            ) from None
        except ValueError as exc:
            raise InvalidInputError(f"{exc}; {_NOTHING}") from None
    if not ops:
        raise InvalidInputError(
            f"{name}: no ops or messages in the input (an empty list?); {_NOTHING}",
            hint="push at least one op, messages batch or message",
        )
    # One short-lived process, a few records: the stdlib codec beats importing msgspec.
    with Spool.for_settings(cfg, fast_codec=False) as spool:
        if len(ops) > 1:  # refuse an oversized record before appending any of the batch
            for op, data, batch in ops:
                spool.fits(op, data, batch)
        acks = spool.append_many(ops)  # one fdatasync for the whole input
    if unfenced:  # appended all the same (never block an agent), and said
        echo(f"warning: {why}", err=True)
    result = [
        {"op": op, "batch": a.batch_id, "position": str(a.position)}
        | ({"unfenced": why} if i in unfenced else {})
        for i, ((op, _, _), a) in enumerate(zip(ops, acks))
    ]
    code = Exit.OK
    waited: float | None = None  # seconds the wait took, once every batch was dealt with
    if wait_s is not None:
        from quill.ops.client.wait import outcomes, wait_applied
        from quill.spool import WaitTimeoutError

        awaited = {(str(a.position), a.batch_id) for a in acks}
        try:
            waited = wait_applied(cfg, max(a.position for a in acks), wait_s, awaited=awaited)
        except WaitTimeoutError as exc:
            # The records are durable (acknowledged below); only the wait ran out. --json keeps
            # the ack list (with "outcome": "pending") so a script can wait on those batches.
            public = from_exception(exc)
            if public is None:  # every WaitTimeoutError has a public form: a bug if not
                raise
            public.hint = "the records are durable and are applied once a writer runs"
            for line in human_lines(public):
                echo(line, err=True)
            for r in result:
                r["outcome"] = "pending"
            code = Exit.TIMEOUT
        else:
            # Every batch a ring's note named is applied; otherwise their outcomes are read.
            found = outcomes(cfg, cfg.spool_dir, acks) if awaited else None
            for r, o in zip(result, found or [{"outcome": "applied"}] * len(acks)):
                r.update(o)
            code = Exit.FAILED if any(r["outcome"] != "applied" for r in result) else Exit.OK
    if as_json:
        emit_json(result)
    else:
        for r in result:
            extra = (
                f"  {r['outcome']}" + (f": {r['reason']}: {r['detail']}" if r.get("reason") else "")
                if "outcome" in r
                else ""
            )
            echo(f"{r['op']:<16} batch {r['batch']}  at {r['position']}{extra}")
        if waited is not None:  # after the outcomes it measures
            echo(f"the writer dealt with them {waited:.3f} s into the wait")
    if wait_s is None:
        from quill.home import RunDir

        if not RunDir(cfg.home).fleet_running():  # an ack alone read as "stored"
            echo(
                "quill: no fleet is running on this data dir: `quill run` applies the records "
                "(they are safe in the spool)",
                err=True,
            )
    return int(code)

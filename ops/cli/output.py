"""The click-free half of what every ``quill`` command shares: the ``--json`` output, the one
error format and the exit codes (``quill.ops.client.errors.Exit``).

``ops/cli/base.py`` (the click half) and the ``quill push`` fast path (``ops/cli/__init__.py``) both
print through these functions, so an error looks the same whichever path parsed the argv.
Kept free of click so the per-turn producer path (``quill push``) need not import it.

Error format (usage errors included):

* human (stderr): ``quill: error: <message>`` and, when there is one, ``quill: hint: <what
  to do>``;
* with ``--json`` (stdout, so a consumer parsing stdout always gets JSON):
  ``{"error": {"kind", "message", "hint", "exit_code"}}``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

from quill.ops.client.errors import QuillError


def echo(text: str = "", *, err: bool = False) -> None:
    """Print one line on stdout (or stderr) and flush, as ``click.echo`` does."""
    stream = sys.stderr if err else sys.stdout
    stream.write(text + "\n")
    stream.flush()


def emit_json(data: Any) -> None:
    """Print ``data`` as JSON on stdout (the ``--json`` output of every command)."""
    echo(json.dumps(data, ensure_ascii=False, indent=2, default=str))


def wants_json(argv: Sequence[str]) -> bool:
    """Whether ``--json`` was given: read from argv, so a usage error found before the parser
    got to the option is still reported as JSON."""
    args = list(argv)
    if "--" in args:
        args = args[: args.index("--")]
    return "--json" in args


def report(error: QuillError, as_json: bool) -> int:
    """Print ``error`` in the one error format; return its exit code (``Exit``)."""
    if as_json:
        echo(json.dumps({"error": error.as_dict()}, ensure_ascii=False, indent=2))
    else:
        echo(f"quill: error: {error.message}", err=True)
        if error.hint:
            echo(f"quill: hint: {error.hint}", err=True)
    return int(error.exit_code)

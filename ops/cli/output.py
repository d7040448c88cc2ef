"""The click-free half of what every ``quill`` command shares: the ``--json`` output, the one
error format and the exit codes (``quill.ops.client.errors.Exit``).

``ops/cli/base.py`` (the click half) and the ``quill push`` fast path (``ops/cli/__init__.py``) both
print through these functions, so an error looks the same whichever path parsed the argv.
Kept free of click so the per-turn producer path (``quill push``) need not import it.

Error format (usage errors included):

* human (stderr): ``quill: error: <message>``, then ``quill: note: <note>`` for each note
  added to the error (``BaseException.add_note``; a note's later lines indented), then, when
  there is one, ``quill: hint: <what to do>``;
* with ``--json`` (stdout, so a consumer parsing stdout always gets JSON):
  ``{"error": {"kind", "message", "hint", "notes", "exit_code"}}``.
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


def human_lines(error: QuillError) -> list[str]:
    """``error`` in the human error format (module doc), one string per line."""
    lines = [f"quill: error: {error.message}"]
    for note in error.notes:
        lines.append("quill: note: " + note.replace("\n", "\n             "))
    if error.hint:
        lines.append(f"quill: hint: {error.hint}")
    return lines


def report(error: QuillError, as_json: bool) -> int:
    """Print ``error`` in the one error format; return its exit code (``Exit``)."""
    if as_json:
        echo(json.dumps({"error": error.as_dict()}, ensure_ascii=False, indent=2))
    else:
        for line in human_lines(error):
            echo(line, err=True)
    return int(error.exit_code)

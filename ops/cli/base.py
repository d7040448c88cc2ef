"""What every ``quill`` command shares: the ``--json`` option, the error format, the exit codes
(``quill.ops.client.errors.Exit``) and lazy command loading.

Commands are loaded on first use (click's documented lazy-group pattern), so ``quill push``
imports only the producer side and never SQLAlchemy, APScheduler or rich.

Errors have one format for all commands, usage errors included (``ops/cli/output.py`` prints
it; that half is click-free so the ``quill push`` fast path in ``ops/cli/__init__.py`` shares it).

Commands raise ``quill.ops.client.errors`` types (``NotFoundError`` …), ``click.UsageError`` /
``click.BadParameter`` for bad arguments, or ``click.ClickException`` for a plain failure;
errors of the lower layers (spool, store, OS) are classified by type in ``run``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from importlib import import_module
from typing import Any

import click

from quill.ops.cli.output import emit_json, report, wants_json
from quill.ops.client.errors import (
    AbortedError,
    Exit,
    InvalidInputError,
    QuillError,
    from_exception,
    with_notes,
)

__all__ = [
    "CONTEXT",
    "LazyGroup",
    "confirm",
    "emit_json",
    "json_option",
    "report",
    "run",
    "wants_json",
]

#: Click context settings of the root group (inherited by every command): ``-h`` works like
#: ``--help``; help fits a terminal up to 120 columns and is never hard-wrapped when stdout is
#: not a terminal (click would assume 80 columns).
CONTEXT: dict[str, Any] = {"help_option_names": ["-h", "--help"], "max_content_width": 120}
if not sys.stdout.isatty():
    CONTEXT["terminal_width"] = CONTEXT["max_content_width"] = 100_000


def json_option(func: Callable[..., Any]) -> Callable[..., Any]:
    """The one ``--json`` option: adds an ``as_json`` parameter to the command."""
    return click.option(
        "--json",
        "as_json",
        is_flag=True,
        help='Print the result as JSON (errors too: {"error": {...}}).',
    )(func)


class LazyGroup(click.Group):
    """A group whose sub-commands are imported when used: ``lazy`` maps a command name to
    ``"module:attribute"``."""

    def __init__(self, *args: Any, lazy: dict[str, str] | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self.lazy and name not in self.commands:
            module, _, attr = self.lazy[name].partition(":")
            self.add_command(getattr(import_module(module), attr), name)
        return super().get_command(ctx, name)


def confirm(question: str, *, yes: bool, as_json: bool) -> None:
    """Ask ``question`` on the terminal unless ``yes``; raise ``AbortedError`` (exit 7) on no.

    A prompt nobody can answer is refused, never skipped: with ``--json`` or when stdin is not
    a terminal, ``--yes`` is required (``InvalidInputError``, exit 2; nothing is changed)."""
    if yes:
        return
    if as_json or not sys.stdin.isatty():
        raise InvalidInputError(
            "this command asks for confirmation and cannot ask here "
            f"({'--json' if as_json else 'stdin is not a terminal'})",
            hint="pass --yes to confirm without a prompt",
        )
    if not click.confirm(question, err=True):
        raise AbortedError("aborted: nothing was changed")


def _usage_hint(exc: click.UsageError) -> str:
    ctx = exc.ctx
    if ctx is None:
        return "`quill -h` lists the commands"
    return f"`{ctx.command_path} -h` shows the options"


def _classify(exc: BaseException) -> QuillError | None:
    if isinstance(exc, click.UsageError):  # BadParameter, NoSuchOption, MissingParameter …
        return InvalidInputError(exc.format_message(), hint=_usage_hint(exc))
    if isinstance(exc, click.ClickException):
        error = QuillError(exc.format_message())
        error.exit_code = (
            Exit(exc.exit_code) if exc.exit_code in Exit._value2member_map_ else Exit.FAILED
        )
        return error
    return from_exception(exc)


def run(group: click.Group, argv: Sequence[str] | None = None) -> int:
    """Run ``group`` with ``argv`` (default ``sys.argv[1:]``); every error goes through
    ``report``. Returns the exit code (``Exit``)."""
    args = list(sys.argv[1:] if argv is None else argv)
    as_json = wants_json(args)
    try:
        # Without standalone mode click returns ``ctx.exit(code)``'s code (commands return None).
        code = group.main(args=args, prog_name="quill", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.exceptions.Abort as exc:  # click raises it for Ctrl-C / EOF at a prompt
        if isinstance(exc.__context__, KeyboardInterrupt):
            click.echo("quill: interrupted", err=True)
            return Exit.INTERRUPTED
        return report(
            AbortedError("aborted: no answer to the prompt; nothing was changed"), as_json
        )
    except Exception as exc:  # noqa: BLE001 — classified by type below; unknown ones re-raised
        error = _classify(exc)
        if error is None:
            raise
        return report(with_notes(error, exc), as_json)
    return code if isinstance(code, int) else Exit.OK

"""``quill``: the operator's CLI. Human output by default, ``--json`` on every command.

Exit codes (``quill.ops.client.errors.Exit``, shared by every command): 0 ok · 1 failure, damage
found or a batch quarantined · 2 usage error · 3 not found · 4 timed out · 5 the writer
halted · 6 a worker is crash-looping · 7 aborted (a confirmation was declined). Errors have one
format (``ops/cli/output.py``).

This module is the entry point and imports nothing heavy, not even click: ``main`` runs the
per-turn producer command (``quill push`` with its common argv, ``ops/cli/push_fast.py``) and a bare
``quill --version`` without building the command tree, and hands every other argv to the click group
(``ops/cli/root.py``, which loads each command's module when that command runs).
``quill.ops.cli.cli`` is that group (resolved on first use).
"""

from __future__ import annotations

import sys
from typing import Any


def _fast_push(argv: list[str]) -> int | None:
    """Exit code of ``quill push`` run without click, or None if click must parse ``argv``."""
    from quill.ops.cli import push_fast as push
    from quill.ops.cli.startup import setup

    args = push.parse_argv(argv)
    if args is None:
        return None
    from quill.ops.cli.output import report
    from quill.ops.client.errors import from_exception

    try:
        with push.open_source(args.source) as stream:
            return push.run(
                setup(args.home), stream, stream.name, args.session_id, args.wait_s, args.as_json
            )
    except KeyboardInterrupt:  # Ctrl-C (e.g. during --wait): as the click commands say it
        from quill.ops.client.errors import Exit

        print("\nquill: interrupted", file=sys.stderr)
        return Exit.INTERRUPTED
    except Exception as exc:  # noqa: BLE001 — classified by type, as base.run does
        error = from_exception(exc)
        if error is None:
            raise
        return report(error, args.as_json)


def main() -> None:
    """Console-script entry point."""
    argv = sys.argv[1:]
    if argv == ["--version"]:  # asked by scripts and installers: answered without click
        from quill import __version__

        print(f"quill {__version__}")
        sys.exit(0)
    code = _fast_push(argv) if "push" in argv else None
    if code is None:
        from quill.ops.cli.base import run
        from quill.ops.cli.root import cli as group

        code = run(group, argv)
    sys.exit(code)


def __getattr__(name: str) -> Any:
    if name in ("cli", "COMMANDS"):  # the click group, built on first use (PEP 562)
        from quill.ops.cli import root

        return getattr(root, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

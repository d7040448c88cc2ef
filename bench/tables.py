"""Print a results dict (``bench.run``) as rich tables: one per section that ran, then the
targets with their verdicts. The sections are ``bench.report.sections`` (the same tables the
Markdown report renders); ``print_table`` prints any table of a benchmark."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from .report import TEXT_COLUMNS, _f, sections, targets

_STYLES = {"PASS": "green", "FAIL": "red"}


def print_table(
    title: str | None,
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
    console: Console | None = None,
) -> None:
    """Print ``rows`` under ``columns`` as one rich table (values through ``report._f``;
    name columns, ``report.TEXT_COLUMNS``, left-aligned, figures right-aligned; a ``result``
    cell is green for PASS, red for FAIL, yellow otherwise)."""
    t = Table(title=title)
    for c in columns:
        t.add_column(c, justify="left" if c in TEXT_COLUMNS else "right")
    for r in rows:
        cells = [_f(v) for v in r]
        if "result" in columns:
            i = list(columns).index("result")
            style = _STYLES.get(cells[i].split(" ", 1)[0], "yellow")
            cells[i] = f"[{style}]{cells[i]}[/{style}]"
        t.add_row(*cells)
    (console or Console()).print(t)


def tables(res: dict[str, Any], console: Console) -> None:
    for s in [*sections(res), targets(res)]:
        print_table(s.title, s.columns, s.rows, console)
        for note in s.notes:
            console.print(f"  {note}")

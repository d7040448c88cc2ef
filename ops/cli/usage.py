"""``quill usage``: token and cost totals by session, model, source, task, provider and day."""

from __future__ import annotations

import csv
import sys
from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from quill.ops.cli import paging, render
from quill.ops.cli.base import emit_json, json_option
from quill.ops.cli.params import EPOCH
from quill.ops.cli.read import _note_no_store
from quill.ops.client.client import Client
from quill.store.apply.usage import TOKEN_FIELDS
from quill.store.read.usage import GROUPS, TOTAL_KEYS


@click.group(invoke_without_command=True)
@click.option(
    "--by",
    "by",
    multiple=True,
    type=click.Choice(list(GROUPS)),
    help="Group by this (repeatable: --by day --by model). Default: one grand total.",
)
@click.option("--since", type=EPOCH, help="Calls at or after (epoch seconds or ISO date).")
@click.option("--until", type=EPOCH, help="Calls at or before (epoch seconds or ISO date).")
@click.option("--session", "session_id", help="Only this session.")
@click.option("--source", help="Only sessions from this source.")
@click.option("--model", help="Only this model.")
@click.option(
    "--task", help="Only this task (turn, compression, title, background_review, auxiliary ...)."
)
@click.option(
    "--limit",
    type=click.IntRange(1, 100_000),
    default=1000,
    show_default=True,
    help="Groups a page holds.",
)
@paging.after_option
@json_option
@click.option("--csv", "as_csv", is_flag=True, help="Rows as CSV (header line first).")
@click.pass_context
def usage(
    ctx: click.Context,
    by: tuple[str, ...],
    limit: int,
    after: str | None,
    since: float | None,
    until: float | None,
    session_id: str | None,
    source: str | None,
    model: str | None,
    task: str | None,
    as_json: bool,
    as_csv: bool,
) -> None:
    """Token usage and cost. Each API response is counted once; calls to models the price
    table does not know are reported as unpriced, never as $0. `quill usage reprice`
    re-prices records priced with an older price table.

    Groups are ordered by their values (none first), a page of --limit at a time (--after
    CURSOR: the next page of the same grouping and filters). --json prints {"usage": [...],
    "next": CURSOR or null}; with --csv or the table, a note on stderr gives the next page's
    cursor."""
    if ctx.invoked_subcommand is not None:
        return
    cfg = ctx.obj
    if as_json and as_csv:
        raise click.UsageError("--json and --csv are exclusive")
    by = tuple(dict.fromkeys(by))
    _note_no_store(cfg)
    found = Client(config_=cfg).usage_page(
        by,
        limit=limit,
        after=after,
        since=since,
        until=until,
        session_id=session_id,
        source=source,
        model=model,
        task=task,
    )
    rows = found["usage"]
    if as_json:
        emit_json(found)
        return
    if as_csv:
        writer = csv.DictWriter(sys.stdout, fieldnames=[*by, *TOTAL_KEYS], lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    else:
        con = render.console()
        # eight numeric columns plus the groups: never squeeze a group name to nothing
        con.width = max(con.width, 100 + 24 * len(by))
        con.print(_table(rows, by))
    paging.note_next("groups", limit, found["next"])


def _table(rows: list[dict[str, Any]], by: tuple[str, ...]) -> Table:
    table = Table(title="usage" + (f" by {', '.join(by)}" if by else ""), title_justify="left")
    for col in by:
        table.add_column(col, overflow="fold", min_width=10)
    for col in ("calls", "input", "cache read", "cache write", "output", "reasoning"):
        table.add_column(col, justify="right", no_wrap=True)
    table.add_column("cost (USD)", justify="right", no_wrap=True)
    for r in rows:
        table.add_row(
            *(escape(str(r[b]) if r[b] is not None else "-") for b in by),
            str(r["calls"]),
            *(
                f"{r[f]:,}"
                for f in TOKEN_FIELDS[:1] + TOKEN_FIELDS[2:4] + TOKEN_FIELDS[1:2] + TOKEN_FIELDS[4:]
            ),
            render.cost(r),
        )
    return table


@usage.command(name="reprice")
@click.option("--dry-run", is_flag=True, help="Say what would change; append nothing.")
@json_option
@click.pass_obj
def usage_reprice(cfg: Any, dry_run: bool, as_json: bool) -> None:
    """Recompute the cost of usage records priced with an older genai-prices version (or
    unpriced then) with the installed one, and apply the new costs through the spool
    (`usage.reprice` ops; docs/ops.md). The writer applies them."""
    _note_no_store(cfg)
    out = Client(config_=cfg).reprice_usage(dry_run=dry_run)
    if as_json:
        emit_json(out)
        return
    how = " (dry run: nothing appended)" if dry_run else f" in {len(out['batches'])} op(s)"
    click.echo(
        f"{out['repriced']} record(s) re-priced with {out['price_version']}{how}; "
        f"{out['still_unpriced']} still unpriced; cost change "
        f"{'+' if out['cost_change_usd'] >= 0 else ''}{render.usd(out['cost_change_usd'])}"
    )

"""``quill sessions resume | orphans | delete``: conversation keys, lost keys, deletion on request.

All three go through ``quill.Client`` (the CLI's ``--json`` equals the client's answer) and
every change goes through the spool: adoption is a ``session.create`` that fills the key,
deletion a ``sessions.delete`` (docs/ops.md).
"""

from __future__ import annotations

from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from quill.ops.cli import paging, render
from quill.ops.cli.base import confirm, emit_json, json_option
from quill.ops.client.client import Client
from quill.ops.client.errors import no_key
from quill.store.factory import capabilities


@click.command(name="resume")
@click.option(
    "--key", help="The conversation key (chat id, platform thread …) given at session.create."
)
@click.option(
    "--cwd", type=click.Path(file_okay=False), help="The working directory the session started in."
)
@json_option
@click.pass_obj
def sessions_resume(cfg: Any, key: str | None, cwd: str | None, as_json: bool) -> None:
    """The session to resume for a conversation: the tip of its newest compression chain
    (never a branch, delegate or hidden session). Exit 3 when nothing has the key."""
    if (key is None) == (cwd is None):
        raise click.UsageError("give exactly one of --key or --cwd")
    found = Client(config_=cfg).resume(key=key, cwd=cwd)
    if as_json:
        emit_json(found)
    else:
        click.echo(found["session_id"])
        if len(found["chain"]) > 1:
            click.echo(
                f"compression chain ({len(found['chain'])}): " + " → ".join(found["chain"]),
                err=True,
            )


@click.command(name="orphans")
@click.option(
    "--adopt",
    is_flag=True,
    help="Give each unambiguous orphan its predecessor's key (via the spool).",
)
@click.option(
    "--window",
    "window_s",
    type=click.FloatRange(min=0),
    default=None,
    help="Seconds before an orphan started in which its predecessor must have gone quiet "
    "(default 900).",
)
@click.option("--limit", type=click.IntRange(1, 100_000), default=50, show_default=True)
@paging.after_option
@json_option
@click.pass_obj
def sessions_orphans(
    cfg: Any, adopt: bool, window_s: float | None, limit: int, after: str | None, as_json: bool
) -> None:
    """Sessions with messages but no key (a crash between routing and create), and the
    session each continues when the evidence is unambiguous: a recorded parent link, or
    exactly one keyed session of the same source that went quiet just before it started.
    Ambiguous ones are reported with the reason and left alone. Oldest first, a page of
    --limit at a time (--after CURSOR: the next page); --json prints {"orphans": [...],
    "next": CURSOR or null}, without --json a note on stderr gives the next page's cursor;
    --adopt adopts every unambiguous orphan, listed or not."""
    client = Client(config_=cfg)
    start = paging.decode(after, "orphans", (float, str)) if after is not None else None
    found = sorted(client.orphans(window_s=window_s), key=_orphan_key)
    rows, cursor = paging.page(found, _orphan_key, limit, start, "orphans")
    if adopt:
        adopted = {o["session_id"]: ack for o, ack in client.adopt_orphans(window_s=window_s)}
        for row in rows:
            ack = adopted.get(row["session_id"])
            row["adopted"] = ack is not None
            if ack is not None:
                row["batch"] = ack.batch_id
    if as_json:
        emit_json({"orphans": rows, "next": cursor})
        return
    if not rows:
        paging.no_rows("no orphans" + (" after that cursor" if after else ""))
    else:
        _print_orphans(rows)
    paging.note_next("orphans", limit, cursor)


def _orphan_key(row: dict[str, Any]) -> tuple[float, str]:
    """An orphan's place in the listing: oldest first (``started_at``), then its id."""
    return (row["started_at"] or 0.0, row["session_id"])


def _print_orphans(rows: list[dict[str, Any]]) -> None:
    table = Table(title=f"{len(rows)} orphan(s)", title_justify="left")
    for col in ("session", "source", "msgs", "continues", "key / why not"):
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(
            escape(r["session_id"]),
            escape(r["source"] or ""),
            str(r["messages"]),
            escape(r["predecessor"] or "-"),
            escape(r["key"] if r["predecessor"] else r["reason"])
            + (" (adopted)" if r.get("adopted") else ""),
        )
    render.console().print(table)


@click.command(name="delete")
@click.argument("session_ids", nargs=-1)
@click.option("--key", help="Delete every session of this conversation key instead.")
@click.option(
    "--reason", default="user_request", show_default=True, help="Recorded with the op (≤ 64 chars)."
)
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option(
    "--purge",
    is_flag=True,
    help="Once applied, also remove the content from spool segments, the "
    "quarantine and snapshots (needs a running writer, see --wait).",
)
@click.option(
    "--wait",
    "wait_s",
    type=click.FloatRange(min=0),
    default=60.0,
    show_default=True,
    help="With --purge: seconds to wait for the writer to apply the delete.",
)
@json_option
@click.pass_obj
def sessions_delete(
    cfg: Any,
    session_ids: tuple[str, ...],
    key: str | None,
    reason: str,
    yes: bool,
    purge: bool,
    wait_s: float,
    as_json: bool,
) -> None:
    """Delete sessions with their messages, usage and the attachments no other session
    references — through the spool, like every change. Without --purge their content still
    exists in spool segments, quarantined records and snapshots until retention removes them;
    --purge removes it there too (docs/ops.md, "Deleting a conversation on request")."""
    if session_ids and key is not None:
        raise click.UsageError("give session ids or --key, not both")
    if not session_ids and key is None:
        raise click.UsageError("give the session ids to delete, or --key KEY")
    if purge and not capabilities(cfg).local_file:  # refused before anything is appended
        raise click.UsageError(
            "--purge works on the embedded SQLite store only; delete without --purge"
        )
    confirm(
        f"delete {'the sessions of key ' + repr(key) if key else ', '.join(session_ids)}?",
        yes=yes,
        as_json=as_json,
    )
    client = Client(config_=cfg)
    ids, ack = client.delete_sessions(
        list(session_ids) if session_ids else None, key=key, reason=reason, purge=purge
    )
    if ack is None:
        raise _not_found(key)
    out: dict[str, Any] = {"session_ids": ids, "batch": ack.batch_id, "position": str(ack.position)}
    if purge:
        out["purge"] = client.purge_sessions(ids, after=ack, timeout=wait_s)
    if as_json:
        emit_json(out)
        return
    click.echo(
        f"sessions.delete of {len(ids)} session(s) spooled (batch {ack.batch_id}); "
        + ("applied and purged" if purge else "the writer applies it")
    )
    if purge:
        echo_purge(out["purge"])


def echo_purge(figures: dict[str, Any]) -> None:
    """The human summary of a purge's figures (``ops.purge.procedure.purge``)."""
    click.echo(
        f"purged {figures['records_purged']} record(s) of {len(figures['sessions'])} "
        f"session(s) from {len(figures['segments_rewritten'])} segment(s); quarantine entries: "
        f"{len(figures['quarantine_purged'])}; "
        f"snapshots removed: {len(figures['snapshots_removed'])}, "
        f"compacted: {len(figures['snapshots_compacted'])}, new: {figures['snapshot'] or '-'}"
    )
    scrub = figures.get("store_scrub")
    if scrub:
        click.echo(
            f"live store scrubbed (FTS optimize {scrub.get('optimize_seconds')} s, VACUUM "
            f"{scrub.get('vacuum_seconds')} s, WAL truncated) "
            f"by the {scrub.get('runner', 'writer')}: "
            f"{scrub['bytes_before']} -> {scrub['bytes_after']} bytes in {scrub['seconds']} s"
            + (
                "; a reader blocked its TRUNCATE checkpoint: "
                "`quill jobs run wal_checkpoint --mode truncate` once it is gone"
                if scrub.get("wal_blocked_by_reader")
                else ""
            )
        )
    if figures.get("damaged"):
        click.echo(
            f"not purged: {len(figures['damaged'])} spool line(s) too damaged to tell whose "
            "they are, at "
            f"{', '.join(figures['damaged'][:10])}; they may hold the deleted content "
            "(`quill spool verify` lists them)",
            err=True,
        )


def _not_found(key: str | None) -> Exception:
    return no_key(key)

"""``quill spool status|verify|replay``."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import click

from quill.home import RunDir
from quill.ops.cli import render
from quill.ops.cli.base import emit_json, json_option
from quill.ops.client.errors import InvalidInputError, busy_with
from quill.ops.recover.replay import replay as do_replay
from quill.ops.recover.replay import total_bytes
from quill.ops.recover.replay import verify as do_verify
from quill.ops.status import guard
from quill.spool import Position, Quarantine, SpoolReader
from quill.spool.torn import TORN_SUMMARY
from quill.store.errors import CantOpenError, LeaseHeldError
from quill.store.factory import capabilities
from quill.store.lease import Lease


def _progress(enabled: bool) -> Any:
    return render.progress(enabled, unit="bytes")


@click.group()
def spool() -> None:
    """Inspect, verify and replay the spool."""


@spool.command(name="status")
@json_option
@click.pass_obj
def spool_status(cfg: Any, as_json: bool) -> None:
    """Segments, bytes, records pending, lag (seconds) and quarantined count."""
    found = guard.read_store(cfg, lambda r: r.figures()["cursor"])
    sp = guard.progress(cfg, found, found.value)
    cursor = Position.parse(sp["cursor"]) if sp["cursor"] else None
    data = {
        **sp,
        "store": found.state if found.ok else f"{found.state}: {found.error}",
        "quarantined": Quarantine(cfg.spool_dir).count(),
        "torn_writes": Quarantine(cfg.spool_dir).torn_count(),
    }
    data["records_pending"] = (
        sum(1 for _ in SpoolReader(cfg.spool_dir).read(cursor or Position(1, 0), max_bytes=1 << 40))
        if sp["cursor_source"] != "unknown"
        else None
    )
    if as_json:
        emit_json(data)
        return
    click.echo(
        f"segments {data['segments']}, {data['bytes']} bytes, end {data['end']}, "
        f"cursor {data['cursor']}"
    )
    click.echo(f"pending  {data['records_pending']} record(s), {guard.describe_progress(data)}")
    click.echo(
        f"quarantined {data['quarantined']} (in {cfg.spool_dir / 'quarantine'})"
        + (f", of which {data['torn_writes']} {TORN_SUMMARY}" if data["torn_writes"] else "")
    )


@spool.command(name="verify")
@json_option
@click.pass_context
def spool_verify(ctx: click.Context, as_json: bool) -> None:
    """Check every record's checksum; exit 1 if any is damaged. Lines proven to be a
    producer's unacknowledged partial write (torn-write) are listed apart and are not damage."""
    cfg = ctx.obj
    first = Position(1, 0)
    with _progress(not as_json) as bar:
        task = bar.add_task("verifying", total=total_bytes(cfg.spool_dir, first))
        result = do_verify(cfg.spool_dir, lambda n: bar.advance(task, n))
    if as_json:
        emit_json(result)
    else:
        click.echo(
            f"{result['records']} record(s) checked, {len(result['damaged'])} damaged, "
            f"end {result['end']}"
            + (
                " (a partial tail is still being written or is torn)"
                if result["partial_tail"]
                else ""
            )
        )
        for d in result["damaged"]:
            click.echo(f"  {d['position']}: {d['reason']}: {d['detail']}")
        if result["torn_writes"]:
            click.echo(f"{len(result['torn_writes'])} %s:" % TORN_SUMMARY)
            for d in result["torn_writes"]:
                click.echo(f"  {d['position']}: {d['reason']}: {d['detail']}")
    ctx.exit(1 if result["damaged"] else 0)


@spool.command(name="replay")
@click.option(
    "--from", "from_", metavar="SEG:OFFSET", help="Start here (default: the target store's cursor)."
)
@click.option(
    "--into",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Replay into this store file instead of the live one (created if missing).",
)
@json_option
@click.pass_context
def spool_replay(ctx: click.Context, from_: str | None, into: Path | None, as_json: bool) -> None:
    """Apply spool records into a store, idempotently (nothing is applied twice).

    Refused records are quarantined with the store they were refused by: the live store's
    quarantine for a live replay, ``<FILE>.quarantine/`` beside the file with --into.
    Exit 1 when any record was quarantined."""
    try:
        start = Position.parse(from_) if from_ else None
    except ValueError:
        raise click.BadParameter(
            f"expected SEG:OFFSET, got {from_!r}", param_hint="--from"
        ) from None
    cfg = ctx.obj
    if into is None and not capabilities(cfg).local_file:  # refused before anything is written
        raise InvalidInputError(
            "a live replay writes the embedded SQLite store; "
            "this data dir uses the PostgreSQL store",
            hint="`quill recover` replays this host's spool into the PostgreSQL store from its "
            "cursor; `--into FILE` replays into a new SQLite file",
        )
    if into is not None and into.resolve() == cfg.state_db.resolve():
        into = None  # --into the live store is a live replay (lease, live quarantine)
    lease = None
    if into is None:  # the live store: only with the writer lease, i.e. with the fleet stopped
        try:
            lease = Lease(RunDir(cfg.home).lock("writer")).acquire()
        except LeaseHeldError as exc:
            raise busy_with(
                exc,
                "cannot replay into the live store",
                "stop `quill run` first (Ctrl-C; `quill status` shows it), "
                "or replay --into a new file",
            ) from None
    target = into or cfg.state_db
    try:
        with _progress(not as_json) as bar:
            task = bar.add_task(
                "replaying", total=total_bytes(cfg.spool_dir, start or Position(1, 0))
            )
            result = do_replay(
                cfg.spool_dir,
                target,
                start,
                chunk_rows=cfg.chunk_rows,
                synchronous=cfg.synchronous,
                progress=lambda n: bar.advance(task, n),
                quarantine=Quarantine.for_store(into) if into is not None else None,
            )
    except CantOpenError as exc:
        raise click.ClickException(f"cannot open {target}: {exc}") from exc
    finally:
        if lease:
            lease.release()
    result["into"] = str(target)
    if as_json:
        emit_json(result)
    else:
        click.echo(
            f"replayed {result['from']} → {result['to']} into {target}: "
            f"{result['applied']} applied, "
            f"{result['duplicates']} already there, {result['rejected']} quarantined, "
            f"{result['rows']} message rows, {result['seconds']} s"
        )
        if result["rejected"]:
            click.echo(
                f"quill: {result['rejected']} record(s) quarantined in {result['quarantine']}; "
                f"`quill spool quarantine{' --store ' + shlex.quote(str(into)) if into else ''}"
                " list` shows them",
                err=True,
            )
    ctx.exit(1 if result["rejected"] else 0)


from quill.ops.cli.quarantine import adopt, quarantine  # noqa: E402  (kept in their own module)

spool.add_command(quarantine)
spool.add_command(adopt)


@spool.command(name="purge")
@click.argument("session_ids", nargs=-1, required=True)
@json_option
@click.pass_obj
def spool_purge(cfg: Any, session_ids: tuple[str, ...], as_json: bool) -> None:
    """Remove deleted sessions' content from spool segments, the quarantine and snapshots
    (what `sessions delete --purge` does once the delete is applied; re-run it after an
    interrupted purge: every step is idempotent)."""
    from quill.ops.cli.session_keys import echo_purge
    from quill.ops.client.client import Client

    figures = Client(config_=cfg).purge_sessions(list(session_ids))
    if as_json:
        emit_json(figures)
    else:
        echo_purge(figures)

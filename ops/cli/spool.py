"""``quill spool status|verify|replay``."""

from __future__ import annotations

import shlex
import time
from pathlib import Path
from typing import Any

import click

from quill.home import RunDir
from quill.ops import human
from quill.ops.cli import render
from quill.ops.cli.base import emit_json, json_option
from quill.ops.client.errors import Exit, InvalidInputError, busy_with
from quill.ops.recover.replay import replay as do_replay
from quill.ops.recover.replay import total_bytes
from quill.ops.recover.replay import verify as do_verify
from quill.ops.status import guard
from quill.spool import Position, Quarantine, SpoolReader
from quill.spool.integrity import assess
from quill.spool.torn import TORN_SUMMARY
from quill.store.errors import CantOpenError, LeaseHeldError
from quill.store.factory import capabilities
from quill.store.lease import Lease


def _progress(enabled: bool) -> Any:
    return render.progress(enabled, unit="bytes")


@click.group()
def spool() -> None:
    """Inspect, verify and replay the spool."""


def _cursor(cfg: Any) -> Position | None:
    """This spool's applied cursor: the store's, else the one its writer published, else
    None (``guard.progress``)."""
    found = guard.read_store(cfg, lambda r: r.figures()["cursor"])
    sp = guard.progress(cfg, found, found.value)
    return Position.parse(sp["cursor"]) if sp["cursor"] else None


@spool.command(name="status")
@json_option
@click.pass_context
def spool_status(ctx: click.Context, as_json: bool) -> None:
    """Segments, bytes, records pending, lag (seconds; from the store's cursor, else the one
    the writer last published, else unknown), quarantined count and the segments' integrity
    (``spool.integrity``, without reading every record: `spool verify` does). Exit 1 when the
    segments show acknowledged records lost."""
    cfg = ctx.obj
    found = guard.read_store(cfg, lambda r: r.figures()["cursor"])
    sp = guard.progress(cfg, found, found.value)
    cursor = Position.parse(sp["cursor"]) if sp["cursor"] else None
    data = {
        **sp,
        "store": found.state if found.ok else f"{found.state}: {found.error}",
        "quarantined": Quarantine(cfg.spool_dir).count(),
        "torn_writes": Quarantine(cfg.spool_dir).torn_count(),
        "integrity": assess(cfg.spool_dir, cursor=cursor).as_dict(),
    }
    data["records_pending"] = (
        sum(
            1
            for _ in SpoolReader(cfg.spool_dir, max_line=cfg.max_record_bytes).read(
                cursor or Position(1, 0), max_bytes=1 << 40
            )
        )
        if sp["cursor_source"] != "unknown"
        else None
    )
    if as_json:
        emit_json(data)
        ctx.exit(int(Exit.FAILED) if data["integrity"]["lost"] else 0)
    click.echo(
        f"segments {data['segments']}, {data['bytes']} bytes, end {data['end']}, "
        f"cursor {data['cursor']}"
    )
    click.echo(f"pending  {data['records_pending']} record(s), {guard.describe_progress(data)}")
    click.echo(
        f"quarantined {data['quarantined']} (in {cfg.spool_dir / 'quarantine'})"
        + (f", of which {data['torn_writes']} {TORN_SUMMARY}" if data["torn_writes"] else "")
    )
    click.echo(f"integrity {data['integrity']['summary']}")
    if data["integrity"]["lost"]:
        ctx.exit(int(Exit.FAILED))


@spool.command(name="verify")
@json_option
@click.pass_context
def spool_verify(ctx: click.Context, as_json: bool) -> None:
    """Check every record's checksum and every producer's sequence numbers; exit 1 when
    acknowledged records cannot be accounted for (a damaged line, a segment missing or cut
    short, a gap in a producer's sequence numbers), with what is missing by producer. Lines
    that are a torn record (torn-write: a producer killed mid-write, or the spool cut there)
    are listed apart and are not counted as damage."""
    cfg = ctx.obj
    first = Position(1, 0)
    # Against the store's cursor, as status and doctor judge it: segments cut shorter than it
    # or gone from it on lost records the segments alone do not show.
    cursor = _cursor(cfg)
    with _progress(not as_json) as bar:
        task = bar.add_task("verifying", total=total_bytes(cfg.spool_dir, first))
        result = do_verify(
            cfg.spool_dir,
            lambda n: bar.advance(task, n),
            cursor=cursor,
            max_line=cfg.max_record_bytes,
        )
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
            click.echo(f"{len(result['torn_writes'])} {TORN_SUMMARY}:")
            for d in result["torn_writes"]:
                click.echo(f"  {d['position']}: {d['reason']}: {d['detail']}")
        for producer, n in result["missing_by_producer"].items():
            click.echo(f"  producer {producer}: {n} record(s) missing (sequence gaps)")
        click.echo(result["summary"])
    ctx.exit(1 if result["lost"] else 0)


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
                pack_min_bytes=cfg.pack_min_bytes,
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
            f"{human.count(result['rows'], 'message row')}, {result['seconds']} s"
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


@spool.command(name="reidentify")
@json_option
@click.pass_obj
def spool_reidentify(cfg: Any, as_json: bool) -> None:
    """Give this data dir's spool a new id (a copied data dir shares the original's).

    The writer then applies this spool once under the new id, from the start of its spool:
    the store's cursor for the old id is another spool's progress, not this one's, so it is
    not carried over; records the store already holds (applied by the original before the
    copy, or by this copy) are skipped by batch id, so nothing acknowledged is lost or doubled.
    Run with the fleet stopped; only a shared (PostgreSQL) store uses spool ids."""
    from quill.spool import identity, retention
    from quill.store.factory import location, open_store
    from quill.store.postgres import claims
    from quill.store.postgres.apply import read_cursor

    if not capabilities(cfg).cluster:
        raise InvalidInputError(
            "this data dir uses the embedded SQLite store, which has no spool id to share",
            hint="spool ids name a data dir in a shared PostgreSQL store ([store] url)",
        )
    try:
        lease = Lease(RunDir(cfg.home).lock("writer")).acquire()
    except LeaseHeldError as exc:
        raise busy_with(
            exc, "cannot change the spool id while a writer runs", "stop `quill run` first"
        ) from None
    try:
        old = identity.load_or_create(cfg.spool_id_path)
        token = identity.holder(cfg.spool_id_path)["token"]
        new = identity.new_id()
        store = open_store(cfg, spool_id=old)  # the server must answer before anything changes
        try:
            # This data dir's own claim on the old id (it was the holder) goes; a claim
            # another data dir holds stays theirs.
            released = store.run_job(claims.release, old, token)
            old_cursor = store.run_job(read_cursor, old)
        finally:
            store.close()
        with open(cfg.spool_id_path.with_name("spool-id.history"), "a", encoding="utf-8") as f:
            f.write(f"{time.time():.3f} {old} -> {new}\n")
        identity.replace(cfg.spool_id_path, new)
        # Segments collected before may have been applied into this store under the old id:
        # then (its cursor is at or past the oldest one left) the new id may start there.
        # Otherwise they went into another store (the SQLite one before the switch) and the
        # writer's refusal of a cursor-less start stands (export/import, --accept-loss).
        first = retention.collected_before(cfg.spool_dir)
        carried = first is not None and old_cursor is not None and old_cursor >= (first, 0)
        if carried:
            RunDir(cfg.home).accept_start(location(cfg), new, first)
    finally:
        lease.release()
    data = {
        "old": old,
        "new": new,
        "released_claim": released,
        # None: the writer refuses to start the new id (HistoryNotInSpoolError) until the
        # history is carried over and the start accepted.
        "applied_from": "1:0" if first is None else (f"{first}:0" if carried else None),
    }
    if as_json:
        emit_json(data)
        return
    click.echo(f"spool id {old} → {new}")
    if data["applied_from"] is None:
        click.echo(
            f"quill: WARNING: the spool starts at segment {first} and this store never applied "
            "the segments before it: the writer refuses to start until their sessions are "
            "carried over (`quill import`) and the loss accepted (`quill recover "
            "--accept-loss`)",
            err=True,
        )
        return
    click.echo(
        "the writer applies this spool under the new id from its start when it next runs "
        "(`quill run`); records the store already holds are skipped by batch id"
    )

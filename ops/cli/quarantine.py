"""``quill spool quarantine list|show|retry|drop`` and ``quill spool adopt``: managing records
the writer could not apply, and records a producer wrote where the writer never reads, without
touching files by hand.

* ``retry ID`` re-appends the entry's op through the spool (the writer applies or refuses it
  like any other record) and moves the entry to the audit log; ``drop ID`` only moves it to
  the audit log (``quarantine/audit.jsonl`` keeps the whole entry, who and when).
* A refused batch id is decided for good (``rejected_batches``), so a retry appends under a
  new batch id; an ``unsupported-op`` refusal is not decided, so its retry keeps the id (a
  later replay of the original line and the retry then apply once).
* Invariant: a retry is idempotent. Its new batch id is derived from the quarantined record
  itself (``retry_batch_id``: its position and raw line), never drawn at random, so a retry
  run again — killed between its append and its resolve, or an entry re-opened by an older
  Quill — appends the same batch with the same op and data, which the store applies once.
"""

from __future__ import annotations

import getpass
import json
import os
import socket
from pathlib import Path
from typing import Any

import click

from quill.ops.cli import paging
from quill.ops.cli.base import emit_json, json_option
from quill.ops.client.errors import InvalidInputError, NotFoundError, QuillError
from quill.ops.transfer.ingest import stable_batch_id
from quill.spool import Quarantine, Spool
from quill.spool.errors import DamagedRecordError
from quill.spool.lines import OVER_LIMIT, OverLimit, iter_lines, over_limit_detail
from quill.spool.quarantine import UNREADABLE_ENTRY
from quill.spool.record import decode
from quill.spool.segments import Position

#: Reasons that mean the line itself is damaged (not the op's data): retrying trusts bytes
#: that failed their checksum or shape check, so it needs --force.
DAMAGE_REASONS = frozenset(
    {"checksum", "nul-bytes", "bad-json", "version", "shape", "damaged", UNREADABLE_ENTRY}
)


def _actor() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return f"user:{user}@{socket.gethostname()}"


def _quarantine(ctx: click.Context) -> Quarantine:
    store = ctx.meta.get("quarantine_store")
    return Quarantine.for_store(store) if store else Quarantine(ctx.obj.spool_dir)


def _entry(q: Quarantine, entry_id: str) -> dict[str, Any]:
    try:
        return q.get(entry_id)
    except KeyError:
        raise NotFoundError(
            f"no quarantined entry {entry_id!r} in {q.dir}",
            hint="`quill spool quarantine list` shows the ids",
        ) from None


def retry_batch_id(entry: dict[str, Any]) -> str:
    """The batch id of ``entry``'s retry: a UUIDv5 over its position and raw line, the same for
    every retry of this record, and another for a retry of the retry's own refusal (a new
    position), so a refused retry can itself be retried."""
    return stable_batch_id("quarantine-retry", entry["position"], entry["raw"])


def retry_op(entry: dict[str, Any], *, force: bool) -> tuple[str, dict[str, Any], str]:
    """(op, data, batch id) for re-appending ``entry``: the original batch id for an
    ``unsupported-op`` refusal (never decided), else ``retry_batch_id``. Raises
    ``InvalidInputError`` when the raw line holds no complete op, or is damaged and not
    ``force``."""
    if entry["reason"] in DAMAGE_REASONS and not force:
        raise InvalidInputError(
            f"entry {entry['id']} was quarantined as damaged ({entry['reason']}): "
            f"{entry['detail']}",
            hint="check `show` and retry with --force to trust its bytes",
        )
    try:
        body = decode(entry["raw"].encode())
    except DamagedRecordError:
        try:
            body = json.loads(entry["raw"])
        except ValueError:
            body = None
    if (
        not isinstance(body, dict)
        or not isinstance(body.get("op"), str)
        or not isinstance(body.get("data"), dict)
    ):
        raise InvalidInputError(
            f"entry {entry['id']} holds no complete op to retry (torn or unreadable line)",
            hint="`quill spool quarantine drop` it once you have recovered what you need",
        )
    keep = (
        body.get("batch")
        if entry["reason"] == "unsupported-op" and isinstance(body.get("batch"), str)
        else None
    )
    return body["op"], body["data"], keep or retry_batch_id(entry)


@click.group(name="quarantine")
@click.option(
    "--store",
    "store",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The quarantine of this store file (a `spool replay --into` target) "
    "instead of the live one.",
)
@click.pass_context
def quarantine(ctx: click.Context, store: Path | None) -> None:
    """List, show, retry or drop quarantined records (the live store's by default)."""
    ctx.meta["quarantine_store"] = store


@quarantine.command(name="list")
@click.option("--limit", type=click.IntRange(1, 100_000), default=100, show_default=True)
@paging.after_option
@json_option
@click.pass_context
def q_list(ctx: click.Context, limit: int, after: str | None, as_json: bool) -> None:
    """Quarantined records in spool order: id (position), reason, op, batch, when; a page of
    --limit at a time (--after CURSOR: the next page). --json prints {"quarantine": DIR,
    "entries": [...], "uncommitted": [...], "next": CURSOR or null}; without --json a note on
    stderr gives the next page's cursor. Refusals whose chunk failed to commit are not
    quarantined: listed apart ("uncommitted", first page only)."""
    q = _quarantine(ctx)
    start = paging.decode(after, "quarantine", (int, int)) if after is not None else None
    entries, cursor = paging.page(q.entries(), _entry_key, limit, start, "quarantine")
    rows = [
        {
            k: e.get(k)
            for k in ("id", "reason", "op", "batch", "quarantined_at", "detail", "raw_bytes")
        }
        for e in entries
    ]
    # Refusals whose chunk did not commit (Quarantine.withdraw): not quarantined, shown apart.
    withdrawn = [
        {k: e.get(k) for k in ("id", "reason", "op", "batch", "uncommitted")}
        for e in (q.uncommitted() if after is None else [])
    ]
    if as_json:
        emit_json(
            {"quarantine": str(q.dir), "entries": rows, "uncommitted": withdrawn, "next": cursor}
        )
        return
    if not rows:
        paging.no_rows(f"no quarantined records{' after that cursor' if after else ''} in {q.dir}")
    else:
        click.echo(f"{len(rows)} quarantined record(s) in {q.dir}")
        for r in rows:
            click.echo(f"  {r['id']:<16} {r['reason']:<22} {r['op'] or '-':<18} {r['detail']}")
    if withdrawn and not as_json:
        click.echo(
            f"{len(withdrawn)} refusal(s) not committed (the chunk failed; not quarantined: "
            "the writer decides again when it re-reads the record):"
        )
        for r in withdrawn:
            click.echo(f"  {r['id']:<16} {r['reason']:<22} {r['uncommitted']['error']}")
    paging.note_next("quarantined records", limit, cursor)


def _entry_key(entry: dict[str, Any]) -> tuple[int, int]:
    """A quarantine entry's place in spool order (its position: segment, offset)."""
    return tuple(Position.parse(entry["id"]))


@quarantine.command(name="show")
@click.argument("entry_id", metavar="ID")
@json_option
@click.pass_context
def q_show(ctx: click.Context, entry_id: str, as_json: bool) -> None:
    """One quarantined record, with its raw line."""
    entry = _entry(_quarantine(ctx), entry_id)
    if as_json:
        emit_json(entry)
        return
    for key in ("id", "reason", "detail", "op", "batch", "quarantined_at", "raw_bytes"):
        click.echo(f"{key:<15} {entry.get(key)}")
    click.echo(f"raw            {entry['raw']}")


@quarantine.command(name="retry")
@click.argument("entry_id", metavar="ID")
@click.option(
    "--force", is_flag=True, help="Retry a line quarantined as damaged (its bytes failed a check)."
)
@json_option
@click.pass_context
def q_retry(ctx: click.Context, entry_id: str, force: bool, as_json: bool) -> None:
    """Re-append the record's op through the spool; the writer applies (or refuses) it again."""
    if ctx.meta.get("quarantine_store"):
        raise InvalidInputError(
            "retry appends to the live spool; a scratch store's records are replayed, not retried",
            hint="replay again into the scratch file, or drop the entry",
        )
    q = _quarantine(ctx)
    entry = _entry(q, entry_id)
    if entry.get("raw_file"):  # an over-limit line: ``raw`` is its head, the file all of it
        entry["raw"] = (q.dir / entry["raw_file"]).read_bytes().decode("utf-8", "replace")
    op, data, batch = retry_op(entry, force=force)
    with Spool.for_settings(ctx.obj) as sp:
        ack = sp.append(op, data, batch_id=batch)
    line = q.resolve(entry_id, "retry", _actor(), batch=ack.batch_id, position=str(ack.position))
    result = {"id": line["id"], "op": op, "batch": ack.batch_id, "position": str(ack.position)}
    if as_json:
        emit_json(result)
    else:
        click.echo(
            f"retried {result['id']} as {op} batch {ack.batch_id} at {ack.position}; "
            "`quill spool quarantine list` shows it again if the writer refuses it"
        )


@quarantine.command(name="drop")
@click.argument("entry_id", metavar="ID")
@json_option
@click.pass_context
def q_drop(ctx: click.Context, entry_id: str, as_json: bool) -> None:
    """Remove a record from the quarantine; the whole entry is kept in audit.jsonl."""
    q = _quarantine(ctx)
    _entry(q, entry_id)
    line = q.resolve(entry_id, "drop", _actor())
    if as_json:
        emit_json({"id": line["id"], "dropped": True, "audit": str(q.dir / "audit.jsonl")})
    else:
        click.echo(f"dropped {line['id']}; the entry is kept in {q.dir / 'audit.jsonl'}")


@click.command(name="adopt")
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@json_option
@click.pass_context
def adopt(ctx: click.Context, path: Path, as_json: bool) -> None:
    """Append the records of a stray segment file (found by `quill doctor`) to the spool.

    Batch ids are kept, so a record the store already holds is not applied twice. The file is
    renamed to PATH.adopted; damaged lines are listed and stay in it. Exit 1 if any was damaged."""
    if path.resolve().parent == ctx.obj.spool_dir.resolve():
        raise InvalidInputError(f"{path} is a segment of the live spool already")
    adopted, damaged = 0, []
    with Spool.for_settings(ctx.obj) as sp:
        limit = ctx.obj.max_record_bytes
        for lineno, (_, line) in enumerate(iter_lines(path, limit), 1):
            if isinstance(line, OverLimit):  # never read whole; it stays in the file
                detail = over_limit_detail(line.size, limit)
                damaged.append({"line": lineno, "reason": OVER_LIMIT, "detail": detail})
                continue
            if not line.strip():
                continue
            try:
                rec = decode(line if line.endswith(b"\n") else line + b"\n")
                sp.append(
                    rec["op"],
                    rec["data"],
                    batch_id=rec["batch"] if isinstance(rec["batch"], str) else None,
                )
                adopted += 1
            except (DamagedRecordError, QuillError, ValueError, TypeError) as exc:
                damaged.append(
                    {
                        "line": lineno,
                        "reason": getattr(exc, "reason", type(exc).__name__),
                        "detail": str(exc),
                    }
                )
    os.rename(path, path.with_name(path.name + ".adopted"))
    result = {
        "path": str(path),
        "adopted": adopted,
        "damaged": damaged,
        "renamed_to": path.name + ".adopted",
    }
    if as_json:
        emit_json(result)
    else:
        click.echo(
            f"adopted {adopted} record(s) from {path} into {ctx.obj.spool_dir}; "
            f"renamed to {result['renamed_to']}"
        )
        for d in damaged:
            click.echo(f"  line {d['line']}: {d['reason']}: {d['detail']}")
    ctx.exit(1 if damaged else 0)

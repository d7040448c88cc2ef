"""``quill export``: one session, a filter or everything, as Quill ops, Markdown, OpenAI chat
JSONL or ShareGPT (ops/transfer/export.py, export_render.py)."""

from __future__ import annotations

import json
from typing import Any

import click

from quill.ops.cli import render
from quill.ops.cli.params import EPOCH
from quill.ops.client.errors import no_key, no_session
from quill.ops.client.stores import lost_store, open_reader, where
from quill.ops.transfer import export
from quill.ops.transfer.export_render import markdown, openai_chat, sharegpt
from quill.store.errors import CantOpenError
from quill.store.read.reader import Reader


def write_export(
    cfg: Any,
    out: Any,
    fmt: str,
    session_id: str | None,
    since: float | None,
    source: str | None,
    key: str | None,
) -> int:
    """Write the export to ``out`` (a text stream); returns the number of sessions. Raises
    ``NotFoundError`` for a named session or key that does not exist."""
    try:
        reader = open_reader(cfg)
    except CantOpenError:
        lost = lost_store(cfg)
        if lost is not None:
            raise lost from None
        if session_id is not None:
            raise no_session(session_id, store_missing=True) from None
        if key is not None:
            raise no_key(key, store_missing=True) from None
        click.echo(f"quill: no store at {where(cfg)} yet: nothing to export", err=True)
        if fmt == "quill":
            out.write(json.dumps(export.header(0)) + "\n")
        return 0
    with reader as r:
        ids = export.select_sessions(r, session_id, since=since, source=source, key=key)
        if session_id is not None and not ids:
            raise no_session(session_id)
        # A key that names no session is an error, not an empty export (its filters may still
        # leave nothing of a key that exists: that export is empty).
        if key is not None and not ids and not export.select_sessions(r, key=key):
            raise no_key(key)
        if fmt == "quill":
            out.write(json.dumps(export.header(len(ids))) + "\n")
        # The bar is on stderr, shown only on a terminal, and not when the export itself goes
        # to that terminal (the two would interleave).
        to_terminal = getattr(out, "isatty", lambda: False)()
        with render.progress(len(ids) > 1 and not to_terminal) as bar:
            task = bar.add_task("exporting", total=len(ids))
            for n, sid in enumerate(ids):
                _write_session(r, out, fmt, n, sid)
                bar.advance(task)
    return len(ids)


def _write_session(r: Reader, out: Any, fmt: str, n: int, sid: str) -> None:
    """One session (the ``n``-th of the export) in ``fmt``."""
    if fmt == "quill":
        for op in export.quill_ops(r, sid):
            out.write(json.dumps(op, ensure_ascii=False) + "\n")
    elif fmt == "markdown":
        out.write(("\n---\n\n" if n else "") + markdown(r, sid) + "\n")
    else:
        item = openai_chat(r, sid) if fmt == "openai" else sharegpt(r, sid)
        out.write(json.dumps(item, ensure_ascii=False) + "\n")


@click.command(name="export")
@click.argument("session_id", required=False)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(export.FORMATS),
    default="quill",
    show_default=True,
    help="quill = op JSONL `quill import` takes back; markdown; "
    "openai = chat JSONL (model view); sharegpt.",
)
@click.option(
    "--since",
    type=EPOCH,
    help="Only sessions last active at or after (newest message, else start; epoch s or ISO date).",
)
@click.option("--source", help="Only sessions from this source.")
@click.option("--key", help="Only sessions of this conversation key.")
@click.option(
    "-o",
    "--output",
    type=click.File("w", encoding="utf-8"),
    default="-",
    show_default=True,
    help="File to write.",
)
@click.pass_obj
def export_cmd(
    cfg: Any,
    session_id: str | None,
    fmt: str,
    since: float | None,
    source: str | None,
    key: str | None,
    output: Any,
) -> None:
    """Export one session, the sessions matching --since/--source/--key, or everything.
    A Quill export imported into an empty data dir gives identical audit views, states,
    lineage, usage and attachments."""
    count = write_export(cfg, output, fmt, session_id, since, source, key)
    if output.name != "<stdout>":
        click.echo(f"exported {count} session(s) to {output.name}", err=True)

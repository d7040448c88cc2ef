"""``quill import``: transcript files and folders into the spool, with a progress bar."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.markup import escape

from quill.ops.cli import render
from quill.ops.cli.base import emit_json, json_option
from quill.ops.client.errors import Exit, InvalidInputError, from_exception
from quill.ops.importers import iter_transcript_files
from quill.ops.importers.source import Source
from quill.ops.transfer.export_reimport import import_export, is_quill_export
from quill.ops.transfer.import_spool import import_file, open_store_view
from quill.ops.transfer.pending_deletes import pending_deletes
from quill.spool import Spool, SpoolError


@click.command(name="import")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@json_option
@click.pass_context
def import_(ctx: click.Context, paths: tuple[Path, ...], as_json: bool) -> None:
    """Import transcript files or folders (Claude Code, Codex, Gemini CLI, GitHub Copilot CLI,
    opencode exports, ShareGPT/Hermes, OpenAI chat, OpenHands, SWE-agent, aider chat history;
    docs/importers.md) and Quill's own exports (`quill export`).

    The format is detected per file. Re-importing is cheap and safe: only messages the store
    does not hold yet are spooled ("0 new" otherwise). Bad lines are reported (file, line,
    reason) and skipped; the rest of the file is imported. Exits 1 when any file was not
    recognised (each is named).
    """
    cfg = ctx.obj
    skipped_md: list[Path] = []
    files = list(iter_transcript_files(paths, skipped_md))
    report: list[dict[str, Any]] = []
    con = render.console()
    store = open_store_view(cfg)
    try:
        with (
            Spool.for_settings(cfg) as spool,
            render.progress(not as_json) as progress,
        ):
            pending = pending_deletes(spool.dir, store)  # once: the files below add no deletes
            task = progress.add_task("importing", total=len(files))
            for path in files:
                try:
                    with Source.open(path) as src:  # one version, read from one descriptor
                        if is_quill_export(src):  # `quill export` output: its ops as they are
                            report.append(import_export(spool, src, store))
                        else:
                            report.append(import_file(spool, src, store, pending).as_dict())
                except ValueError as exc:
                    raise InvalidInputError(
                        f"{path}: {exc}; what was read before it was spooled"
                    ) from exc
                except MemoryError as exc:  # a line larger than this process may allocate
                    raise InvalidInputError(
                        f"{path}: out of memory importing it (a line too large for this "
                        "process's memory); what was read before it was spooled"
                    ) from exc
                except SpoolError as exc:
                    error = from_exception(exc)
                    if error is None:  # every spool error has its public class: never taken
                        raise
                    error.message = f"{path}: {error.message}"
                    raise error from exc
                progress.advance(task)
    finally:
        if store is not None:
            store.close()
    rejected = [e["path"] for e in report if e["format"] is None]
    # Rows the store could only refuse (another store's session of the same id): not spooled,
    # and the import is not a success.
    conflicts = sum(p["kind"] == "conflict" for e in report for p in e["problems"])
    if skipped_md:  # on stderr, so --json output stays one JSON value
        click.echo(
            f"quill: skipped {len(skipped_md)} .md file(s) in the folders "
            "(documentation, not transcripts or aider chat histories): "
            + ", ".join(str(p) for p in skipped_md),
            err=True,
        )
    if as_json:
        emit_json(report)
        ctx.exit(Exit.FAILED if rejected or conflicts or not report else Exit.OK)
    for e in report:
        path = escape(e["path"])
        if e["format"] is None:
            con.print(f"[red]rejected[/red] {path}: format not recognised")
            continue
        from_file = e["new"] - e["new_from_compactions"]
        con.print(
            f"{e['format']:<12} {path}: {e['sessions']} session(s); "
            f"{e['messages']} message(s) read: "
            f"{from_file} new, {e['already_stored']} already stored"
            + (
                f"; {e['new_from_compactions']} compaction summary message(s) new"
                if e["new_from_compactions"]
                else ""
            )
        )
        for p in e["problems"]:
            where = f"{path}:{p['line']}" if p["line"] is not None else path
            con.print(f"  [yellow]{p['kind']}[/yellow] {where}: {escape(p['reason'])}")
    total = sum(e["new"] for e in report)
    stored = sum(e["already_stored"] for e in report)
    recognised = len(report) - len(rejected)
    from quill.home import RunDir

    running = RunDir(cfg.home).fleet_running()
    con.print(
        f"spooled {total} new message(s) from {recognised} file(s)"
        + (f" ({stored} already stored)" if stored else "")
        + "; "
        + ("the running fleet applies them" if running else "`quill run` applies them")
    )
    if conflicts:
        con.print(
            f"[red]{conflicts} part(s) not imported: their sessions hold other messages in this "
            "store (listed above as conflict)[/red]"
        )
    if rejected:
        con.print(
            f"[red]{len(rejected)} file(s) not imported (format not recognised):[/red] "
            + ", ".join(escape(r) for r in rejected)
        )
    if rejected or conflicts:
        ctx.exit(Exit.FAILED)

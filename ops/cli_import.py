"""``quill import``: transcript files and folders into the spool, with a progress bar."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from rich.markup import escape

from quill.spool import Spool, SpoolError
from quill.store.lease import holder_alive, read_holder

from . import ingest, render
from .cli_base import emit_json, json_option
from .errors import Exit, from_exception
from .importers import iter_transcript_files, parse_file


@click.command(name="import")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@json_option
@click.pass_context
def import_(ctx: click.Context, paths: tuple[Path, ...], as_json: bool) -> None:
    """Import transcript files or folders (Claude Code, Codex, ShareGPT/Hermes, OpenAI chat).

    The format is detected per file. Re-importing is safe: nothing is duplicated. Bad lines
    are reported (file, line, reason) and skipped; the rest of the file is imported.
    """
    cfg = ctx.obj
    files = list(iter_transcript_files(paths))
    report: list[dict[str, Any]] = []
    con = render.console()
    with Spool(cfg.spool_dir, segment_bytes=cfg.segment_bytes) as spool, \
            render.progress(not as_json) as progress:
        task = progress.add_task("importing", total=len(files))
        for path in files:
            parsed = parse_file(path)
            entry = {"path": str(path), "format": parsed.format, "sessions": len(parsed.sessions),
                     "skipped": None if parsed.format else "format not recognised",
                     "messages": sum(len(s.messages) for s in parsed.sessions),
                     "session_ids": [s.session["session_id"] for s in parsed.sessions],
                     "problems": [{"line": p.line, "kind": p.kind, "reason": p.reason} for p in parsed.problems]}
            try:
                for s in parsed.sessions:
                    ingest.append_all(spool, ingest.session_ops(s.session, s.messages))
            except SpoolError as exc:
                error = from_exception(exc)
                error.message = f"{path}: {error.message}"
                raise error from exc
            report.append(entry)
            progress.advance(task)
    if as_json:
        emit_json(report)
        ctx.exit(Exit.OK if any(e["format"] for e in report) else Exit.FAILED)
    for e in report:
        path = escape(e["path"])
        if e["format"] is None:
            con.print(f"[dim]skipped[/dim] {path}: format not recognised")
            continue
        con.print(f"{e['format']:<12} {path}: {e['sessions']} session(s), {e['messages']} message(s)")
        for p in e["problems"]:
            con.print(f"  [yellow]{p['kind']}[/yellow] {path}:{p['line']}: {escape(p['reason'])}")
    total = sum(e["messages"] for e in report)
    recognised = sum(1 for e in report if e["format"])
    running = holder_alive(read_holder(cfg.run_dir / "fleet.lock"))
    con.print(f"spooled {total} message(s) from {recognised} file(s); "
              + ("the running fleet applies them" if running else "`quill run` applies them"))
    if not recognised:
        ctx.exit(Exit.FAILED)

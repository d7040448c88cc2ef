"""Read commands of the CLI: ``sessions list|show``, ``search``, ``status``."""

from __future__ import annotations

from typing import Any

import click
from rich import filesize

from quill.home import WriterStatus
from quill.ops.cli import render
from quill.ops.cli.base import emit_json, json_option
from quill.ops.cli.params import EPOCH, UTF8, YESNO
from quill.ops.client.client import Client
from quill.ops.client.errors import Exit, NotFoundError
from quill.ops.client.stores import open_reader, where
from quill.ops.status import health
from quill.spool.torn import TORN_SUMMARY
from quill.store.apply.normalize import ROLES
from quill.store.errors import CantOpenError
from quill.store.factory import capabilities
from quill.store.read.reader import Reader
from quill.store.search import run as search_mod

_LIST_HINT = "`quill sessions list` shows the session ids"


def _reader(cfg: Any) -> Reader:
    try:
        return open_reader(cfg)
    except CantOpenError:
        raise NotFoundError(
            f"no store at {where(cfg)} yet", hint="push or import something, then `quill run`"
        ) from None


def _note_no_store(cfg: Any) -> None:
    """Before the store exists a listing is empty: "nothing yet" is an answer, not an error,
    but say why on stderr."""
    # (a PostgreSQL store without schema raises CantOpenError instead)
    if capabilities(cfg).local_file and not cfg.state_db.exists():
        click.echo(
            f"quill: no store at {cfg.state_db} yet (push or import, then `quill run`)", err=True
        )


@click.group()
def sessions() -> None:
    """List and show sessions."""


def _tristate(value: str | None) -> bool | None:
    return None if value is None else value == "yes"


@sessions.command(name="list")
@click.option(
    "--source", type=UTF8, help="Only sessions from this source (claude-code, codex, cli ...)."
)
@click.option("--limit", type=click.IntRange(1, 100_000), default=50, show_default=True)
@click.option("--all", "include_hidden", is_flag=True, help="Include hidden sessions.")
@click.option(
    "--title",
    "title_contains",
    type=UTF8,
    help="Title contains this text (literally; % and _ are not wildcards).",
)
@click.option("--since", type=EPOCH, help="Active at or after (epoch seconds or ISO date).")
@click.option("--until", type=EPOCH, help="Started at or before (epoch seconds or ISO date).")
@click.option("--archived", type=YESNO, help="Only archived (yes) or unarchived (no) sessions.")
@click.option("--pinned", type=YESNO, help="Only pinned (yes) or unpinned (no) sessions.")
@click.option("--hidden", type=YESNO, help="Only hidden (yes) or visible (no) sessions.")
@click.option(
    "--chains/--tips",
    "all_chain",
    default=False,
    help="--tips (default): one row per compression chain, its tip; --chains: every session.",
)
@json_option
@click.pass_obj
def sessions_list(
    cfg: Any,
    source: str | None,
    limit: int,
    include_hidden: bool,
    title_contains: str | None,
    since: float | None,
    until: float | None,
    archived: str | None,
    pinned: str | None,
    hidden: str | None,
    all_chain: bool,
    as_json: bool,
) -> None:
    """Sessions, most recently active first."""
    _note_no_store(cfg)
    rows = Client(config_=cfg).sessions(
        source=source,
        limit=limit,
        include_hidden=include_hidden,
        title_contains=title_contains,
        since=since,
        until=until,
        archived=_tristate(archived),
        pinned=_tristate(pinned),
        hidden=_tristate(hidden),
        chains=all_chain,
    )
    if as_json:
        emit_json(rows)
    else:
        con = render.console()
        render.print_sessions(con, rows)


@sessions.command(name="show")
@click.argument("session_id", type=UTF8)
@click.option(
    "--view",
    "projection",
    type=click.Choice(["display", "model", "audit"]),
    default="display",
    show_default=True,
    help="display = what a UI shows; model = what the model is fed; audit = every row.",
)
@click.option(
    "--latest",
    type=click.IntRange(min=1),
    default=None,
    help="Only the last N messages of the view.",
)
@json_option
@click.pass_context
def sessions_show(
    ctx: click.Context, session_id: str, projection: str, latest: int | None, as_json: bool
) -> None:
    """A session's transcript: roles, text, tool calls and tool results."""
    data = Client(config_=ctx.obj).transcript(session_id, projection, latest=latest)
    if as_json:
        emit_json(data)
    else:
        session, chain, messages = data["session"], data["chain"], data["messages"]
        con = render.console()
        if len(chain) > 1:
            con.print(
                f"compression chain ({len(chain)}): " + " → ".join(chain), style="dim", markup=False
            )
        if projection == "model":  # the model view has no Quill keys; number rows for reading
            messages = [{**m, "message_id": i + 1} for i, m in enumerate(messages)]
        # message_count counts display positions; other views have no stored total
        total = (
            session.get("message_count") if latest is not None and projection == "display" else None
        )
        for item in render.transcript(session, messages, total=total):
            con.print(item)


@sessions.command(name="export")
@click.argument("session_id", type=UTF8)
@click.pass_context
def sessions_export(ctx: click.Context, session_id: str) -> None:
    """One session as Quill op JSONL, which `quill import` takes back (the same as
    `quill export SESSION_ID`; other formats: `quill export --format`)."""
    import sys

    from quill.ops.cli.export import write_export

    write_export(ctx.obj, sys.stdout, "quill", session_id, None, None, None)


@click.command()
@click.argument("query", type=UTF8)
@click.option("--limit", type=click.IntRange(1, 10_000), default=20, show_default=True)
@click.option("--session", "session_id", type=UTF8)
@click.option("--role", type=click.Choice(sorted(ROLES)))
@click.option(
    "--kind",
    "kinds",
    multiple=True,
    type=click.Choice(search_mod.KINDS),
    help="Where to look: message text, tool calls (names, arguments), reasoning. "
    "Repeatable; default all.",
)
@click.option("--source", type=UTF8)
@click.option("--since", type=EPOCH, help="Messages at or after (epoch seconds or ISO date).")
@click.option("--until", type=EPOCH, help="Messages at or before (epoch seconds or ISO date).")
@click.option(
    "--substring", is_flag=True, help="Match substrings (user/assistant text) instead of words."
)
@click.option("--audit", is_flag=True, help="Also search superseded and rewound rows.")
@click.option(
    "--order",
    type=click.Choice(["newest", "relevance"]),
    default="newest",
    show_default=True,
    help="relevance: ranked over the newest 1,000 matches "
    "(word queries; BM25 on SQLite, ts_rank on PostgreSQL).",
)
@json_option
@click.pass_obj
def search(
    cfg: Any,
    query: str,
    limit: int,
    session_id: str | None,
    role: str | None,
    kinds: tuple[str, ...],
    source: str | None,
    since: float | None,
    until: float | None,
    substring: bool,
    audit: bool,
    order: str,
    as_json: bool,
) -> None:
    """Full-text search over messages, newest first (or --order relevance). Any text is a valid
    query.

    Message text, tool calls (names and arguments) and reasoning are searched (--kind picks).
    Substring, CJK and emoji queries use narrower routes; a note on stderr says which."""
    _note_no_store(cfg)
    route = search_mod.route(query, substring=substring, kinds=list(kinds) or None)
    if route["note"]:
        click.echo(f"quill: {route['note']}", err=True)
    client = Client(config_=cfg)
    # One hit past the limit tells whether more match, so the human output can say so.
    hits = client.search(
        query,
        limit=limit + (not as_json),
        session_id=session_id,
        role=role,
        source=source,
        since=since,
        until=until,
        substring=substring,
        audit=audit,
        context=as_json,
        kinds=list(kinds) or None,
        order=order,
    )
    more = len(hits) > limit
    del hits[limit:]
    state = client.search_health()["fts_state"]
    if state != "ok":
        why = (
            "is being rebuilt for a new index layout"
            if state == "layout"
            else "was detached after damage and is being rebuilt"
        )
        click.echo(
            f"quill: search is degraded: the search index {why}; "
            f"results come from a scan of the newest {search_mod.SCAN_MAX_ROWS} messages",
            err=True,
        )
    if as_json:
        emit_json(hits)
    else:
        render.print_search(render.console(), hits, query, more=more)
        if more:
            click.echo(
                "quill: more messages match; showing the "
                f"{'best' if order == 'relevance' else 'newest'} "
                f"{limit} (--limit N shows more)",
                err=True,
            )


@click.command()
@json_option
@click.pass_context
def status(ctx: click.Context, as_json: bool) -> None:
    """Fleet, store, spool and job health at a glance (``--json``: the same figures /metrics
    exports)."""
    data = health.collect(ctx.obj)
    if as_json:
        emit_json(data)
    else:
        _print_status(data)
    if data["fleet"]["halt"] or (data["store"] or {}).get("error") or data["fleet"]["crash_loops"]:
        ctx.exit(Exit.FAILED)


def _print_status(d: dict[str, Any]) -> None:
    con = render.console()
    fleet = d["fleet"]
    con.print(f"[bold]quill[/bold] {d['home']}")
    running = (
        "[green]running[/green] (pid " + str(fleet["supervisor_pid"]) + ")"
        if fleet["running"]
        else "[yellow]not running[/yellow]"
    )
    con.print(f"fleet    {running}")
    if fleet["halt"]:
        h = fleet["halt"]
        con.print(
            f"[bold red]HALTED[/bold red] {h.get('cause')}: {h.get('detail')}\n"
            f"  next: [bold]{h.get('next')}[/bold]"
        )
    for c in fleet["crash_loops"]:
        con.print(
            f"[bold red]CRASH LOOP[/bold red] the {c['role']} keeps exiting "
            f"(last code {c['last_code']}); "
            f"see {c['logs']}"
        )
    for role, c in (fleet.get("children") or {}).items():
        if c.get("restarts"):
            con.print(
                f"restarts {role}: {c['restarts']} (last exit code {c['last_exit_code']} at "
                f"{render.when(c['last_exit_at'])})"
            )
    last = fleet.get("last_run")
    if not fleet["running"] and last and last.get("exit_code"):
        roles = ", ".join(c["role"] for c in last["crash_loops"])
        con.print(
            f"[yellow]last run stopped with exit code {last['exit_code']} at "
            f"{render.when(last['ended_at'])}"
            + (f" (crash-looping: {roles})" if roles else "")
            + "[/yellow]"
        )
    writer = WriterStatus.from_json(fleet.get("writer"))
    if fleet["running"] and fleet.get("writer") and not writer.alive:
        con.print("[yellow]writer   not running (restarting?)[/yellow]")
    elif writer.error:
        con.print(f"[yellow]writer   {writer.error}[/yellow]")
    http = fleet.get("http")
    if fleet["running"] and http:
        serving = (
            "serving http://" + http.get("listen", "?") + "/"
            if http.get("alive")
            else "[yellow]not running (restarting?)[/yellow]"
        )
        con.print(f"http     {serving}")
    s = d["store"]
    if s and s.get("error"):
        con.print(f"[bold red]store    unreadable: {s['error']}[/bold red]")
    elif s and s.get("postgres"):
        _print_pg_store(con, s)
    elif s:
        con.print(
            f"store    {s['sessions']} sessions, {s['messages']} messages; cursor {s['cursor']}; "
            f"FTS pending {s['fts_pending']}, index {s.get('fts_state', 'ok')}"
        )
    else:
        con.print("store    (not created yet)")
    if d["disk"]["low"]:
        con.print(
            f"[bold red]DISK ALMOST FULL[/bold red]: {d['disk']['free_bytes']} bytes free "
            f"under {d['home']}; "
            "appends fail and the drain pauses until space returns"
        )
    sp = d["spool"]
    con.print(
        f"spool    {sp['segments']} segment(s), {sp['bytes']} bytes, end {sp['end']}, "
        f"{sp['pending_bytes']} bytes pending (lag {sp['lag_s']} s), "
        f"{sp['quarantined']} quarantined"
        + (f" (of which {sp['torn_writes']} {TORN_SUMMARY})" if sp.get("torn_writes") else "")
    )
    if sp.get("interrupted_purge"):
        ip = sp["interrupted_purge"]
        con.print(
            f"[bold red]PURGE INTERRUPTED[/bold red] of {', '.join(ip['sessions']) or '?'}: "
            "the content may still be in the spool, snapshots and the live store\n"
            f"  next: [bold]{ip['next']}[/bold]"
        )
    w = d["wal"]
    if w["bytes"] or w["blocked_by_reader_since"]:
        style = "yellow" if w["high"] or w["blocked_by_reader_since"] else "default"
        con.print(f"[{style}]WAL      {health.describe_wal(w)}[/{style}]")
    for o in d["overdue"]:
        con.print(f"[yellow]overdue  {o['job']}: {o['reason']}[/yellow]")
    for run in d["jobs"][:5]:
        con.print(
            f"job      {run['job']:<15} {run['outcome']:<6} {render.when(run['started_at'])} "
            f"{run.get('error') or ''}"
        )


def _print_pg_store(con: Any, s: dict[str, Any]) -> None:
    """The store lines of a PostgreSQL store: server, sizes, every host's cursor, amcheck."""
    pg = s["postgres"]
    con.print(f"store    PostgreSQL {pg['server_version']} at {pg['url']}")
    con.print(
        f"         {s['sessions']} sessions, {s['messages']} messages; "
        f"store {filesize.decimal(pg['size_bytes'])}, "
        f"database {filesize.decimal(pg['database_bytes'])}; this host's cursor {s['cursor']}"
    )
    for sp in pg["spools"]:
        con.print(
            f"cursor   {sp['spool_id']:<28} {sp['cursor']:<14} last commit {sp['age_s']} s ago"
        )
    a = pg["amcheck"]
    if a is None:
        con.print("amcheck  never run (job pg_integrity_check)")
    else:
        style = (
            "green"
            if a["outcome"] == "ok"
            else ("default" if a["outcome"] == "running" else "bold red")
        )
        con.print(
            f"amcheck  [{style}]{a['outcome']}[/{style}] {render.when(a['at'])}"
            + (f" {a['error']}" if a.get("error") else "")
        )


def _attach_key_commands() -> None:
    """``sessions resume | orphans | delete`` live in ``session_keys``."""
    from quill.ops.cli.session_keys import sessions_delete, sessions_orphans, sessions_resume

    for command in (sessions_resume, sessions_orphans, sessions_delete):
        sessions.add_command(command)


_attach_key_commands()

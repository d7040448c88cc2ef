"""Read commands of the CLI: ``sessions list|show|export``, ``search`` (``status`` is
``ops.cli.status``)."""

from __future__ import annotations

from typing import Any

import click

from quill.ops import human
from quill.ops.cli import paging, render
from quill.ops.cli.base import emit_json, json_option
from quill.ops.cli.params import EPOCH, UTF8, YESNO
from quill.ops.client.client import Client
from quill.ops.client.errors import NotFoundError
from quill.ops.client.reads import MESSAGES_MAX, MESSAGES_PAGE
from quill.ops.client.stores import lost_store, open_reader, where
from quill.store.apply.normalize import ROLES
from quill.store.errors import CantOpenError
from quill.store.factory import capabilities
from quill.store.read.reader import Reader
from quill.store.search import run as search_mod
from quill.store.search.group import PER_SESSION

_LIST_HINT = "`quill sessions list` shows the session ids"


def _reader(cfg: Any) -> Reader:
    try:
        return open_reader(cfg)
    except CantOpenError:
        raise lost_store(cfg) or NotFoundError(
            f"no store at {where(cfg)} yet", hint="push or import something, then `quill run`"
        ) from None


def _note_no_store(cfg: Any) -> None:
    """Before the store exists a listing is empty: "nothing yet" is an answer, not an error,
    but say why on stderr."""
    # (a PostgreSQL store without schema raises CantOpenError instead)
    lost = lost_store(cfg)
    if lost is not None:  # gone, not "not yet": an empty listing would hide it
        raise lost
    if capabilities(cfg).local_file and not cfg.state_db.exists():
        click.echo(
            f"quill: no store at {cfg.state_db} yet (push or import, then `quill run`)", err=True
        )


@click.group()
def sessions() -> None:
    """List, show, export and delete sessions; the one to resume; orphans."""


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
@click.option(
    "--since",
    type=EPOCH,
    help="Last active at or after (newest message, else start; epoch seconds or ISO date).",
)
@click.option(
    "--until",
    type=EPOCH,
    help="Last active at or before (newest message, else start; epoch seconds or ISO date).",
)
@click.option("--archived", type=YESNO, help="Only archived (yes) or unarchived (no) sessions.")
@click.option("--pinned", type=YESNO, help="Only pinned (yes) or unpinned (no) sessions.")
@click.option("--hidden", type=YESNO, help="Only hidden (yes) or visible (no) sessions.")
@click.option(
    "--chains/--tips",
    "all_chain",
    default=False,
    help="--tips (default): one row per compression chain, its tip, no subagent runs; "
    "--chains: every session.",
)
@paging.after_option
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
    after: str | None,
    as_json: bool,
) -> None:
    """Sessions, most recently active first, a page of --limit at a time (--after CURSOR: the
    next page). --json prints {"sessions": [...], "next": CURSOR or null}; without --json a
    note on stderr gives the next page's cursor."""
    _note_no_store(cfg)
    found = Client(config_=cfg).sessions_page(
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
        after=after,
    )
    if as_json:
        emit_json(found)
    else:
        render.print_sessions(render.console(), found["sessions"])
        paging.note_next("sessions", limit, found["next"])


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
    help="Only the last N messages of the view (not paged: not with --limit or --after).",
)
@click.option(
    "--limit",
    type=click.IntRange(1, MESSAGES_MAX),
    default=None,
    help=f"Messages a page holds, from the first  [default: {MESSAGES_PAGE:,}].",
)
@paging.after_option
@json_option
@click.pass_context
def sessions_show(
    ctx: click.Context,
    session_id: str,
    projection: str,
    latest: int | None,
    limit: int | None,
    after: str | None,
    as_json: bool,
) -> None:
    """A session's transcript: roles, text, tool calls and tool results, a page of --limit
    messages at a time from the first (--after CURSOR: the next page; the cursor of
    `GET /api/v1/sessions/ID/messages`, bound to the session and view). --json prints
    {"session", "chain", "messages", "context", "next": CURSOR or null}; without --json a note
    on stderr gives the next page's cursor. --latest N: only the last N messages instead."""
    if latest is not None and (limit is not None or after is not None):
        raise click.UsageError("--latest is not paged: not with --limit or --after")
    if latest is None and limit is None:
        limit = MESSAGES_PAGE
    data = Client(config_=ctx.obj).transcript(
        session_id, projection, latest=latest, limit=limit, after=after
    )
    if as_json:
        emit_json(data)
        return
    session, chain, messages = data["session"], data["chain"], data["messages"]
    con = render.console()
    if len(chain) > 1:
        con.print(
            f"compression chain ({len(chain)}): " + " → ".join(chain), style="dim", markup=False
        )
    if projection == "model" and after is None:
        # the model view has no Quill keys: number the first page's rows for reading (a later
        # page's place in the view is not known here, so its rows are left unnumbered)
        messages = [{**m, "message_id": i + 1} for i, m in enumerate(messages)]
    # message_count counts display positions; other views have no stored total
    total = session.get("message_count") if projection == "display" else None
    shown = "last" if latest is not None else ("first" if after is None else "next")
    for item in render.transcript(session, messages, total=total, shown=shown):
        con.print(item)
    if data["next"] is not None:
        click.echo(
            f"quill: more messages follow; showing {len(messages)}; the next page: "
            f"--after {data['next']} (or --limit N, --latest N)",
            err=True,
        )


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
    help="newest: the most recently stored first (the order messages reached the store, "
    "not their own timestamps: an import of old sessions lands on top); relevance: ranked "
    "over the 1,000 most recently stored matches (word queries; BM25 on SQLite, ts_rank on "
    "PostgreSQL).",
)
@click.option(
    "--per-session",
    type=click.IntRange(0, 10_000),
    default=PER_SESSION,
    show_default=True,
    help="Most hits shown from one session (0: no cap); the rest are counted per session.",
)
@paging.after_option
@json_option
@click.pass_obj
def search(cfg: Any, query: str, kinds: tuple[str, ...], as_json: bool, **params: Any) -> None:
    """Full-text search over messages, most recently stored first (or --order relevance). Any
    text is a valid query.

    Message text, tool calls (names and arguments) and reasoning are searched (--kind picks).
    At most --per-session hits come from one session; the matches are counted (up to 1,000)
    per session and in all. A page of --limit hits at a time (--after CURSOR: the next page of
    the same search; the pages are those of one big page, rows stored meanwhile aside).
    --json prints {"hits", "total", "total_exact", "more", "per_session", "sessions",
    "next"}. Substring, CJK and emoji queries use a trigram index and a
    bounded scan; a note on stderr says what is searched."""
    _note_no_store(cfg)
    # ``params``: the other options, named as the search parameters (``SearchParams``).
    route = search_mod.route(query, substring=params["substring"], kinds=list(kinds) or None)
    if route["note"]:
        click.echo(f"quill: {route['note']}", err=True)
    client = Client(config_=cfg)
    result = client.search_results(query, context=as_json, kinds=list(kinds) or None, **params)
    hits = result["hits"]
    if params["session_id"] is not None and not hits:
        client.session(params["session_id"])  # NotFoundError (exit 3): the store lacks it
    health = client.search_health()
    state = health["fts_state"]
    if state != "ok":
        why = (
            "is being rebuilt for a new index layout"
            if state == "layout"
            else "was detached after damage and is being rebuilt"
        )
        click.echo(
            f"quill: search is degraded: the search index {why}; "
            f"results come from a scan of the newest {search_mod.TAIL_MAX_ROWS} messages",
            err=True,
        )
    elif health["degraded"]:
        click.echo(
            "quill: search is degraded: "
            f"{human.count(health['fts_pending'], 'message')} not yet indexed "
            f"(the index is being refilled); only the newest {search_mod.TAIL_MAX_ROWS} of them "
            "are searched",
            err=True,
        )
    if as_json:
        emit_json(result)
    else:
        render.print_search(render.console(), hits, query, result=result)
        shown = (
            f"the best {len(hits)}"
            if params["order"] == "relevance"
            else f"the {len(hits)} most recently stored"
        ) + (f", at most {result['per_session']} per session" if result["per_session"] else "")
        if result["next"] is not None:
            paging.note_next("messages", len(hits), result["next"], shown)
        elif result["more"]:
            click.echo(
                f"quill: more messages match; showing {shown}"
                " (--limit N, --per-session N, --session ID show more)",
                err=True,
            )


def _attach_key_commands() -> None:
    """``sessions resume | orphans | delete`` live in ``session_keys``."""
    from quill.ops.cli.session_keys import sessions_delete, sessions_orphans, sessions_resume

    for command in (sessions_resume, sessions_orphans, sessions_delete):
        sessions.add_command(command)


_attach_key_commands()

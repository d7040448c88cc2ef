"""``quill serve`` and ``quill token create|list|revoke``.

The service modules (FastAPI, uvicorn) are imported only when ``serve`` runs, so the other
commands stay fast to start.
"""

from __future__ import annotations

import json
from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from quill.home import ANONYMOUS
from quill.ops.cli import paging, render
from quill.ops.cli.base import emit_json, json_option
from quill.ops.client.errors import InvalidInputError, NotFoundError, StoreBusyError

#: What to do when tokens.db is locked by another process.
TOKENS_BUSY_HINT = (
    "another process holds tokens.db's lock (a sqlite3 shell, another `quill token`); "
    "retry once it ends its transaction (`fuser tokens.db` names it)"
)


@click.command()
@click.option(
    "--listen", default=None, help="HOST:PORT (default: [http] listen, else 127.0.0.1:8765)."
)
@click.option(
    "--anonymous",
    type=click.Choice(ANONYMOUS),
    default=None,
    help="Who may call without a token: loopback peers (default), nobody, or anyone "
    "(an explicit override for a trusted network).",
)
@json_option
@click.pass_obj
def serve(cfg: Any, listen: str | None, anonymous: str | None, as_json: bool) -> None:
    """Serve the HTTP API, /metrics and the dashboard (Ctrl-C to stop).

    Appends are acknowledged (202) once fsync'd into the spool; `quill run` applies them.
    """
    from quill.ops import logs
    from quill.ops.service.server import ListenError, is_loopback, parse_listen
    from quill.ops.service.server import serve as run_server

    listen = listen or cfg.http_listen or "127.0.0.1:8765"
    policy = anonymous or cfg.http_anonymous
    try:
        host, port = parse_listen(listen)
    except ListenError as exc:
        raise click.BadParameter(str(exc), param_hint="--listen") from None
    cfg.ensure_dirs()
    log = logs.configure(cfg.logs_dir, "http")
    if policy == "any" and not is_loopback(host):
        click.echo(
            "quill: WARNING: --anonymous any on a non-loopback address: anyone who can reach "
            f"{host}:{port} can read and write transcripts",
            err=True,
        )
    from quill.ops.client.errors import QuillError
    from quill.ops.service.server import bind

    try:
        sock = bind(host, port)
    except OSError as exc:
        raise QuillError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}",
            hint="another process (another `quill serve`, or a fleet run with http_listen) may "
            "hold it; choose another with --listen HOST:PORT",
        ) from None
    url = f"http://{'[' + host + ']' if ':' in host else host}:{port}/"
    if as_json:  # one line on stdout, so a script can read where the service is
        click.echo(
            json.dumps({"url": url, "listen": f"{host}:{port}", "anonymous": policy}), nl=True
        )
    else:
        click.echo(
            f"quill: serving {url} "
            "(dashboard /, API /api/v1, metrics /metrics, OpenAPI /openapi.json); "
            f"anonymous callers: {policy}; logs in {cfg.logs_dir}",
            err=True,
        )
    run_server(cfg, log, listen, anonymous=policy, sock=sock)


@click.group()
def token() -> None:
    """API tokens: bearer secrets with scopes read, write, admin (stored hashed)."""


@token.command(name="create")
@click.argument("name")
@click.option(
    "--scope",
    "scopes",
    multiple=True,
    type=click.Choice(["read", "write", "admin"]),
    required=True,
    help="Repeat for several: --scope read --scope write. admin implies read and write.",
)
@json_option
@click.pass_obj
def token_create(cfg: Any, name: str, scopes: tuple[str, ...], as_json: bool) -> None:
    """Create a token named NAME. It is printed once: store it now."""
    from quill.ops.service.tokens import TokenError, TokenStore, TokensUnavailableError

    cfg.ensure_dirs()
    try:
        secret, row = TokenStore(cfg.tokens_db).create(name, list(scopes))
    except TokensUnavailableError as exc:
        raise StoreBusyError(str(exc), hint=TOKENS_BUSY_HINT) from None
    except TokenError as exc:
        raise InvalidInputError(str(exc)) from None
    if as_json:
        emit_json({**row, "token": secret})
    else:
        click.echo(secret)
        click.echo(
            f"token {row['id']} ({name}; scopes {' '.join(row['scopes'])}): shown once, "
            "send it as `Authorization: Bearer <token>`",
            err=True,
        )


@token.command(name="list")
@click.option("--limit", type=click.IntRange(1, 100_000), default=100, show_default=True)
@paging.after_option
@json_option
@click.pass_obj
def token_list(cfg: Any, limit: int, after: str | None, as_json: bool) -> None:
    """Every token by id: id, name, scopes, created, revoked (never the secret); a page of
    --limit at a time (--after CURSOR: the next page). --json prints {"tokens": [...],
    "next": CURSOR or null}."""
    from quill.ops.service.tokens import TokenError, TokenStore, TokensUnavailableError

    start = paging.decode(after, "tokens", (str,)) if after is not None else None
    try:
        rows = sorted(TokenStore(cfg.tokens_db).list(), key=lambda r: r["id"])
    except TokensUnavailableError as exc:
        raise StoreBusyError(str(exc), hint=TOKENS_BUSY_HINT) from None
    except TokenError as exc:  # a copied tokens.db: the message names `quill token rebind`
        raise InvalidInputError(str(exc)) from None
    rows, cursor = paging.page(rows, lambda r: (r["id"],), limit, start, "tokens")
    if as_json:
        emit_json({"tokens": rows, "next": cursor})
        return
    if not rows:
        paging.no_rows("no tokens" + (" after that cursor" if after else ""))
        return
    table = Table(title=f"{len(rows)} token(s)", title_justify="left")
    for col in ("id", "name", "scopes", "created", "revoked"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            r["id"],
            escape(r["name"]),
            " ".join(r["scopes"]),
            render.when(r["created_at"]),
            render.when(r["revoked_at"]) or "-",
        )
    render.console().print(table)
    paging.note_next("tokens", limit, cursor)


@token.command(name="revoke")
@click.argument("token_id")
@json_option
@click.pass_obj
def token_revoke(cfg: Any, token_id: str, as_json: bool) -> None:
    """Revoke token TOKEN_ID (effective on the next request)."""
    from quill.ops.service.tokens import (
        TokenError,
        TokensCopiedError,
        TokenStore,
        TokensUnavailableError,
    )

    try:
        TokenStore(cfg.tokens_db).revoke(token_id)
    except TokensUnavailableError as exc:
        raise StoreBusyError(str(exc), hint=TOKENS_BUSY_HINT) from None
    except TokensCopiedError as exc:
        raise InvalidInputError(str(exc)) from None
    except TokenError as exc:
        raise NotFoundError(str(exc), hint="`quill token list` shows the token ids") from None
    if as_json:
        emit_json({"id": token_id, "revoked": True})
    else:
        click.echo(f"{token_id}: revoked")


def register(cli: click.Group) -> None:
    cli.add_command(serve)
    cli.add_command(token)


@token.command(name="rebind")
@click.option(
    "--revoke-all",
    is_flag=True,
    help="Also revoke every token: a copy gets its own (`quill token create`).",
)
@json_option
@click.pass_obj
def token_rebind(cfg: Any, revoke_all: bool, as_json: bool) -> None:
    """Bind tokens.db to this data dir. A tokens.db copied with a data dir (cp -a, a VM image,
    a restored backup) refuses every token until its owner runs this."""
    from quill.ops.service.tokens import TokenStore, TokensUnavailableError

    cfg.ensure_dirs()
    try:
        active = TokenStore(cfg.tokens_db).rebind(revoke_all=revoke_all)
    except TokensUnavailableError as exc:
        raise StoreBusyError(str(exc), hint=TOKENS_BUSY_HINT) from None
    if as_json:
        emit_json({"home": str(cfg.home), "active_tokens": active, "revoked_all": revoke_all})
    else:
        click.echo(
            f"quill: tokens.db bound to {cfg.home}; {active} token(s) accepted here"
            + (" (every earlier token revoked)" if revoke_all else ""),
            err=True,
        )

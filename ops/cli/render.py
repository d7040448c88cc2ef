"""Human output for the CLI: rich tables, transcripts and progress bars (``--json`` output is
``base.emit_json``)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from quill.ops.human import usd

#: Width given to rich when stdout is not a terminal: wide enough that no line of ours is
#: ever hard-wrapped (rich would otherwise assume 80 columns and fold ids and paths).
UNWRAPPED_WIDTH = 1_000_000


def console() -> Console:
    """The stdout console. On a terminal, rich fits its width; otherwise (a pipe, a file) lines
    are never wrapped and tables size to their content."""
    probe = Console()
    if probe.is_terminal:
        return Console(highlight=False, soft_wrap=False)
    return Console(highlight=False, soft_wrap=True, width=UNWRAPPED_WIDTH)


def progress(enabled: bool = True, *, unit: str = "items") -> Progress:
    """The one progress bar of long commands (import, replay, verify, recover, export): on
    stderr, shown only when stderr is a terminal and ``enabled`` (off under ``--json``), and
    gone when done. ``unit="bytes"`` shows sizes; otherwise counts."""
    con = Console(stderr=True)
    amount = DownloadColumn() if unit == "bytes" else MofNCompleteColumn()
    return Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        amount,
        TimeRemainingColumn(),
        console=con,
        transient=True,
        disable=not enabled or not con.is_terminal,
    )


def when(ts: float | None) -> str:
    """Epoch seconds → ``YYYY-MM-DD HH:MM`` UTC (empty for None)."""
    if ts is None:
        return ""
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M")


def _fits(ids: list[str], width: int, reserved: int) -> int | None:
    """The id column width that shows every id whole, or None if ``width`` minus the other
    columns' ``reserved`` cells cannot hold the longest one."""
    need = max((len(i) for i in ids), default=2)
    return need if need + reserved <= width else None


def _print_list(con: Console, title: str, entries: list[tuple[str, Text | str]]) -> None:
    """The narrow-terminal layout: each id on its own line, printed unwrapped (the terminal
    may fold it visually, but it is one line of text: copy-paste gets it whole)."""
    con.print(title, markup=False)
    for ident, detail in entries:
        con.print(Text(ident, style="bold"), soft_wrap=True)
        con.print(
            Text("  ").append(detail) if isinstance(detail, Text) else Text(f"  {detail}"),
            soft_wrap=True,
        )


def print_sessions(con: Console, rows: list[dict[str, Any]]) -> None:
    """Sessions as a table that fits the console. The id is what `sessions show` needs, so it
    is never split or cut: optional columns (source, ended, last active) are dropped first on
    a narrow terminal, and when even then the longest id does not fit, each session is
    printed as two lines (id, then title · messages · last active)."""
    width = con.width
    columns = ["id", "source", "title / preview", "msgs", "tokens", "last active", "ended"]
    if width < 110:
        columns.remove("ended")
        columns.remove("source")
        columns.remove("tokens")
    if width < 80:
        columns.remove("last active")
    fixed = {"source": 12, "msgs": 5, "tokens": 8, "last active": 16, "ended": 12}
    reserved = sum(fixed.get(c, 0) for c in columns) + 10 + 3 * len(columns) + 1  # title ≥ 10
    title = f"{len(rows)} session(s)"
    labels = [r.get("title") or (r.get("preview") or "").replace("\n", " ") for r in rows]
    id_width = _fits([r["id"] for r in rows], width, reserved)
    if id_width is None:
        _print_list(
            con,
            title,
            [
                (
                    r["id"],
                    f"{label[:60]} · {r['message_count']} msg(s) · {when(r.get('last_active'))}",
                )
                for r, label in zip(rows, labels)
            ],
        )
        return
    table = Table(title=title, title_justify="left")
    # rich shrinks wrapable columns first: cap the (non-wrapping) title so the id keeps room.
    title_width = max(
        10, width - id_width - sum(fixed.get(c, 0) for c in columns) - 3 * len(columns) - 1
    )
    for col in columns:
        if col == "id":
            table.add_column(col, no_wrap=True, min_width=id_width)
        elif col == "title / preview":
            table.add_column(col, overflow="ellipsis", no_wrap=True, max_width=title_width)
        else:
            table.add_column(
                col, no_wrap=True, justify="right" if col in ("msgs", "tokens") else "left"
            )
    for r, label in zip(rows, labels):
        cells = {
            "id": escape(r["id"]),
            "source": escape(r.get("source") or ""),
            "title / preview": escape(label[:60]),
            "msgs": str(r["message_count"]),
            "tokens": tokens(r.get("usage")),
            "last active": when(r.get("last_active")),
            "ended": escape(r.get("end_reason") or ""),
        }
        table.add_row(*(cells[c] for c in columns))
    con.print(table)


def tokens(usage: dict[str, Any] | None) -> str:
    """Input + output tokens of a totals dict, compact (``12.3k``, ``1.2M``); empty for none."""
    if not usage or not usage.get("calls"):
        return ""
    n = usage["input_tokens"] + usage["output_tokens"]
    return f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n / 1e3:.1f}k" if n >= 1e3 else str(n)


def cost(usage: dict[str, Any]) -> str:
    """``$1.23`` or ``$0.0045`` (``quill.ops.human.usd``: significant digits under a cent,
    as the dashboard), with ``+ N unpriced`` when some calls have no price; ``unpriced``
    when none has."""
    if usage.get("cost_usd") is None:
        return "unpriced" if usage.get("calls") else ""
    text = usd(usage["cost_usd"])
    return text + (f" + {usage['unpriced']} unpriced" if usage.get("unpriced") else "")


def print_search(
    con: Console,
    hits: list[dict[str, Any]],
    query: str,
    *,
    more: bool = False,
    result: dict[str, Any] | None = None,
) -> None:
    """Search hits as a table; session ids are never split (as in ``print_sessions``: when the
    longest does not fit beside a 20-cell snippet, each hit is printed as lines). ``more``:
    more messages match than are shown (the title says "first N"). ``result`` (a
    ``Client.search_results`` dict) puts the bounded total in the title and, under the hits,
    a line per session whose matches were not all shown."""
    if result is not None:
        total = f"{result['total']}{'' if result['total_exact'] else '+'}"
        title = f"{len(hits)} of {total} hit(s) for “{query}”"
    else:
        title = f"{'first ' if more else ''}{len(hits)} hit(s) for “{query}”"
    _print_hits(con, hits, title)
    if result is None:
        return
    for s in result["sessions"]:
        if s["matches"] > s["shown"]:
            at_least = "" if result["total_exact"] else "at least "
            con.print(
                f"  {escape(s['session_id'])}: {s['shown']} of {at_least}{s['matches']} "
                "hit(s) shown",
                soft_wrap=True,
                highlight=False,
            )


def _print_hits(con: Console, hits: list[dict[str, Any]], title: str) -> None:
    rows = []
    for h in hits:
        snippet = Text(h["snippet"])
        for start, end in h.get("highlights", []):
            snippet.stylize("bold reverse", start, end)  # the matched words
        role = h["role"] + (
            "" if h.get("matched_in", "text") == "text" else f" ({h['matched_in']})"
        )
        rows.append((h, role, snippet))
    id_width = _fits([h["session_id"] for h in hits], con.width, 8 + 12 + 16 + 20 + 16)
    if id_width is None:
        _print_list(
            con,
            title,
            [
                (
                    h["session_id"],
                    Text(f"#{h['message_id']} {role} {when(h.get('ts'))}: ").append(snippet),
                )
                for h, role, snippet in rows
            ],
        )
        return
    table = Table(title=title, title_justify="left")
    table.add_column("session", no_wrap=True, min_width=id_width)
    for col in ("msg", "role", "when"):
        table.add_column(col, no_wrap=True)
    table.add_column("snippet", overflow="fold")
    for h, role, snippet in rows:
        table.add_row(
            escape(h["session_id"]), str(h["message_id"]), escape(role), when(h.get("ts")), snippet
        )
    con.print(table)


_ROLE_STYLE = {
    "user": "bold cyan",
    "assistant": "bold green",
    "tool": "yellow",
    "system": "magenta",
    "developer": "magenta",
}


def transcript(
    session: dict[str, Any],
    messages: list[dict[str, Any]],
    max_chars: int = 2000,
    total: int | None = None,
    shown: str = "last",
) -> list[Any]:
    """Renderables for a readable transcript: roles, text, tool calls and tool results.
    ``total``: how many messages the view holds when ``messages`` is only some of them, which
    ones being ``shown`` (``last``, ``first``, ``next``: a page after the first)."""
    # Quoted as typed (as the search title), never a Python repr; no empty "title=".
    title = f"  title=“{session['title']}”" if session.get("title") else ""
    count = (
        f"messages={len(messages)}"
        if total is None or total == len(messages)
        else f"{shown} {len(messages)} of {total} messages"
    )
    out: list[Any] = [
        Text(
            f"session {session['id']}  source={session.get('source') or '-'}{title}  {count}",
            style="bold",
        )
    ]
    usage = session.get("usage") or {}
    if usage.get("calls"):
        out.append(
            Text(
                f"usage: {usage['calls']} call(s), {usage['input_tokens']} in "
                f"({usage['cache_read_tokens']} cache read, "
                f"{usage['cache_write_tokens']} cache write), "
                f"{usage['output_tokens']} out ({usage['reasoning_tokens']} reasoning), "
                f"{cost(usage)}",
                style="dim",
            )
        )
    for m in messages:
        number = (
            f"[{m['message_id']}] " if "message_id" in m else ""
        )  # the model view has no store ids
        head = Text(f"\n{number}{m['role']}", style=_ROLE_STYLE.get(m["role"], "bold"))
        if m.get("name"):
            head.append(f" ({m['name']})")
        if m.get("tool_call_id"):
            head.append(f" ← {m['tool_call_id']}", style="dim")
        if m.get("state") not in (None, "live"):
            head.append(f" [{m['state']}]", style="dim")
        head.append(f"  {when(m.get('ts'))}", style="dim")
        out.append(head)
        reasoning = m.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            out.append(_folded_reasoning(reasoning))
        content = m.get("content")
        if isinstance(content, list):
            content = "\n".join(
                p.get("text", f"<{p.get('type')}>") if isinstance(p, dict) else str(p)
                for p in content
            )
        if content:
            out.append(
                Text(
                    content
                    if len(content) <= max_chars
                    else content[:max_chars] + f"… ({len(content)} chars)"
                )
            )
        for call in m.get("tool_calls") or []:
            fn = call.get("function", {}) if isinstance(call, dict) else {}
            args = str(fn.get("arguments", ""))
            out.append(
                Text(
                    f"  → {fn.get('name')}({args[:300]}{'…' if len(args) > 300 else ''})  "
                    f"id={call.get('id')}",
                    style="yellow",
                )
            )
    return out


#: How much of a message's reasoning a text view shows: it is folded to a first glimpse.
REASONING_PREVIEW_CHARS = 300


def _folded_reasoning(reasoning: str) -> Text:
    """A message's reasoning folded for a text view: ``reasoning: `` and its first
    ``REASONING_PREVIEW_CHARS`` characters on one line, with its full length when cut (the
    ``--json`` output and the audit view carry it whole)."""
    flat = " ".join(reasoning.split())
    cut = len(flat) > REASONING_PREVIEW_CHARS
    shown = flat[:REASONING_PREVIEW_CHARS] + (f"… ({len(reasoning)} chars)" if cut else "")
    return Text(f"  reasoning: {shown}", style="dim italic")

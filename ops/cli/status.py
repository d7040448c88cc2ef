"""``quill status``: fleet, store, spool and job health at a glance, from
``ops.status.health.collect`` (the figures ``--json`` prints and ``/metrics`` exports)."""

from __future__ import annotations

from typing import Any

import click
from rich import filesize
from rich.markup import escape

from quill.home import WriterStatus
from quill.ops import human
from quill.ops.cli import render
from quill.ops.cli.base import emit_json, json_option
from quill.ops.client.errors import Exit
from quill.ops.status import guard, health
from quill.spool.torn import TORN_SUMMARY


@click.command()
@json_option
@click.pass_context
def status(ctx: click.Context, as_json: bool) -> None:
    """Fleet, store, spool and job health at a glance (--json: the same figures /metrics
    exports)."""
    data = health.collect(ctx.obj)
    if as_json:
        emit_json(data)
    else:
        _print_status(data)
    if (
        data["fleet"]["halt"]
        or (data["store"] or {}).get("error")
        or data["fleet"]["crash_loops"]
        or data["spool"]["integrity"]["lost"]
        or data["spool"]["history_gap"]
        or data["spool"]["cursor_mismatch"]
    ):
        ctx.exit(Exit.FAILED)


def _t(value: Any) -> str:
    """``value`` as console text: square brackets in it are printed, never read as markup."""
    return escape(str(value))


def _print_status(d: dict[str, Any]) -> None:
    con = render.console()
    fleet = d["fleet"]
    con.print(f"[bold]quill[/bold] {_t(d['home'])}")
    running = (
        "[green]running[/green] (pid " + str(fleet["supervisor_pid"]) + ")"
        if fleet["running"]
        else "[yellow]not running[/yellow]"
    )
    con.print(f"fleet    {running}")
    if fleet["halt"]:
        h = fleet["halt"]
        con.print(
            f"[bold red]HALTED[/bold red] {_t(h.get('cause'))}: {_t(h.get('detail'))}\n"
            f"  next: [bold]{_t(h.get('next'))}[/bold]"
        )
    for c in fleet["crash_loops"]:
        con.print(
            f"[bold red]CRASH LOOP[/bold red] the {c['role']} keeps exiting "
            f"(last code {c['last_code']}); "
            f"see {_t(c['logs'])}"
        )
    for role, o in (fleet.get("orphans") or {}).items():
        con.print(
            f"[yellow]ORPHANED[/yellow] the {role} (pid {o['pid']}) of a fleet that died "
            f"(pid {o['parent']}) still runs since {render.when(o['since'])}; "
            + ("killed" if o.get("killed") else "asked to stop (killed after 15 s)")
            + f"; the new {role} starts once it is gone"
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
        con.print(f"[yellow]writer   {_t(writer.error)}[/yellow]")
    q = d["queue"]
    if q["unavailable_since"]:
        con.print(
            f"[bold red]QUEUE UNREACHABLE[/bold red] since {render.when(q['unavailable_since'])}: "
            f"{_t(q['error'])}"
            + (f" (reported by {', '.join(q['reported_by'])})" if q.get("reported_by") else "")
            + "\n  queued and scheduled jobs wait; the spool is applied as ever"
        )
    sched = fleet.get("scheduler") or {}
    schedule = d.get("schedule", {})
    if schedule.get("state") in ("locked", "unavailable") and sched.get("alive"):
        con.print(
            f"[bold red]SCHEDULE {schedule['state'].upper()}[/bold red]: {_t(schedule['error'])}\n"
            f"  the scheduler has waited {schedule['waiting_s']:.0f} s and fires nothing "
            "meanwhile; it resumes by itself once the file answers"
            + (
                " (end the transaction of the process holding its lock: a sqlite3 shell, a "
                "backup; `fuser schedule.db` names it)"
                if schedule["state"] == "locked"
                else ""
            )
        )
    elif schedule.get("state") in ("locked", "unavailable"):
        con.print(
            f"[bold red]SCHEDULE {schedule['state'].upper()}[/bold red]: {_t(schedule['error'])}\n"
            "  a running scheduler waits for it and resumes by itself"
        )
    elif schedule.get("readable") is False:
        waiting = (
            f"\n  the scheduler fires nothing since {render.when(sched['schedule_damaged_since'])}"
            " and starts again by itself once the file is replaced or moved aside"
            if sched.get("alive") and sched.get("schedule_damaged")
            else ""
        )
        con.print(
            f"[bold red]SCHEDULE UNREADABLE[/bold red]: {_t(d['schedule']['error'])}\n"
            "  move schedule.db aside: the scheduler recreates the default schedules "
            "(your own changes to them are lost; the spool and the store are not)" + waiting
        )
    if sched.get("alive") and sched.get("schedule_error"):
        con.print(
            "[bold red]SCHEDULE UNWRITABLE[/bold red] since "
            f"{render.when(sched['schedule_unwritable_since'])}: {_t(sched['schedule_error'])}\n"
            "  jobs fire on time; the next run times of "
            f"{_t(', '.join(sched.get('schedule_held') or []))} are held in memory until the "
            "schedule's file takes them (lost only if the scheduler stops first)"
        )
    if sched.get("alive") and sched.get("store_error"):
        con.print(
            "[yellow]scheduler standing by[/yellow]: the store cannot be reached since "
            f"{render.when(sched['store_unreachable_since'])}: {_t(sched['store_error'])}\n"
            "  no schedule fires from this host; it leads again once the store answers"
        )
    http = fleet.get("http")
    if fleet["running"] and http:
        serving = (
            "serving http://" + _t(http.get("listen", "?")) + "/"
            if http.get("alive")
            else "[yellow]not running (restarting?)[/yellow]"
        )
        con.print(f"http     {serving}")
    s = d["store"]
    if s and s.get("state") == "missing":
        con.print(f"[bold red]store    MISSING: {_t(s['error'])}[/bold red]")
        con.print(f"  next: {s['next']}")
    elif s and s.get("error"):
        con.print(f"[bold red]store    unreadable: {_t(s['error'])}[/bold red]")
    elif s and s.get("postgres"):
        _print_pg_store(con, s)
    elif s:
        con.print(
            f"store    {human.store_counts(s)}; cursor {s['cursor']}; "
            f"FTS pending {s['fts_pending']}, index {s.get('fts_state', 'ok')}"
        )
    else:
        con.print("store    (not created yet)")
    if d["disk"]["low"]:
        con.print(
            f"[bold red]DISK ALMOST FULL[/bold red]: {d['disk']['free_bytes']} bytes free "
            f"under {_t(d['home'])}; "
            "appends fail and the drain pauses until space returns"
        )
    sp = d["spool"]
    con.print(
        f"spool    {sp['segments']} segment(s), {sp['bytes']} bytes, "
        f"end {sp['end'] if sp['end'] is not None else '(empty)'}, "
        f"{_t(guard.describe_progress(sp))}, "
        f"{sp['quarantined']} quarantined"
        + (f" (of which {sp['torn_writes']} {TORN_SUMMARY})" if sp.get("torn_writes") else "")
    )
    if sp.get("history_gap"):
        gap = sp["history_gap"]
        con.print(
            f"[bold red]HISTORY NOT IN SPOOL[/bold red] {_t(gap['error'])}\n"
            f"  next: [bold]{_t(gap['next'])}[/bold]"
        )
    if sp.get("cursor_mismatch"):
        bad = sp["cursor_mismatch"]
        con.print(
            f"[bold red]CURSOR REFUSED[/bold red] {_t(bad['error'])}\n"
            f"  next: [bold]{_t(bad['next'])}[/bold]"
        )
    if sp["integrity"]["lost"]:
        con.print(f"[bold red]SPOOL[/bold red]    {_t(sp['integrity']['summary'])}")
    if sp.get("interrupted_purge"):
        ip = sp["interrupted_purge"]
        con.print(
            f"[bold red]PURGE INTERRUPTED[/bold red] of {_t(', '.join(ip['sessions']) or '?')}: "
            "the content may still be in the spool, snapshots and the live store\n"
            f"  next: [bold]{_t(ip['next'])}[/bold]"
        )
    if sp.get("purge_check") == "unknown":
        con.print("[yellow]purge    pending purges unknown until the store can be read[/yellow]")
    w = d["wal"]
    if w["bytes"] or w["blocked_by_reader_since"]:
        style = "yellow" if w["high"] or w["blocked_by_reader_since"] else "default"
        con.print(f"[{style}]WAL      {_t(health.describe_wal(w))}[/{style}]")
    _print_watch(con, d["watch"], fleet["running"])
    for o in d["overdue"]:
        con.print(f"[yellow]overdue  {o['job']}: {_t(o['reason'])}[/yellow]")
    _print_jobs(con, d["jobs"])


#: Jobs ``quill status`` names (the latest run of each; ``quill jobs history`` lists runs).
STATUS_JOBS = 5


def _print_jobs(con: Any, runs: list[dict[str, Any]]) -> None:
    """One line per job for the latest of its ``runs`` (newest first), at most
    ``STATUS_JOBS``: a job run often (a WAL checkpoint after each large import chunk) does
    not push the others off the screen; how many of ``runs`` were its own is said (of any
    outcome: the line's outcome is the latest run's)."""
    latest: dict[str, dict[str, Any]] = {}
    count: dict[str, int] = {}
    for run in runs:
        latest.setdefault(run["job"], run)
        count[run["job"]] = count.get(run["job"], 0) + 1
    for job, run in list(latest.items())[:STATUS_JOBS]:
        # Not "N of the last M runs": beside an outcome that read as N runs with that outcome.
        tail = (
            f" (ran {count[job]} times in the last {len(runs)} job runs)" if count[job] > 1 else ""
        )
        line = (
            f"job      {job:<15} {run['outcome']:<6} {render.when(run['started_at'])}{tail} "
            f"{_t(run.get('error') or '')}"
        )
        con.print(line.rstrip())


def _print_watch(con: Any, w: dict[str, Any], running: bool) -> None:
    """The live-capture lines: roots followed, how far behind, files it could not read."""
    if not w.get("enabled"):
        con.print("watch    off (\\[watch] enabled = false)")
        return
    if w.get("error"):
        con.print(f"[bold red]watch    state unreadable: {escape(w['error'])}[/bold red]")
        return
    roots = [r["path"] for r in w["roots"] if r["exists"]]
    watcher = w.get("watcher") or {}
    state = watcher.get("state")
    who = (
        f"watcher pid {watcher.get('pid')}"
        + (f" [yellow]({escape(state)})[/yellow]" if state and state != "watching" else "")
        if watcher.get("alive")
        else ("[yellow]watcher not running (restarting?)[/yellow]" if running else "not running")
    )
    behind = (
        "up to date"
        if not w["pending"]
        else (f"[yellow]{w['pending']} file(s) pending, {w['bytes_behind']} bytes behind[/yellow]")
    )
    con.print(
        f"watch    {len(roots)} folder(s) ({', '.join(escape(r) for r in roots) or 'none exist'})"
        f", {w['files']} file(s); {behind}; {who}"
    )
    if w.get("state_damaged"):
        con.print(
            f"[yellow]watch    state was unreadable ({_t(w['state_damaged'])}); re-imported[/]"
        )
    for u in w["unreadable"]:
        con.print(f"[yellow]unread   {escape(u['path'])}: {escape(u['reason'])}[/yellow]")


def _print_pg_store(con: Any, s: dict[str, Any]) -> None:
    """The store lines of a PostgreSQL store: server, sizes, every host's cursor, amcheck."""
    pg = s["postgres"]
    con.print(f"store    PostgreSQL {pg['server_version']} at {_t(pg['url'])}")
    con.print(
        f"         {human.store_counts(s)}; "
        f"store {filesize.decimal(pg['size_bytes'])}, "
        f"database {filesize.decimal(pg['database_bytes'])}; this host's cursor "
        + (str(s["cursor"]) if not s.get("cursor_problem") else "unknown (not this spool's, below)")
    )
    for sp in pg["spools"]:
        con.print(
            f"cursor   {_t(sp['spool_id']):<28} {sp['cursor']:<14} last commit {sp['age_s']} s ago"
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
            + (f" {_t(a['error'])}" if a.get("error") else "")
        )

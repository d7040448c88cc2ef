"""Search p95 on PostgreSQL vs SQLite over the same large store, without draining
a million messages through the PostgreSQL writer (~300 msgs/s here: about an hour).

``python -m bench.pg_copy load STATE_DB --pg URL --schema NAME [--no-finish]`` creates Quill's
PostgreSQL schema in a new schema ``NAME`` (``store.postgres`` through ``open_backend``: the
same tables, generated ``words`` column and indexes a store gets), then copies the ``sessions`` and
``messages`` rows of an SQLite store built by ``bench.build_store`` — rows the writer's own
apply path normalised — with ``COPY``. The two GIN indexes (word and trigram) are dropped
before the copy and re-created from their own definitions after it (a bulk build instead of
a million incremental GIN inserts), then ``ANALYZE``. The schema is kept for ``search``.

``python -m bench.pg_copy search STATE_DB --pg URL --schema NAME [--runs N]``: the §3
queries (``bench.search.QUERIES``) through both public reader APIs, warm, p50/p95 each and
PostgreSQL ÷ SQLite, whether both returned the same hits, and the heap rows and table blocks one
PostgreSQL search read (load-independent); ``--only NAME`` (repeatable: names hold commas)
picks queries, ``--drop`` removes the
schema afterwards. PostgreSQL is timed by ``bench.pg_floor`` in a subprocess, which also
gives the round trips and statements of one search and PostgreSQL's floor (``SELECT 1``, the
bare GIN query of each word query); ``--baseline REV`` times the ``quill`` of git revision
``REV`` on the same store too, alternating with this tree for ``--rounds`` rounds (same run);
each row also carries each round's CPU per PostgreSQL search, client and server
(``*_cpu_client_ms``, ``*_cpu_server_ms``: ``bench.pg_floor.cpu_per_call``).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

from .common import ms, pct, ratio, revision_tree, run_json
from .search import QUERIES


def _url(base: str, schema: str) -> str:
    return f"{base}{'&' if '?' in base else '?'}options=-csearch_path%3D{schema},public"


def load(state_db: Path, base: str, schema: str, *, finish: bool = True) -> dict[str, Any]:
    """Copy ``state_db``'s rows into ``schema`` (created with Quill's schema on the first run).
    Resumable: a later run copies only messages above the highest id already copied, so a
    copy can start while ``bench.build_store`` is still draining. ``finish`` copies the
    sessions, re-creates the GIN indexes and analyzes (run it once the source is complete)."""
    import apsw
    import psycopg

    from quill.store.factory import open_url as open_backend

    url = _url(base, schema)
    with psycopg.connect(base, autocommit=True) as c:
        fresh = (
            c.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone() is None
        )
        if fresh:
            c.execute(f'CREATE SCHEMA "{schema}"')
    t0 = time.perf_counter()
    with psycopg.connect(url) as pg:
        # Like Quill's own sessions (session_settings.SERVER_QUIET): a COPY that makes notices
        # (long words) would otherwise hang once they fill the socket.
        pg.execute("SET client_min_messages = error")
        if fresh:
            open_backend(
                url, state_db.parent / "unused.db", "pg-copy"
            ).close()  # Quill's schema, migrated
            pg.execute("CREATE TABLE bench_gin_defs (name text, definition text)")
            pg.execute(
                # By access method, not by the definition's text: a WHERE on
                # pg_get_indexdef() runs it on other schemas' indexes too, and one dropped
                # meanwhile fails the query ("could not open relation with OID").
                "INSERT INTO bench_gin_defs SELECT c.relname, pg_get_indexdef(c.oid) "
                "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "JOIN pg_am a ON a.oid = c.relam "
                "WHERE n.nspname = %s AND c.relkind = 'i' AND a.amname = 'gin'",
                (schema,),
            )
            for (name,) in pg.execute("SELECT name FROM bench_gin_defs").fetchall():
                pg.execute(f'DROP INDEX "{schema}"."{name}"')
            pg.commit()
        src = apsw.Connection(str(state_db), flags=apsw.SQLITE_OPEN_READONLY)
        above = pg.execute("SELECT coalesce(max(id), 0) FROM messages").fetchone()[0]
        copied = {"messages": _copy(pg, src, schema, "messages", "WHERE id > ?", (above,))}
        pg.commit()
        print(
            f"copied {copied['messages']:,} messages rows above id {above} "
            f"({time.perf_counter() - t0:.0f} s)",
            flush=True,
        )
        if finish:
            pg.execute("DELETE FROM sessions")
            copied["sessions"] = _copy(pg, src, schema, "sessions", "", ())
            pg.commit()
            for name, definition in pg.execute(
                "SELECT name, definition FROM bench_gin_defs"
            ).fetchall():
                pg.execute(definition)
                pg.commit()
                print(f"index {name} re-created ({time.perf_counter() - t0:.0f} s)", flush=True)
            pg.execute(
                "SELECT setval(pg_get_serial_sequence('messages', 'id'), "
                "(SELECT max(id) FROM messages))"
            )
            pg.commit()
            pg.autocommit = True
            pg.execute("ANALYZE")
        total = pg.execute("SELECT count(*) FROM messages").fetchone()[0]
    res = {
        "copied": copied,
        "messages_in_store": total,
        "seconds": round(time.perf_counter() - t0, 1),
        "finished": finish,
    }
    print(json.dumps(res), flush=True)
    return res


def _copy(pg: Any, src: Any, schema: str, table: str, where: str, args: tuple) -> int:
    """COPY ``table``'s rows (``where`` on the source) into PostgreSQL; the columns both
    sides have (PostgreSQL's generated ones are computed by the server). A message text the
    SQLite store keeps packed (``store.packed``: a BLOB) is copied as its text, as the
    PostgreSQL writer stores it."""
    from quill.store.packed import unpack

    theirs = {
        r[0]
        for r in pg.execute(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_schema = %s AND table_name = %s AND is_generated = 'NEVER'",
            (schema, table),
        )
    }
    cols = [r[1] for r in src.execute(f"PRAGMA table_info({table})") if r[1] in theirs]
    at = cols.index("content") if table == "messages" and "content" in cols else None
    n = 0
    with pg.cursor().copy(f"COPY {table} ({', '.join(cols)}) FROM STDIN") as cp:
        for row in src.execute(
            f"SELECT {', '.join(cols)} FROM {table} {where} ORDER BY rowid", args
        ):
            cp.write_row(row if at is None else (*row[:at], unpack(row[at]), *row[at + 1 :]))
            n += 1
    return n


def _heap_reads(url: str, kw: dict[str, Any]) -> tuple[int, int]:
    """Heap rows fetched and table blocks read from ``messages`` by one warm search with
    ``kw`` (the server's counters for the search's own transaction): figures the machine's
    load does not move."""
    from quill.store.postgres import search as pg_search
    from quill.store.postgres.connection import PgConnection

    conn = PgConnection(url)
    try:
        pg_search.search(conn, **kw)  # warm
        conn.execute("BEGIN")
        pg_search.search(conn, **kw)
        rows, blocks = conn.execute(
            "SELECT pg_stat_get_xact_tuples_fetched('messages'::regclass), "
            "pg_stat_get_xact_blocks_hit('messages'::regclass) "
            "+ pg_stat_get_xact_blocks_fetched('messages'::regclass)"
        ).fetchone()
        conn.execute("COMMIT")
        return rows, blocks
    finally:
        conn.close()


def search(
    state_db: Path,
    base: str,
    schema: str,
    runs: int,
    only: set[str] | None = None,
    baseline: str | None = None,
    rounds: int = 1,
) -> list[dict[str, Any]]:
    """One row per query (and per floor query): p50/p95 on each backend (and the baseline
    revision's PostgreSQL), ratios, round trips, same hits. Prints each row as JSON."""
    from quill.store.read.reader import Reader

    url = _url(base, schema)
    load_before = os.getloadavg()
    lite: dict[str, tuple[list[float], list[int]]] = {}
    with Reader(state_db) as reader:
        for name, kw in QUERIES:
            if only and name not in only:
                continue
            reader.search(**kw)  # warm
            ts = []
            for _ in range(runs):
                t = time.perf_counter()
                hits = reader.search(**kw)
                ts.append(time.perf_counter() - t)
            lite[name] = (ts, [h["message_id"] for h in hits])
    trees = {"postgres": None, **({"baseline": baseline} if baseline else {})}
    pg: dict[str, dict[str, Any]] = {k: {"queries": {}, "floor": {}} for k in trees}
    args = [url, "--runs", str(runs)] + [a for n in sorted(only or ()) for a in ("--only", n)]
    for _ in range(rounds):  # alternate the trees so both see the same load
        for kind, rev in trees.items():
            with revision_tree(rev) as tree:
                got = run_json("bench.pg_floor", tree, *args)
            for part in ("queries", "floor"):
                for name, v in got[part].items():
                    have = pg[kind][part].setdefault(name, v if part == "queries" else [])
                    if part == "queries":
                        if have is not v:
                            have["times"] += v["times"]
                        for k in ("client_ms", "server_ms"):  # one figure per round
                            have.setdefault(f"{k}_rounds", []).append(v.get(k))
                    else:
                        have += v
    out = []
    for name, (ts, ids) in lite.items():
        row: dict[str, Any] = {"query": name, "sqlite_p50_ms": ms(pct(ts, 50))}
        row["sqlite_p95_ms"] = ms(pct(ts, 95))
        for kind in trees:
            q = pg[kind]["queries"][name]
            row[f"{kind}_p50_ms"] = ms(pct(q["times"], 50))
            row[f"{kind}_p95_ms"] = ms(pct(q["times"], 95))
            row[f"{kind}_vs_sqlite_p95"] = ratio(row[f"{kind}_p95_ms"], row["sqlite_p95_ms"])
            for k in ("client_ms", "server_ms"):  # CPU per search, each round's (ms)
                row[f"{kind}_cpu_{k}"] = q.get(f"{k}_rounds")
            row[f"{kind}_round_trips"] = q["round_trips"]
            row[f"{kind}_statements"] = q["statements"]
            # The copy keeps SQLite's ids, so equal pages are equal id lists, in order.
            row[f"{kind}_same_hits"] = q["ids"] == ids
        row["postgres_heap_rows"], row["postgres_table_blocks"] = _heap_reads(
            url, dict(QUERIES)[name]
        )
        print(json.dumps(row), flush=True)
        out.append(row)
    for name in pg["postgres"]["floor"]:
        row = {"floor": name}
        for kind in trees:
            ts = pg[kind]["floor"][name]
            row[f"{kind}_p50_ms"], row[f"{kind}_p95_ms"] = ms(pct(ts, 50)), ms(pct(ts, 95))
        print(json.dumps(row), flush=True)
        out.append(row)
    print(f"load average before {load_before}, after {os.getloadavg()}", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.pg_copy", description=__doc__.splitlines()[0]
    )
    ap.add_argument("action", choices=("load", "search"))
    ap.add_argument("state_db", type=Path)
    ap.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/postgres")
    ap.add_argument("--schema", required=True)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=1, help="search: rounds of every tree")
    ap.add_argument("--baseline", help="search: also time the quill of this git revision")
    ap.add_argument(
        "--only", action="append", help="search: a query name, repeatable (default: all)"
    )
    ap.add_argument("--drop", action="store_true", help="drop the schema after searching")
    ap.add_argument(
        "--no-finish", action="store_true", help="load: copy messages only (resume later)"
    )
    args = ap.parse_args(argv)
    if args.action == "load":
        load(args.state_db, args.pg, args.schema, finish=not args.no_finish)
    else:
        only = set(args.only) if args.only else None
        search(args.state_db, args.pg, args.schema, args.runs, only, args.baseline, args.rounds)
        if args.drop:
            import psycopg

            with psycopg.connect(args.pg, autocommit=True) as c:
                c.execute(f'DROP SCHEMA IF EXISTS "{args.schema}" CASCADE')
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

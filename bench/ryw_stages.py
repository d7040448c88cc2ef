"""Where one ``QuillSession.add_items`` spends its time: every stage from the call to its
return, timestamped in the client and in the writer (another process), per call, over many
calls; what ``bench.read_your_writes`` measures as one figure, taken apart.

    .venv/bin/python -m bench.ryw_stages [--calls 300] [--pg URL [--pg-async]]
        [--baseline REV] [--rounds N] [--json]

Each round runs in a fresh process (this tree's, and with ``--baseline`` the revision's,
alternating), so the patches of one never reach the other; medians of rounds are printed.

The writer is ``workers.writer.Writer`` run as the fleet runs it (``Writer.run`` in a process
of its own, ``[watch]`` off), with wrappers that record ``time.monotonic_ns()`` (one clock for
every process of the machine) at each stage's end; the client is the bench process. Stages
of call *i* (each from the end of the one before):

====================  ========================================================================
``append``            the call to the spool record written: thread hop, item conversion,
                      precheck, encode, ``write``
``fdatasync``         the record made durable (``Spool._sync_pending``)
``ring writer``       the writer's doorbell rung (``Spool._ring``)
``writer wake``       the writer's ``Doorbell.wait`` returned (absent: the writer was awake)
``to read``           the writer's drain step began (its loop around the wake)
``chunk read``        the spool read, up to the store's ``apply_chunk``
``apply``             the op applied in the transaction, up to its ``COMMIT``
``commit``            the ``COMMIT`` (PostgreSQL: its round trip and WAL flush)
``ring waiters``      the waiters' doorbells rung (``Writer._wake_waiters``)
``client wake``       the client's event loop saw its ring
``client read``       the look that found the cursor past the ack, with the outcome
``return``            ``add_items`` returned
====================  ========================================================================

Also per call: looks made, wake-ups seen by the client, the writer's wake-ups, the writer's
and the client's CPU, PostgreSQL round trips of the apply and of the client's looks (libpq
trace, ``store.postgres.wire``), and which writer side work (status publish, index slice,
idle work) and garbage collections overlapped the slowest tenth of the calls.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import gc
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from .common import revision_tree, run_json, tempdir
from .ryw_stages_report import _stats, analyse, report

MARKS: list[tuple[str, int]] = []
COUNTS: dict[str, int] = {}


def mark(name: str) -> None:
    MARKS.append((name, time.monotonic_ns()))


def _around(owner: object, attr: str, before: str | None, after: str | None, when=None) -> None:
    """Wrap ``owner.attr`` to mark ``before`` on entry and ``after`` on return (``when(result)``
    true, when given)."""
    inner = getattr(owner, attr)

    @functools.wraps(inner)
    def wrapper(*args, **kwargs):
        if before:
            mark(before)
        out = inner(*args, **kwargs)
        if after and (when is None or when(out)):
            mark(after)
        return out

    setattr(owner, attr, wrapper)


def _gc_marks(info_prefix: str) -> None:
    gc.callbacks.append(lambda phase, info: mark(f"{info_prefix}gc_{phase}"))


def _trace_pg(conn, counter: str):
    """A ``wire.traced`` block on ``conn`` adding its round trips to ``COUNTS[counter]``
    (a no-op context for an SQLite connection)."""
    if not hasattr(conn, "raw"):
        return contextlib.nullcontext()
    from quill.store.postgres import wire

    @contextlib.contextmanager
    def block():
        with wire.traced(conn) as w:
            yield
        COUNTS[counter] = COUNTS.get(counter, 0) + w.round_trips

    return block()


# -- the writer's process --------------------------------------------------------------------


def writer_main(home: str, out: str) -> None:
    """Run the data dir's writer as ``worker_main writer`` does, with the stage marks; on
    SIGTERM write ``{"marks", "counts", "cpu_s"}`` as JSON to ``out``."""
    import threading

    from quill import home as qhome
    from quill.home import doorbell
    from quill.ops import logs
    from quill.store.apply import chunk
    from quill.workers import drain, writer

    os.umask(0o077)
    settings = qhome.load(home)
    settings.ensure_dirs()
    log = logs.configure(settings.logs_dir, "writer")
    stop = threading.Event()
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, lambda *_: stop.set())
    _around(doorbell.Doorbell, "wait", None, "w_wake", when=bool)
    step = drain.Drain.step

    def traced_step(self, on_commit=None):
        t0 = time.monotonic_ns()
        done = step(self, on_commit)
        if done.entries:
            MARKS.append(("w_step", t0))
        return done

    drain.Drain.step = traced_step
    transaction = chunk.transaction

    @contextlib.contextmanager
    def traced_transaction(conn):
        with transaction(conn) as c:
            yield c
            mark("w_precommit")
        mark("w_committed")

    chunk.transaction = traced_transaction
    from quill.store.postgres import connection as pgc

    pg_execute = pgc.PgConnection.execute

    def traced_execute(self, sql, *args, **kwargs):
        if sql == "COMMIT":
            mark("w_precommit")
            out = pg_execute(self, sql, *args, **kwargs)
            mark("w_committed")
            return out
        return pg_execute(self, sql, *args, **kwargs)

    pgc.PgConnection.execute = traced_execute
    _around(writer.Writer, "_wake_waiters", None, "w_rung")
    _around(writer.Writer, "_publish", "w_publish0", "w_publish1")
    _around(writer.Writer, "_index", "w_index0", "w_index1")
    _around(drain.Drain, "seal_torn_tails", "w_seal0", "w_seal1")
    _gc_marks("w_")
    w = writer.Writer(settings, log)
    store_cls = type(w.store)
    apply = store_cls.apply_chunk

    def traced_apply(self, entries, on_reject):
        mark("w_read")
        with _trace_pg(self.conn, "apply_round_trips"):
            out = apply(self, entries, on_reject)
        COUNTS["applies"] = COUNTS.get("applies", 0) + 1
        return out

    store_cls.apply_chunk = traced_apply
    _around(store_cls, "idle_work", "w_idle_work0", "w_idle_work1")
    try:
        w.run(stop)
    finally:
        cpu = os.times()
        Path(out).write_text(
            json.dumps(
                {"marks": MARKS, "counts": COUNTS, "cpu_s": cpu.user + cpu.system},
            )
        )


# -- the client's side -----------------------------------------------------------------------


def _client_marks() -> None:
    from quill.home import doorbell
    from quill.ops.client.client import Client
    from quill.ops.integrations.openai_agents import QuillSession
    from quill.spool.producer import Spool

    _around(Spool, "_sync_pending", "c_written", "c_synced")
    _around(Spool, "_ring", None, "c_rang")
    _around(QuillSession, "_applied", "c_acked", None)
    # The event loop's reader consumes the ring: ``take`` where it exists, else ``clear``.
    took = "take" if hasattr(doorbell.Doorbell, "take") else "clear"
    _around(doorbell.Doorbell, took, None, "c_woken", when=bool)
    look = Client._look

    def traced_look(self, looker, last, acks):
        COUNTS["looks"] = COUNTS.get("looks", 0) + 1
        reader = looker.reader
        with _trace_pg(reader.conn if reader is not None else None, "look_round_trips"):
            found = look(self, looker, last, acks)
        if found is not None:
            mark("c_found")
        return found

    Client._look = traced_look
    _gc_marks("c_")


async def _calls(session, calls: int) -> None:
    from .read_your_writes import _turn

    for i in range(calls):
        mark("c_start")
        await session.add_items(_turn(i))
        mark("c_done")


def floor(tmp: Path, calls: int, pg: str | None) -> dict:
    """The same run's floors, seconds per call: the SDK's ``SQLiteSession.add_items``, a
    bare 4 KiB append + ``fdatasync`` of a growing file (as the spool's), the same 4 KiB
    writes into a file ``posix_fallocate``d beforehand (its size does not change, so
    ``fdatasync`` commits no metadata: what SQLite's reused WAL gets), and with ``pg`` a
    one-row INSERT + COMMIT round trip (its WAL flush) and a ``SELECT 1`` round trip (none)."""
    from .read_your_writes import sqlite_session

    out = {"sdk": _stats(sqlite_session(tmp, calls))}
    for name, prealloc in (("fdatasync", False), ("fdatasync prealloc", True)):
        fd = os.open(tmp / "floor.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        if prealloc:  # the blocks and the size exist before: no journal commit per sync
            os.posix_fallocate(fd, 0, 4096 * calls)
            os.fsync(fd)
        syncs = []
        for i in range(calls):
            t0 = time.perf_counter()
            os.pwrite(fd, b"x" * 4095 + b"\n", 4096 * i)
            os.fdatasync(fd)
            syncs.append(time.perf_counter() - t0)
        os.close(fd)
        out[name] = _stats(syncs)
    if pg:
        import psycopg

        table = "rywfloor_" + uuid.uuid4().hex[:8]  # logged (a temp table's commit flushes no WAL)
        with psycopg.connect(pg, autocommit=True) as conn:
            conn.execute(f"CREATE TABLE {table} (id serial, t text)")
            commits = []
            try:
                for _ in range(calls):
                    t0 = time.perf_counter()
                    conn.execute(f"BEGIN; INSERT INTO {table} (t) VALUES ('x'); COMMIT")
                    commits.append(time.perf_counter() - t0)
            finally:
                conn.execute(f"DROP TABLE {table}")
            trips = []
            for _ in range(calls):  # a round trip that flushes no WAL: what each other one costs
                t0 = time.perf_counter()
                conn.execute("SELECT 1").fetchone()
                trips.append(time.perf_counter() - t0)
        out["pg_commit"] = _stats(commits)
        out["pg_round_trip"] = _stats(trips)
    return out


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (/proc, clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(calls: int, pg: str | None, pg_options: str = "") -> dict:
    """One run: per-call stage seconds and the counts (``analyse``); ``pg_options``: more
    ``-c`` settings for the writer's and readers' PostgreSQL sessions (URL-encoded)."""
    from quill import AsyncClient
    from quill.ops.integrations.openai_agents import QuillSession

    _client_marks()
    with tempdir("quill-ryw-stages-") as tmp:
        home = tmp / "home"
        home.mkdir()
        schema = None
        config = ""
        if pg:
            import psycopg

            schema = "rywstage_" + uuid.uuid4().hex[:8]
            with psycopg.connect(pg, autocommit=True) as conn:
                conn.execute(f'CREATE SCHEMA "{schema}"')
            url = f"{pg}{'&' if '?' in pg else '?'}options=-csearch_path%3D{schema},public"
            url += pg_options
            config = f"[store]\nurl = {json.dumps(url)}\n"
        (home / "config.toml").write_text(config + "[watch]\nenabled = false\n")
        out = tmp / "writer.json"
        root = Path(__file__).resolve().parent.parent
        proc = subprocess.Popen(
            [sys.executable, "-m", "bench.ryw_stages", "--writer", str(home), str(out)],
            cwd=root,
        )
        try:
            session = QuillSession("bench", client=AsyncClient(home), wait_timeout=60)
            asyncio.run(session.add_items([{"role": "user", "content": "warm-up"}]))
            MARKS.clear()
            COUNTS.clear()
            cpu0, wcpu0 = os.times(), _cpu_s(proc.pid)
            asyncio.run(_calls(session, calls))
            cpu1, wcpu1 = os.times(), _cpu_s(proc.pid)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
            if schema:
                from .read_your_writes import _drop_schema

                _drop_schema(pg, schema)
        wrote = json.loads(out.read_text())
        floors = floor(tmp, calls, pg)
    client_cpu = (cpu1.user + cpu1.system) - (cpu0.user + cpu0.system)
    return analyse(MARKS, [tuple(m) for m in wrote["marks"]], calls) | {
        "client_cpu_ms_per_call": client_cpu / calls * 1e3,
        "writer_cpu_ms_per_call": (wcpu1 - wcpu0) / calls * 1e3,
        "floor": floors,
        "counts": {**COUNTS, **{f"writer_{k}": v for k, v in wrote["counts"].items()}},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--pg", default=None, help="PostgreSQL URL: a PostgreSQL store")
    ap.add_argument(
        "--pg-async",
        action="store_true",
        help="the writer's sessions with synchronous_commit=off (a design probe, not a default)",
    )
    ap.add_argument("--baseline", default=None, help="git revision to measure in the same run")
    ap.add_argument("--rounds", type=int, default=1, help="alternating rounds per revision")
    ap.add_argument("--json", action="store_true", help="one round of this tree, as JSON")
    ap.add_argument("--writer", nargs=2, metavar=("HOME", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.writer:
        writer_main(*args.writer)
        return
    options = "%20-csynchronous_commit%3Doff" if args.pg_async else ""
    if args.json:
        print(json.dumps(measure(args.calls, args.pg, options)))
        return
    one = ["--calls", str(args.calls), "--json"] + (["--pg", args.pg] if args.pg else [])
    one += ["--pg-async"] if args.pg_async else []
    runs: dict[str, list[dict]] = {f"baseline {args.baseline}": [], "this tree": []}
    with revision_tree(args.baseline) as tree:
        for _ in range(args.rounds):
            if args.baseline:
                runs[f"baseline {args.baseline}"].append(run_json("bench.ryw_stages", tree, *one))
            runs["this tree"].append(run_json("bench.ryw_stages", "", *one))
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    backend = "PostgreSQL" if args.pg else "SQLite"
    if args.pg_async:
        backend += " (synchronous_commit=off)"
    print(f"{args.calls} calls per round, {args.rounds} round(s), {backend} store, load {load}")
    report(runs)


if __name__ == "__main__":
    main()

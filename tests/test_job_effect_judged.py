"""A VACUUM killed after it committed is recorded as done, judged from its effect.

A real writer process (the production ``Writer``) runs a real queued ``vacuum`` on a real store
with free pages; SQLite's WAL hook (called after each commit) pauses that process right after
the VACUUM's commit, before the job records its end, and the test kills it with SIGKILL. The
next writer's start judges the run from the file: freelist 0 and fewer pages.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from conftest import quill_env
from harness import InProcessWriter

from quill import home
from quill.jobs.queues import build_for
from quill.store import Reader
from quill.store.sqlite.connection import open_writer, transaction

#: The writer process: steps the production Writer; once it has published that the vacuum job
#: runs (its start row committed), the next commit is the VACUUM's own: say so, wait for SIGKILL.
WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from quill import home
    from quill.ops import logs
    from quill.workers.writer import Writer

    cfg = home.load(Path(sys.argv[1]))
    marker = Path(sys.argv[2])
    stop_at = int(sys.argv[3]) if len(sys.argv) > 3 else 1  # the job's commits before VACUUM's
    writer = Writer(cfg, logs.configure(cfg.logs_dir, "writer"))
    writer.initialize()
    commits = []

    def after_commit(conn, db, pages):
        # The writer publishes the job it runs after the run's start row committed and
        # before the job begins: the job's commits follow, the VACUUM's last.
        if (writer.run_dir.last("writer") or {}).get("job") == "vacuum":
            commits.append(pages)
            if len(commits) == stop_at:
                marker.write_text(str(pages))
                time.sleep(600)  # the VACUUM is committed to the WAL; SIGKILL comes here
        return 0

    connect = writer.store.connect

    def connect_with_hook():
        figures = connect()
        writer.store.conn.set_wal_hook(after_commit)  # on the writer's own connection
        return figures

    writer.store.connect = connect_with_hook
    while True:
        writer.loop_once(time.monotonic())
        time.sleep(0.01)
    """
)


def _free_pages(db) -> None:
    """Add 8 MiB of rows to a test-only table and drop it: the pages go to the freelist."""
    conn = open_writer(db)
    try:
        with transaction(conn):
            conn.execute("CREATE TABLE ballast(x BLOB)")
            for _ in range(8):
                conn.execute("INSERT INTO ballast VALUES (randomblob(1048576))")
        with transaction(conn):
            conn.execute("DROP TABLE ballast")
        conn.wal_checkpoint(mode=3)  # TRUNCATE
    finally:
        conn.close()


def _kill_at_commit(w: InProcessWriter, tmp_path, commit: int = 1) -> None:
    """Run the queued vacuum in a real writer process and SIGKILL it right after the job's
    ``commit``-th commit (the VACUUM's)."""
    marker = tmp_path / "vacuum-committed"
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    proc = subprocess.Popen(
        [sys.executable, str(script), str(w.root), str(marker), str(commit)],
        env=quill_env(w.root),
    )
    _kill_once_committed(proc, marker)


def _kill_once_committed(proc: subprocess.Popen, marker: Path, what: str = "the VACUUM") -> None:
    """SIGKILL the process as soon as it writes ``marker`` (``what`` committed); fails if it
    exits first or takes over 60 s."""
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert proc.poll() is None, "the process exited"
            assert time.monotonic() < deadline, f"{what} never committed"
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()


def test_a_vacuum_that_packed_texts_in_a_store_without_free_pages_is_judged_from_its_effect(
    tmp_path,
):
    """A store with no free page whose texts were stored plain (a higher ``[store]
    pack_min_bytes`` before): the vacuum job packs them (one commit), which frees pages, and
    VACUUMs because it packed (a second commit); killed after that, the run is judged done
    from the file (no free page, fewer pages than at its start: only a VACUUM gives pages
    back) — not 'died before it finished', which the next run, with nothing left to pack or
    free, would never correct."""
    w = InProcessWriter(tmp_path / "home", store={"pack_min_bytes": 10**9})
    for k in range(20):
        w.say(
            f"s{k}", *[f"log line {k}.{i}: " + "build output, all green " * 400 for i in range(3)]
        )
    w.until_idle()
    w.writer.shutdown()
    db = w.cfg.state_db
    conn = open_writer(db)
    try:
        conn.execute("VACUUM")  # no free page at the job's start
        conn.wal_checkpoint(mode=3)
        assert conn.execute("PRAGMA freelist_count").fetchone()[0] == 0
        assert conn.execute(
            "SELECT count(*) FROM messages WHERE typeof(content) = 'text'"
        ).fetchone() == (60,)
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
    finally:
        conn.close()
    config = w.root / "config.toml"
    config.write_text(
        config.read_text().replace(f"pack_min_bytes = {10**9}", "pack_min_bytes = 1024")
    )
    build_for(w.cfg).enqueue("vacuum")
    _kill_at_commit(w, tmp_path, commit=2)  # the packing's slice, then the VACUUM

    w.cfg = home.load(w.root)
    w.writer = w.start()
    w.turn()  # the next writer opens the store and closes its predecessor's runs
    with Reader(db) as r:
        [run] = r.job_runs(job="vacuum")
        assert r.conn.execute(
            "SELECT count(*) FROM messages WHERE typeof(content) = 'blob'"
        ).fetchone() == (60,)
        assert r.conn.execute("PRAGMA freelist_count").fetchone()[0] == 0
        assert r.conn.execute("PRAGMA page_count").fetchone()[0] < pages
    assert run["outcome"] == "ok", run
    assert run["figures"]["judged"].startswith("completed (judged from effect: "), run
    w.close()


def test_a_vacuum_killed_after_its_commit_is_recorded_as_completed_from_its_effect(tmp_path):
    w = InProcessWriter(tmp_path / "home")
    w.say("s", *[f"message {k}" for k in range(50)])
    w.until_idle()
    w.writer.shutdown()
    db = w.cfg.state_db
    _free_pages(db)
    with Reader(db) as r:
        pages = r.conn.execute("PRAGMA page_count").fetchone()[0]
        free = r.conn.execute("PRAGMA freelist_count").fetchone()[0]
    assert free / pages > 0.5
    build_for(w.cfg).enqueue("vacuum")
    marker = tmp_path / "vacuum-committed"
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    proc = subprocess.Popen(
        [sys.executable, str(script), str(w.root), str(marker)], env=quill_env(w.root)
    )
    _kill_once_committed(proc, marker)
    assert db.stat().st_size >= pages * 4096 * 0.9, "the VACUUM is still only in the WAL"

    w.writer = w.start()
    w.turn()  # the next writer opens the store and closes its predecessor's runs
    with Reader(db) as r:
        [run] = r.job_runs(job="vacuum")
        assert r.conn.execute("PRAGMA freelist_count").fetchone()[0] == 0
    assert run["outcome"] == "ok", run
    assert run["error"] is None
    judged = run["figures"]["judged"]
    assert judged.startswith("completed (judged from effect: freelist ")
    assert "→ 0" in judged and "shrank from" in judged
    assert run["figures"]["before"]["freelist_count"] == free
    assert run["figures"]["after"]["freelist_count"] == 0
    # The next run finds nothing to do: the history still says a VACUUM happened.
    build_for(w.cfg).enqueue("vacuum")
    w.until_idle()
    with Reader(db) as r:
        runs = r.job_runs(job="vacuum")
    assert [x["outcome"] for x in runs] == ["ok", "ok"]
    assert runs[0]["figures"].get("skipped") and "judged" in runs[1]["figures"]
    w.close()
    json.dumps(runs)  # figures stay plain JSON


#: The job worker's side of a snapshot run (``run_recorded``: records through the store
#: queue); right after the verified copy is renamed into place, before the run records its
#: end, it says so and waits for SIGKILL.
SNAPSHOTTER = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from quill import home
    from quill.jobs import catalog
    from quill.jobs.queues import build_for, resolve_params, run_recorded

    cfg = home.load(Path(sys.argv[1]))
    marker = Path(sys.argv[2])
    rename = os.replace

    def rename_then_wait(src, dst):
        rename(src, dst)
        if Path(dst).name.startswith("snapshot-"):
            marker.write_text(str(dst))
            time.sleep(600)

    os.replace = rename_then_wait
    spec = catalog.get("snapshot")
    run_recorded(spec, build_for(cfg), resolve_params(spec, cfg, {}), runner="consumer")
    """
)


def test_a_snapshot_killed_after_its_verified_copy_is_recorded_as_completed(tmp_path):
    from quill.jobs import catalog

    w = InProcessWriter(tmp_path / "home")
    w.say("s", *[f"message {k}" for k in range(20)])
    w.until_idle()
    marker = tmp_path / "snapshot-made"
    script = tmp_path / "snapshotter.py"
    script.write_text(SNAPSHOTTER)
    proc = subprocess.Popen(
        [sys.executable, str(script), str(w.root), str(marker)], env=quill_env(w.root)
    )
    _kill_once_committed(proc, marker, "the snapshot")
    w.until_idle()  # the writer applies the run's start row
    # What a restarted job worker queues first (workers/consumer.py).
    build_for(w.cfg).tasks[catalog.CLOSE_INTERRUPTED](
        runner="consumer", before=time.time(), snapshots_dir=str(w.cfg.snapshots_dir)
    )
    w.until_idle()
    with Reader(w.cfg.state_db) as r:
        [run] = r.job_runs(job="snapshot")
    made = os.path.basename(marker.read_text())
    assert run["outcome"] == "ok", run
    assert run["figures"]["judged"] == (
        f"completed (judged from effect: verified snapshot {made} covering spool position "
        f"{made.rsplit('-', 2)[1]}:{made.rsplit('-', 2)[2].removesuffix('.db')})"
    )
    w.close()

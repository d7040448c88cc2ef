"""The multi-host torture run: several hosts (data dirs, each running a real ``quill run``
fleet) on ONE private PostgreSQL store and ONE private Redis queue (servers of this test only,
started from scratch: the shared ones are never restarted). Producers on every host (real
client processes, ``torture_producer.py``) append numbered messages and log every ack. Under
them: random ``kill -9`` of writers (the supervisor restarts them) and of whole fleets
(supervisor and workers; the test starts the fleet again), one PostgreSQL restart (``pg_ctl
stop -m immediate``, ``start`` 8 s later) and one Redis restart (its queue is lost with it:
Redis keeps nothing here).

``quill status --json`` is sampled on every host throughout and each sample is judged against
what the test knows (``_judge``): it never says 0 bytes pending while an ack logged before the
call is not applied in the store, its ``cursor_source`` matches whether the store could be
read, it shows no halt, and the fleet is running exactly when the test has it running. At the
end every acknowledged message is read back through the client exactly once, each producer's
messages in its own order in every session, nothing quarantined or rejected, and every host's
status says 0 pending, lag 0, no halt, no crash loop.

PostgreSQL and Redis by nature (a multi-host store). A few minutes of real time on two busy
cores, so only under ``QUILL_TORTURE=1``; ``QUILL_TORTURE_S`` sets the producing time
(default 180 s), ``QUILL_TORTURE_SEED`` the chaos (default 24), ``QUILL_TORTURE_SHARE`` how
often a producer writes to the session every host writes (every 15th message by default),
``QUILL_TORTURE_REPORT`` a file for the figures (also printed).

Every 3rd message (``QUILL_TORTURE_SHARE=3``) makes a writer that fell behind (its fleet
killed, the server restarted) apply its backlog of the shared session as late insertions:
each chunk of them is one bulk run placed through the order-key index
(``store/apply/order.py`` ``plan``); before that, chunks of 500 such ops took 47–125 s and
the drain lagged up to ~370 s, with nothing lost, doubled or out of order
(docs/backends.md, "Torture run")."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import quill_env
from private_servers import PrivatePostgres, PrivateRedis, private_pg_missing
from run_resources import REPO

pytestmark = [
    pytest.mark.skipif(
        os.environ.get("QUILL_TORTURE") != "1",
        reason="multi-host torture run: minutes of real time with its own PostgreSQL and Redis "
        "servers; set QUILL_TORTURE=1",
    ),
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server is missing"),
    pytest.mark.skipif(bool(private_pg_missing()), reason=private_pg_missing() or ""),
]
psycopg = pytest.importorskip("psycopg")

from torture_helpers import (  # noqa: E402
    HOSTS,
    PG_DOWN_S,
    PRODUCER,
    PRODUCERS_PER_HOST,
    WRITER_KILLS_PER_MIN,
    Host,
    Sampler,
    _until,
)


def test_hosts_under_kills_and_server_restarts_store_every_ack_once_and_status_tells_the_truth(
    tmp_path,
):
    duration = float(os.environ.get("QUILL_TORTURE_S", "180"))
    rng = random.Random(int(os.environ.get("QUILL_TORTURE_SEED", "24")))
    share = int(os.environ.get("QUILL_TORTURE_SHARE", "15"))
    pg = PrivatePostgres().start()
    rds = PrivateRedis(tmp_path / "redis").start()
    hosts = [Host(tmp_path, i, pg.url, rds.url) for i in range(HOSTS)]
    sampler = Sampler(hosts, pg.url)
    figures: dict = {"hosts": HOSTS, "producers": HOSTS * PRODUCERS_PER_HOST, "share": share}
    events: list[tuple[float, str]] = []
    started = time.monotonic()
    try:
        for h in hosts:
            h.start_fleet()
        end = time.time() + duration
        for h in hosts:
            for name in h.names:
                h.producers.append(
                    subprocess.Popen(
                        [sys.executable, str(PRODUCER), str(h.home), name, str(h.acks_file(name))]
                        + [str(end), str(share)],
                        cwd=REPO,
                        env=quill_env(h.home),
                        stderr=subprocess.PIPE,
                    )
                )
        sampler.start()
        t0 = time.monotonic()
        pg_at, redis_at = t0 + duration * 0.35, t0 + duration * 0.65
        down: Host | None = None  # the one host whose fleet is killed, until restarted
        up_again_at = 0.0
        writer_kills = fleet_kills = 0
        while time.monotonic() < t0 + duration:
            time.sleep(rng.uniform(3.0, 7.0))
            now = time.monotonic()
            if pg_at and now >= pg_at:
                events.append((now - t0, "pg stop -m immediate"))
                pg.stop("immediate")
                time.sleep(PG_DOWN_S)  # long enough for status samples to see it away
                pg.start()
                pg_at = 0.0
                events.append((time.monotonic() - t0, "pg back"))
            elif redis_at and now >= redis_at:
                events.append((now - t0, "redis stop"))
                rds.stop()
                time.sleep(3.0)
                rds.start()
                redis_at = 0.0
                events.append((time.monotonic() - t0, "redis back"))
            if down is not None and now >= up_again_at:
                down.start_fleet()
                events.append((time.monotonic() - t0, f"fleet {down.index} started"))
                down = None
            elif down is None and rng.random() < 0.25:
                down = rng.choice(hosts)
                down.kill_fleet()
                fleet_kills += 1
                up_again_at = time.monotonic() + rng.uniform(2.0, 8.0)
                events.append((time.monotonic() - t0, f"fleet {down.index} kill -9"))
            candidates = [
                h
                for h in hosts
                if h is not down
                and sum(1 for k in h.writer_kills if k > now - 60) < WRITER_KILLS_PER_MIN
            ]
            if candidates:
                victim = rng.choice(candidates)
                if victim.kill_writer():
                    writer_kills += 1
                    events.append((time.monotonic() - t0, f"writer {victim.index} kill -9"))
            assert sampler.failure is None, sampler.failure
        if down is not None:
            down.start_fleet()
        for h in hosts:
            for p in h.producers:
                assert p.wait(120) == 0, p.stderr.read().decode()[-3000:]
        produced_s = time.monotonic() - t0

        def drained() -> bool:
            for h in hosts:
                s = sampler.sample(h)
                if s.get("pending") != 0 or s.get("source") != "store":
                    return False
            return True

        _until(drained, 600, "every host's spool applied")
        drain_s = time.monotonic() - t0 - produced_s
        time.sleep(35.0)  # the supervisors' crash-loop flags clear after 30 s up
        final = [sampler.sample(h) for h in hosts]
        sampler.stopping.set()
        sampler.join(300)
        assert sampler.failure is None, sampler.failure
        exits = [h.stop_fleet() for h in hosts]
        figures.update(
            seconds=round(time.monotonic() - started),
            producing_s=round(produced_s),
            drain_s=round(drain_s),
            writer_kills=writer_kills,
            fleet_kills=fleet_kills,
            pg_restarts=1 if not pg_at else 0,
            redis_restarts=1 if not redis_at else 0,
            status_samples=len(sampler.samples),
            samples_store_unreadable=sum(s.get("store") == "unreadable" for s in sampler.samples),
            samples_queue_down=sum(bool(s.get("queue_down")) for s in sampler.samples),
            samples_pending=sum(bool(s.get("pending")) for s in sampler.samples),
            max_lag_s=max((s.get("lag") or 0.0) for s in sampler.samples),
            samples_crash_loop=sum(bool(s.get("crash_loops")) for s in sampler.samples),
            lag0_unchecked=sampler.unchecked,
            violations=len(sampler.violations),
            violations_seen=[
                {k: v.get(k) for k in ("host", "at", "what", "source", "store", "pending")}
                for v in sampler.violations
            ],
            restarts={h.index: _restarts(h) for h in hosts},
            writer_kills_since_start={h.index: h.kills_since_start for h in hosts},
            orphan_writer_kills=sum(h.orphan_kills for h in hosts),
        )

        # Read back through the client: each acknowledged message exactly once, in order.
        import quill

        acked = [a for h in hosts for a in h.acked()]
        sessions = {a["session"] for a in acked}
        seen: dict[tuple[str, int], int] = {}
        order_breaks = []
        for i, session in enumerate(sorted(sessions)):
            client = quill.Client(hosts[i % HOSTS].home)
            last: dict[str, int] = {}
            for m in client.messages(session):
                producer, n = m["content"].split()
                key = (producer, int(n[1:]))
                seen[key] = seen.get(key, 0) + 1
                if last.get(producer, -1) >= key[1]:
                    order_breaks.append((session, producer, last[producer], key[1]))
                last[producer] = key[1]
        want = {(a["producer"], a["n"]) for a in acked}
        with psycopg.connect(pg.url) as conn:
            rejected = conn.execute("SELECT count(*) FROM rejected_batches").fetchone()[0]
        figures.update(
            acked=len(acked),
            stored=sum(seen.values()),
            doubles=sum(c - 1 for c in seen.values() if c > 1),
            lost=len(want - set(seen)),
            unacked_stored=len(set(seen) - want),
            order_breaks=len(order_breaks),
            rejected=rejected,
        )
    finally:
        sampler.stopping.set()
        figures["hosts_at_end"] = [_diagnose(h, pg.url, sampler) for h in hosts]
        for h in hosts:
            for p in h.producers:
                if p.poll() is None:
                    p.kill()
            if h.fleet is not None and h.fleet.poll() is None:
                h.fleet.send_signal(signal.SIGTERM)
                try:
                    h.fleet.wait(60)
                except subprocess.TimeoutExpired:
                    h.fleet.kill()
        rds.stop()
        pg.close()
        figures["events"] = [f"{t:.0f}s {what}" for t, what in events]
        figures["violation_list"] = sampler.violations[:20]
        print("TORTURE FIGURES", json.dumps(figures, indent=1, default=str))
        if os.environ.get("QUILL_TORTURE_REPORT"):
            Path(os.environ["QUILL_TORTURE_REPORT"]).write_text(json.dumps(figures, default=str))

    assert figures["writer_kills"] >= duration // 36 and figures["fleet_kills"] >= 1, figures
    assert figures["lost"] == 0 and figures["doubles"] == 0, figures
    assert figures["unacked_stored"] == 0 and not order_breaks, order_breaks[:10]
    assert figures["rejected"] == 0, figures
    assert exits == [0] * HOSTS, exits
    assert not sampler.violations, sampler.violations[:20]
    # No restart the test did not cause: a worker that died of the server restarts shows here.
    for h in hosts:
        got = figures["restarts"][h.index]
        want = {**dict.fromkeys(got, 0), "writer": h.kills_since_start}  # every other role: 0
        assert got == want, (h.index, figures["restarts"])
    for s in final:
        assert s["pending"] == 0 and s["lag"] == 0.0 and s["source"] == "store", s
        assert not s["halt"] and not s["crash_loops"] and not s["queue_down"], s
        assert s["running"] and s["quarantined"] == 0, s


def _diagnose(host: Host, store_url: str, sampler: Sampler) -> dict:
    """What a failed run needs to be understood: the host's last status sample, its writer's
    published record, its spool's end and the store's cursor for its spool id."""
    from quill.home import RunDir
    from quill.spool import SpoolReader
    from quill.spool.identity import load_or_create

    out: dict = {"host": host.index}
    try:
        out["last_sample"] = [s for s in sampler.samples if s["host"] == host.index][-1:]
        writer = RunDir(host.home.resolve()).last("writer") or {}
        keep = ("pid", "alive", "cursor", "error", "halted", "halt", "idle", "queue_error")
        out["writer"] = {k: writer.get(k) for k in keep}
        out["spool_end"] = str(SpoolReader(host.home / "spool").end())
        spool_id = load_or_create(host.home / "spool-id")
        with psycopg.connect(store_url, connect_timeout=3) as conn:
            row = conn.execute(
                'SELECT segment, "offset" FROM spool_cursor WHERE spool_id = %s', (spool_id,)
            ).fetchone()
        out["store_cursor"] = row
        log = host.home / "logs" / "writer.log"
        lines = log.read_text().splitlines() if log.exists() else []
        out["writer_log_tail"] = [ln[:400] for ln in lines if '"error"' in ln or "Trace" in ln][-5:]
    except Exception as exc:  # noqa: BLE001 — a diagnosis must not hide the failure
        out["diagnosis_error"] = repr(exc)
    return out


def _restarts(host: Host) -> dict:
    """The live supervisor's restart counts by role (its last status record)."""
    from quill.home import RunDir

    return (RunDir(host.home.resolve()).last("supervisor") or {}).get("restarts", {})

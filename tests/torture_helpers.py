"""The hosts, producers and status sampler of the multi-host torture run
(``tests/test_torture_hosts.py``): a ``Host`` is a data dir with its own ``quill run`` fleet
and producer processes; the ``Sampler`` checks ``quill status --json`` of every host while the
run goes on."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from conftest import QuillCLI, quill_env
from run_resources import REPO

psycopg = pytest.importorskip("psycopg")

HOSTS = 3
PRODUCERS_PER_HOST = 2
PRODUCER = Path(__file__).with_name("torture_producer.py")
#: At most this many writer kills per host in any 60 s: the supervisor calls 5 exits in
#: 60 s a crash loop, and the test's own kills must not be one.
WRITER_KILLS_PER_MIN = 3
#: Seconds the PostgreSQL server stays stopped in its restart.
PG_DOWN_S = 8.0


class Host:
    """One data dir with its fleet (``quill run``), producers and ack logs."""

    def __init__(self, root: Path, index: int, store_url: str, queue_url: str):
        self.index = index
        self.home = root / f"host{index}"
        self.home.mkdir(parents=True)
        (self.home / "config.toml").write_text(
            f'[store]\nurl = "{store_url}"\n[queue]\nurl = "{queue_url}"\n'
        )
        self.cli = QuillCLI(self.home)
        self.fleet: subprocess.Popen | None = None
        self.epoch = 0  # bumped at every start and kill of the fleet
        self.starts = 0
        self.writer_kills: list[float] = []
        self.kills_since_start = 0  # writer kills the live supervisor has seen
        self.orphan_kills = 0
        self.producers: list[subprocess.Popen] = []
        self.names = [f"h{index}p{j}" for j in range(PRODUCERS_PER_HOST)]

    def acks_file(self, name: str) -> Path:
        return self.home / f"acks-{name}.jsonl"

    def acked(self) -> list[dict]:
        """Every ack logged so far (a line being written is not one yet)."""
        out = []
        for name in self.names:
            path = self.acks_file(name)
            if not path.exists():
                continue
            for line in path.read_text().splitlines():
                try:
                    out.append({**json.loads(line), "producer": name})
                except ValueError:
                    pass  # the line being written
        return out

    def start_fleet(self) -> None:
        """``quill run`` in the background (stderr to a file: a pipe nobody reads fills up),
        returned once its supervisor holds the fleet lease."""
        from quill.home import RunDir

        self.starts += 1
        self.kills_since_start = 0
        err = open(self.home / f"fleet-{self.starts}.err", "w")  # noqa: SIM115 — the child's
        self.fleet = subprocess.Popen(
            self.cli.argv("run"), env=quill_env(self.home), cwd=REPO, stdout=err, stderr=err
        )
        err.close()
        rd = RunDir(self.home.resolve())
        deadline = time.monotonic() + 120
        while not rd.fleet_running():
            assert self.fleet.poll() is None, (self.home / f"fleet-{self.starts}.err").read_text()
            assert time.monotonic() < deadline, "the fleet did not start"
            time.sleep(0.05)
        self.epoch += 1

    def worker(self, role: str) -> int | None:
        from quill.home import RunDir

        live = RunDir(self.home.resolve()).live(role)
        return live["pid"] if live else None

    def kill_writer(self) -> bool:
        """``kill -9`` of the live writer. A writer that is not the live supervisor's child
        is the killed fleet's, still finishing its chunk (the SIGTERM its parent's death
        sent waits for it): killed too, counted in ``orphan_kills``, no restart expected."""
        pid = self.worker("writer")
        if pid is None:
            return False
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            ours = self.fleet is not None and int(stat.rsplit(")", 1)[1].split()[1]) == (
                self.fleet.pid
            )
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, FileNotFoundError):
            return False
        self.writer_kills.append(time.monotonic())
        if ours:
            self.kills_since_start += 1
        else:
            self.orphan_kills += 1
        return True

    def kill_fleet(self) -> None:
        """``kill -9`` of the supervisor and every worker at once (a host that loses power)."""
        assert self.fleet is not None
        # Every child of the supervisor, published or still starting (a worker left alive
        # would get SIGTERM from its parent's death and finish its chunk first).
        children = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == self.fleet.pid:
                    children.append(int(stat.parent.name))
            except (OSError, ValueError, IndexError):
                pass
        pids = [self.fleet.pid, *children] + [
            p for p in (self.worker(r) for r in ("writer", "scheduler", "consumer")) if p
        ]
        self.epoch += 1
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.fleet.wait(30)
        self.fleet = None
        # Again once it is down: a sample that read (epoch, up) in between, with the new
        # epoch but the fleet still set, must not be judged steady.
        self.epoch += 1

    def stop_fleet(self) -> int:
        assert self.fleet is not None
        self.epoch += 1
        self.fleet.send_signal(signal.SIGTERM)
        code = self.fleet.wait(60)
        self.fleet = None
        self.epoch += 1
        return code


class Sampler(threading.Thread):
    """Samples ``quill status --json`` on each host in turn until stopped, judging each."""

    def __init__(self, hosts: list[Host], store_url: str):
        super().__init__(daemon=True)
        self.hosts, self.store_url = hosts, store_url
        self.samples: list[dict] = []
        self.violations: list[dict] = []
        self.unchecked = 0
        self.stopping = threading.Event()
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            i = 0
            while not self.stopping.is_set():
                self.sample(self.hosts[i % len(self.hosts)])
                i += 1
        except BaseException as exc:  # noqa: BLE001 — reported by the test thread
            self.failure = exc

    def sample(self, host: Host) -> dict:
        acked = host.acked()  # every one of these was durable before the call began
        epoch, up = host.epoch, host.fleet is not None
        at = time.time()
        proc = host.cli.run("status", "--json", check=False, timeout=180)
        try:
            doc = json.loads(proc.stdout)
        except ValueError:
            doc = None
        sample = {"host": host.index, "at": at, "took": time.time() - at, "code": proc.returncode}
        if doc is None or "spool" not in doc:
            self.violation(sample, f"no status document: {proc.stdout[-300:]} {proc.stderr[-300:]}")
            return sample
        sp, fleet = doc["spool"], doc["fleet"]
        sample.update(
            pending=sp["pending_bytes"],
            lag=sp["lag_s"],
            source=sp["cursor_source"],
            store=(doc["store"] or {}).get("state", "ok") if doc["store"] else None,
            running=fleet["running"],
            crash_loops=[c.get("role") for c in fleet["crash_loops"]],
            halt=fleet["halt"],
            quarantined=sp["quarantined"],
            queue_down=doc["queue"].get("unavailable_since") is not None,
            acked=len(acked),
        )
        self.samples.append(sample)
        self._judge(host, sample, acked, epoch == host.epoch, up)
        return sample

    def _judge(self, host: Host, s: dict, acked: list[dict], steady: bool, up: bool) -> None:
        if s["store"] == "unreadable":
            if s["source"] not in ("writer", "unknown"):
                self.violation(s, f"store unreadable but cursor_source {s['source']}")
        elif s["source"] != "store":
            self.violation(s, f"store readable but cursor_source {s['source']}")
        if (s["pending"] is None or s["lag"] is None) != (s["source"] == "unknown"):
            self.violation(s, "pending/lag unknown without saying so (or the reverse)")
        if s["halt"]:
            self.violation(s, f"halt shown: {s['halt']}")
        if s["crash_loops"]:
            self.violation(s, f"crash loop shown: {s['crash_loops']}")
        if s["quarantined"]:
            self.violation(s, f"{s['quarantined']} records quarantined")
        if steady and s["running"] != up:
            self.violation(s, f"fleet running={s['running']} while the test has it up={up}")
        if s["pending"] == 0 and acked:
            missing = self.unapplied([a["batch"] for a in acked])
            if missing is None:
                self.unchecked += 1
            elif missing:
                self.violation(s, f"0 bytes pending while {len(missing)} acked batches unapplied")

    def unapplied(self, batches: list[str]) -> list[str] | None:
        """The batches not applied in the store now (None: the store cannot be asked now)."""
        try:
            with psycopg.connect(self.store_url, connect_timeout=3) as conn:
                got = {
                    r[0]
                    for r in conn.execute(
                        "SELECT batch_id FROM applied_batches WHERE batch_id = ANY(%s)", (batches,)
                    )
                }
        except psycopg.Error:
            return None
        return [b for b in batches if b not in got]

    def violation(self, sample: dict, what: str) -> None:
        self.violations.append({**sample, "what": what})


def _until(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(1.0)

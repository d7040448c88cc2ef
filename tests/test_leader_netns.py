"""A cluster leader whose network is cut: the leader runs the real election code
(``store.postgres.election``) in a network namespace of its own, joined to the host by a veth
pair, against a PRIVATE PostgreSQL instance (initdb'd for this test, listening on the veth's
host address and on loopback; the shared server is never touched). A standby on the host
takes over within the documented bound (17 s after the leader's last renewal), and the cut
leader's ``still_leader()`` returns within ``RENEWAL_BOUND_S`` at every call — it stops acting
before the standby starts, instead of hanging on a TCP connection nobody answers.

Needs root (``ip netns``) and PostgreSQL's server binaries; skipped with the reason otherwise.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import REPO
from semantics_helpers import Store

pytest.importorskip("psycopg")

PG_BIN = Path("/usr/lib/postgresql/15/bin")
#: The documented takeover bound (s, docs/backends.md) plus slack for two busy cores.
TAKEOVER_BOUND_S = 17.0 + 3.0
#: ``election.RENEWAL_BOUND_S`` (8 s), written out so this test runs against any version.
RENEWAL_BOUND_S = 8.0

#: One contender, as in test_leader_lease.py, that also logs how long each check took:
#: ``check <started> <seconds> <1|0>`` (and ``lead <t>`` when it takes the lease).
CONTENDER = textwrap.dedent(
    """
    import sys, time
    from quill.store.postgres.election import Leadership
    from quill.workers.standby import STANDBY_RETRY_S

    url, log = sys.argv[1], sys.argv[2]
    leader = Leadership(url, "scheduler")
    leading = False
    with open(log, "a", buffering=1) as out:
        out.write(f"ready {time.time()}\\n")
        while True:
            t = time.time()
            if not leading:
                leading = leader.try_lead()
                if leading:
                    out.write(f"lead {t}\\n")
                else:
                    time.sleep(STANDBY_RETRY_S)
                continue
            ok = leader.still_leader()
            out.write(f"check {t} {time.time() - t} {int(ok)}\\n")
            leading = ok
            time.sleep(0.1)
    """
)


def _run(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True, timeout=60)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _namespace() -> Iterator[tuple[str, str, str, str]]:
    """A network namespace joined to the host by a veth pair:
    ``(namespace, host-side interface, host address, namespace address)``."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2 (ip netns) for a network namespace")
    tag = uuid.uuid4().hex[:6]
    ns, host_if, ns_if = f"qlead{tag}", f"vqh{tag}", f"vqn{tag}"
    subnet = f"10.{200 + int(tag[:2], 16) % 50}.{int(tag[2:4], 16)}"
    host_ip, ns_ip = f"{subnet}.1", f"{subnet}.2"
    try:
        _run("ip", "netns", "add", ns)
        _run("ip", "link", "add", host_if, "type", "veth", "peer", "name", ns_if)
        _run("ip", "link", "set", ns_if, "netns", ns)
        _run("ip", "addr", "add", f"{host_ip}/30", "dev", host_if)
        _run("ip", "link", "set", host_if, "up")
        _run("ip", "netns", "exec", ns, "ip", "addr", "add", f"{ns_ip}/30", "dev", ns_if)
        _run("ip", "netns", "exec", ns, "ip", "link", "set", ns_if, "up")
        _run("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
    except (subprocess.CalledProcessError, OSError) as exc:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        pytest.skip(f"cannot make a network namespace: {exc}")
    try:
        yield ns, host_if, host_ip, ns_ip
    finally:
        subprocess.run(["ip", "link", "del", host_if], capture_output=True)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


@contextlib.contextmanager
def _private_postgres(listen: str) -> Iterator[int]:
    """A PostgreSQL instance of this test's own (user ``postgres``, trust auth) listening on
    ``listen`` and 127.0.0.1 at a free port; yields the port. Stopped and removed after."""
    if not (PG_BIN / "initdb").exists() or shutil.which("runuser") is None:
        pytest.skip(f"needs PostgreSQL's server binaries in {PG_BIN} and runuser")
    root = Path(tempfile.mkdtemp(prefix="quill-leader-pg-"))
    shutil.chown(root, "postgres", "postgres")
    data, port = root / "data", _free_port()
    as_pg = ["runuser", "-u", "postgres", "--"]
    try:
        _run(*as_pg, str(PG_BIN / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres")
        with open(data / "pg_hba.conf", "a") as hba:
            hba.write("host all all 0.0.0.0/0 trust\n")  # reachable on the test's veth only
        _run(
            *as_pg,
            str(PG_BIN / "pg_ctl"),
            "-D",
            str(data),
            "-w",
            "-l",
            str(root / "log"),
            "-o",
            f"-c listen_addresses='127.0.0.1,{listen}' -p {port} "
            f"-c unix_socket_directories='{root}' -c fsync=off",
            "start",
        )
        yield port
    finally:
        subprocess.run(
            [*as_pg, str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
            capture_output=True,
        )
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def net() -> Iterator[tuple[str, str, str, int]]:
    """``(namespace, host-side interface, host address, port)``: a network namespace and a
    private PostgreSQL listening on the veth's host address (a new pair for each test: a cut
    link brought up again does not give back a usable path at once)."""
    with _namespace() as (ns, host_if, host_ip, _ns_ip), _private_postgres(host_ip) as port:
        yield ns, host_if, host_ip, port


def _events(log: Path) -> list[list[str]]:
    if not log.exists():
        return []
    return [line.split() for line in log.read_text().splitlines() if line.strip()]


def _until(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


@pytest.mark.slow  # ~40 s: a private server and a full lease
def test_a_leader_cut_off_the_network_is_replaced_within_the_bound_and_never_hangs(tmp_path, net):
    ns, host_if, host_ip, port = net
    local = f"postgresql://postgres@127.0.0.1:{port}/postgres"
    Store(tmp_path / "store", local).backend.close()  # the store's tables
    logs = {name: tmp_path / f"{name}.log" for name in ("cut", "standby")}
    script = [sys.executable, "-c", CONTENDER]
    cut = subprocess.Popen(
        [
            "ip",
            "netns",
            "exec",
            ns,
            *script,
            f"postgresql://postgres@{host_ip}:{port}/postgres",
            str(logs["cut"]),
        ],
        cwd=REPO,
        stderr=subprocess.DEVNULL,
    )
    standby = None
    try:
        _until(lambda: any(e[0] == "check" for e in _events(logs["cut"])), 30, "a leader")
        standby = subprocess.Popen([*script, local, str(logs["standby"])], cwd=REPO)
        _until(lambda: _events(logs["standby"]), 30, "the standby to start")
        time.sleep(2.5)
        assert not any(e[0] == "lead" for e in _events(logs["standby"]))
        cut_at = time.time()
        _run("ip", "link", "set", host_if, "down")
        took = _until(
            lambda: next((float(e[1]) for e in _events(logs["standby"]) if e[0] == "lead"), 0),
            TAKEOVER_BOUND_S + 2,
            "the standby to take over from the cut-off leader",
        )
        assert took - cut_at <= TAKEOVER_BOUND_S, took - cut_at
        # The cut leader's checks: each returned within the bound, and it stopped
        # acting (its last True check ended) before the standby took over.
        _until(
            lambda: any(e[0] == "check" and e[3] == "0" for e in _events(logs["cut"])),
            RENEWAL_BOUND_S + 2,
            "the cut leader to see it lost",
        )
        checks = [
            (float(e[1]), float(e[2]), e[3] == "1") for e in _events(logs["cut"]) if e[0] == "check"
        ]
        checks = [c for c in checks if c[0] + c[1] >= cut_at]  # after the cut
        assert checks and max(d for _, d, _ in checks) <= RENEWAL_BOUND_S, checks
        acted = [t + d for t, d, ok in checks if ok]
        print(  # the figures, with pytest -s
            f"takeover {took - cut_at:.1f} s after the cut; cut leader's checks after "
            f"the cut: {len(checks)}, longest {max(d for _, d, _ in checks):.1f} s; "
            f"last acted {max(acted, default=cut_at) - cut_at:.1f} s after the cut"
        )
        assert not acted or max(acted) < took, (acted, took)
    finally:
        for p in (cut, standby):
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGKILL)
                p.wait(10)


#: A writer's chunk transaction in the namespace: it takes the per-session lock of the real
#: apply path (``store.postgres.apply``) on a real ``PgConnection`` and then waits, as a
#: writer whose host drops off the network mid-chunk would.
LOCK_HOLDER = textwrap.dedent(
    """
    import sys, time
    from quill.store.postgres.apply import _LOCK_SQL
    from quill.store.postgres.connection import PgConnection

    conn = PgConnection(sys.argv[1], application_name="quill-writer:cut")
    conn.execute("BEGIN IMMEDIATE")
    conn.execute(_LOCK_SQL, (["session-1"],))
    print("locked", flush=True)
    time.sleep(3600)
    """
)
#: The server ends a vanished client's session within ~15 s (``SERVER_KEEPALIVES``), plus
#: slack for two busy cores.
LOCK_RELEASE_BOUND_S = 15.0 + 5.0


@pytest.mark.slow  # ~30 s: a private server and a keepalive timeout
def test_a_lock_held_by_a_session_cut_off_the_network_is_released_within_the_bound(net):
    """Any lock a vanished host's session holds (here a writer's per-session transaction
    lock) is released when the server ends that session: within seconds, not TCP's 2 h."""
    from quill.store.errors import StoreError
    from quill.store.postgres.apply import _LOCK_SQL
    from quill.store.postgres.connection import PgConnection

    ns, host_if, host_ip, port = net
    holder = subprocess.Popen(
        [
            "ip",
            "netns",
            "exec",
            ns,
            sys.executable,
            "-c",
            LOCK_HOLDER,
            f"postgresql://postgres@{host_ip}:{port}/postgres",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    waiter = PgConnection(f"postgresql://postgres@127.0.0.1:{port}/postgres")
    try:
        assert holder.stdout.readline().strip() == "locked"
        waiter.execute("BEGIN IMMEDIATE")
        waiter.execute("SELECT set_config('lock_timeout', '1000', true)")
        with pytest.raises(StoreError):  # held by the writer in the namespace
            waiter.execute(_LOCK_SQL, (["session-1"],))
        waiter.execute("ROLLBACK")
        _run("ip", "link", "set", host_if, "down")
        cut_at = time.monotonic()
        waiter.execute("BEGIN IMMEDIATE")
        waiter.execute("SELECT set_config('lock_timeout', ?, true)", (str(40 * 1000),))
        waiter.execute(_LOCK_SQL, (["session-1"],))  # waits until the server ends the holder
        released = time.monotonic() - cut_at
        waiter.execute("ROLLBACK")
        left = waiter.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'quill-writer:cut'"
        ).fetchone()[0]
        print(f"lock released {released:.1f} s after the cut")  # the figure, with pytest -s
        assert released <= LOCK_RELEASE_BOUND_S and left == 0, (released, left)
    finally:
        waiter.close()
        holder.kill()
        holder.wait(10)

"""Every PostgreSQL connection Quill opens bounds its own network waits (libpq keepalives and
``tcp_user_timeout``, ``[store]`` settings): a host cut off the network gets an error within
the bound, never a hang of TCP's default hours.

The hosts run in a network namespace of their own joined to the host by a veth pair, against
a PRIVATE PostgreSQL listening on the veth's host address (``test_leader_netns``'s helpers; the
shared server is never touched); the link is cut with ``ip link set … down``.

* A reader waiting for a reply (a long statement in flight: only keepalives can tell) fails
  with ``TransientError`` within idle + interval × count.
* A real writer process (``worker_main writer``) that has applied its spool and then has a
  chunk to send into the cut network (unacknowledged data: ``tcp_user_timeout``) gives up on
  the connection within the bound and retries (``writer.retry``), instead of hanging.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import REPO
from test_leader_netns import _namespace, _private_postgres, _until

pytest.importorskip("psycopg")

#: The bounds the data dirs below configure: 1 s idle + 1 s × 2 probes = 3 s with nothing in
#: flight; 3 s of unacknowledged data.
BOUNDS = {
    "keepalives_idle_s": 1,
    "keepalives_interval_s": 1,
    "keepalives_count": 2,
    "tcp_user_timeout_s": 3,
    "connect_timeout_s": 3,
}
#: The bound above plus slack for the kernel's timers and two busy cores (s).
FAIL_BOUND_S = 3.0 + 5.0


@pytest.fixture
def net() -> Iterator[tuple[str, str, str, int]]:
    """``(namespace, host-side interface, host address, port)`` (a new pair for each test)."""
    with _namespace() as (ns, host_if, host_ip, _ns_ip), _private_postgres(host_ip) as port:
        yield ns, host_if, host_ip, port


def _data_dir(root: Path, url: str) -> Path:
    root.mkdir(parents=True)
    lines = ["[store]", f'url = "{url}"', *(f"{k} = {v}" for k, v in BOUNDS.items())]
    lines += ["[watch]", "enabled = false"]
    (root / "config.toml").write_text("\n".join(lines) + "\n")
    return root


def test_the_settings_reach_every_connection_the_store_opens(tmp_path, pg_store_url):
    """The data dir's ``[store]`` bounds are the libpq parameters of the writer's and the
    reader's connections (read back from libpq), and a connection opened without settings
    gets the defaults: none is left with TCP's own."""
    from quill import home
    from quill.store.factory import open_reader, open_store
    from quill.store.postgres import PgConnection

    cfg = home.load(_data_dir(tmp_path / "h", pg_store_url))
    cfg.ensure_dirs()
    want = {"keepalives_idle": "1", "keepalives_count": "2", "tcp_user_timeout": "3000"}

    def params(conn) -> dict[str, str]:
        got = conn.raw.info.get_parameters()
        return {k: got.get(k) for k in want}

    store = open_store(cfg, writer=True)
    try:
        assert params(store.conn) == want
        with open_reader(cfg) as reader:
            assert params(reader.conn) == want
    finally:
        store.close()
    bare = PgConnection(pg_store_url)
    try:
        assert params(bare) == {
            "keepalives_idle": "10",
            "keepalives_count": "3",
            "tcp_user_timeout": "30000",
        }
    finally:
        bare.close()


#: A reader in the namespace: opens the data dir's store as ``quill`` commands do, starts a
#: long statement, and prints what became of it: ``{"error", "after"}`` (seconds since the
#: cut, which the test signals by writing a line on stdin).
READER = textwrap.dedent(
    """
    import json, sys, threading, time
    from quill import home
    from quill.store.factory import open_reader

    reader = open_reader(home.load(sys.argv[1]))
    print("ready", flush=True)
    cut = {}
    threading.Thread(target=lambda: (sys.stdin.readline(), cut.setdefault("at", time.monotonic())),
                     daemon=True).start()
    try:
        reader.conn.execute("SELECT pg_sleep(120)")
        out = {"error": None}
    except Exception as exc:
        out = {"error": type(exc).__name__}
    out["after"] = time.monotonic() - cut.get("at", time.monotonic())
    print(json.dumps(out), flush=True)
    """
)


def test_a_reader_waiting_on_a_cut_network_fails_within_the_bound(tmp_path, net):
    ns, host_if, host_ip, port = net
    from semantics_helpers import Store

    Store(tmp_path / "store", f"postgresql://postgres@127.0.0.1:{port}/postgres").backend.close()
    root = _data_dir(tmp_path / "host", f"postgresql://postgres@{host_ip}:{port}/postgres")
    proc = subprocess.Popen(
        ["ip", "netns", "exec", ns, sys.executable, "-c", READER, str(root)],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(1.0)  # the statement is in flight, its reply awaited
        subprocess.run(["ip", "link", "set", host_if, "down"], check=True)
        proc.stdin.write("cut\n")
        proc.stdin.flush()
        out, _ = proc.communicate(timeout=FAIL_BOUND_S + 20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    result = json.loads(out.strip().splitlines()[-1])
    print(f"reader failed {result['after']:.1f} s after the cut")  # the figure, with pytest -s
    assert result["error"] == "TransientError", result
    assert result["after"] <= FAIL_BOUND_S, result


def _events(log: Path, name: str) -> list[dict]:
    if not log.exists():
        return []
    out = []
    for line in log.read_text(errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("event") == name:
            out.append(rec)
    return out


def test_a_writer_sending_into_a_cut_network_gives_up_within_the_bound_and_retries(tmp_path, net):
    from quill import home
    from quill.spool import Spool

    ns, host_if, host_ip, port = net
    root = _data_dir(tmp_path / "host", f"postgresql://postgres@{host_ip}:{port}/postgres")
    cfg = home.load(root)
    cfg.ensure_dirs()
    spool = Spool(cfg.spool_dir)

    def say(text: str) -> None:
        spool.append(
            "messages.append", {"session_id": "s", "messages": [{"role": "user", "content": text}]}
        )

    say("before the cut")
    writer = subprocess.Popen(
        ["ip", "netns", "exec", ns, sys.executable, "-m", "quill.ops.worker_main", "writer"]
        + ["--home", str(root)],
        cwd=REPO,
        stderr=subprocess.DEVNULL,
    )
    log = cfg.logs_dir / "writer.log"
    try:
        _until(lambda: _events(log, "writer.chunk"), 60, "the writer to apply its first chunk")
        subprocess.run(["ip", "link", "set", host_if, "down"], check=True)
        cut_at = time.time()
        say("after the cut")  # a chunk to send into the cut network
        retry = _until(
            lambda: _events(log, "writer.retry"), FAIL_BOUND_S + 20, "the writer to give up"
        )[0]
        took = time.time() - cut_at  # the log is polled every 0.05 s
        assert writer.poll() is None, "the writer retries; it does not crash"
        assert retry["kind"] == "TransientError", retry
    finally:
        spool.close()
        writer.kill()
        writer.wait(10)
    print(f"writer gave up {took:.1f} s after the cut")  # the figure, with pytest -s
    assert took <= FAIL_BOUND_S, retry

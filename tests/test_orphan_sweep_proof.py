"""The orphan sweep judges a session's owner with the proof the leases use (boot id + start
ticks), never by pid and host name alone: on both backends, with real processes.

* A recycled pid must not make a dead owner look alive: the owner's pid is now another
  process that started a whole second later (which the older ``create_time`` rule takes for
  the same process with a moved boot-time estimate).
* A cloned machine (same host name, another boot) must not make a live owner look dead: the
  owner's pid does not exist here, but its boot is not this one and it started after this
  boot began, so it is not judged here. An owner of an earlier boot of this machine (it
  started before this boot began) is dead, and closed at once.
* The owner that is this very process, at its start tick, is alive; one whose process exited is
  dead.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import psutil
import pytest
from semantics_helpers import Store

from quill.home import boot_id, process_identity
from quill.jobs.prune import orphan_sweep


@pytest.fixture
def store(tmp_path, backend):
    s = Store(tmp_path, backend)
    yield s
    s.close()


def _owner(identity: dict, **change) -> dict:
    return {
        "host": socket.gethostname(),
        "pid": identity["pid"],
        "create_time": identity["create_time"],
        "boot_id": identity["boot_id"],
        "start_ticks": identity["start_ticks"],
        **change,
    }


def _closed(store) -> set[str]:
    store.drain()
    return {
        r[0]
        for r in store.conn.execute("SELECT id FROM sessions WHERE ended_at IS NOT NULL").fetchall()
    }


def test_the_sweep_trusts_neither_a_bare_pid_nor_a_host_name(store):
    if boot_id() is None:
        pytest.skip("needs /proc/sys/kernel/random/boot_id")
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    gone = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    try:
        time.sleep(0.1)
        live = process_identity(other.pid)
        gone_id = process_identity(gone.pid)
        gone.wait(10)
        me = process_identity()
        # The recycled pid: the owner started 1 s (100 ticks at HZ = 100) before the live
        # process that holds its pid now.
        recycled = _owner(
            live,
            create_time=live["create_time"] - 1.0,
            start_ticks=live["start_ticks"] - 100,
        )
        # The clone's owner: a pid absent here, another boot of a machine with this name.
        absent = 2**22 + 12345
        clone = _owner(me, pid=absent, boot_id="0" * 8 + "-clone-boot")
        owners = {
            "recycled": recycled,
            "clone": clone,
            "me": _owner(me),
            "gone": _owner(gone_id),
        }
        for sid, owner in owners.items():
            assert (
                store.apply("session.create", {"session_id": sid, "source": "cli", "owner": owner})
                == []
            )
        result = orphan_sweep(store.conn, store.spool)
        closed = _closed(store)
    finally:
        other.kill()
        other.wait(10)
    assert "recycled" in closed, "a recycled pid made a dead owner look alive"
    assert "clone" not in closed, "a clone's host name made a live owner look dead"
    assert "me" not in closed
    assert result["other_boot"] == 1, result
    assert "gone" in closed


def test_an_owner_without_the_proof_is_judged_by_its_start_time(store):
    """A producer that sends only ``create_time`` (before ``boot_id``/``start_ticks``) is still
    judged, by the older rule: its own process is alive, an exited one is dead."""
    gone = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    time.sleep(0.1)
    gone_id = process_identity(gone.pid)
    gone.wait(10)
    me = process_identity()
    for sid, ident in (("me", me), ("gone", gone_id)):
        owner = {
            "host": socket.gethostname(),
            "pid": ident["pid"],
            "create_time": ident["create_time"],
        }
        assert (
            store.apply("session.create", {"session_id": sid, "source": "cli", "owner": owner})
            == []
        )
    assert orphan_sweep(store.conn, store.spool)["sessions_closed"] == 1
    assert _closed(store) == {"gone"}


def test_a_resumed_session_takes_its_new_owners_proof(store):
    """A new owner (another ``session.create`` with an owner) replaces the proof with its
    own; one without a proof clears the old one, so a stale proof never vouches for a new pid."""
    me = process_identity()
    store.apply("session.create", {"session_id": "s", "source": "cli", "owner": _owner(me)})
    legacy = {"host": socket.gethostname(), "pid": me["pid"], "create_time": me["create_time"]}
    store.apply("session.create", {"session_id": "s", "owner": legacy})
    row = store.conn.execute(
        "SELECT owner_boot, owner_ticks FROM sessions WHERE id = 's'"
    ).fetchone()
    assert tuple(row) == (None, None)
    bad = {**_owner(me), "start_ticks": "soon"}
    assert store.apply("session.create", {"session_id": "t", "owner": bad}) == ["invalid-field"]


def test_an_owner_from_an_earlier_boot_of_this_machine_is_closed_at_once(store):
    """An owner of another boot whose process started before this boot began (a reboot killed
    it) is closed by the first sweep, not left to the stale sweep; one of another boot that
    started after this boot began is no process of this machine (a clone with this host name)
    and stays open. A live owner's next append reopens a swept session."""
    if boot_id() is None:
        pytest.skip("needs /proc/sys/kernel/random/boot_id")
    me = process_identity()
    booted = psutil.boot_time()
    owners = {
        "rebooted": _owner(me, boot_id="0" * 8 + "-earlier", create_time=booted - 3600.0),
        "clone": _owner(me, boot_id="0" * 8 + "-clone", create_time=time.time() - 5.0),
    }
    for sid, owner in owners.items():
        assert (
            store.apply("session.create", {"session_id": sid, "source": "cli", "owner": owner})
            == []
        )
    result = orphan_sweep(store.conn, store.spool)
    assert _closed(store) == {"rebooted"}
    assert (result["sessions_closed"], result["other_boot"]) == (1, 1), result
    msgs = [{"role": "user", "content": "still here"}]
    store.apply("messages.append", {"session_id": "rebooted", "messages": msgs})
    assert _closed(store) == set()

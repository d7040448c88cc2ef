"""Crash torture of read-your-writes on both backends: producers append through the client and
wait for each batch (``Client.wait``, and ``AsyncClient.wait`` whose ring-note path answers
without a look) while the writer alone, or the whole fleet (``quill run``: supervisor,
writer, scheduler, consumer: one process group, as a host losing power), is killed with
``kill -9`` at random moments and started again.

Judged twice: (1) at the moment each wait answers "applied", the producer itself reads the
store on a fresh reader, and the batch must be there (a ring's note may never run ahead of
the store); (2) at the end every acknowledged message is in the store exactly once, in its
producer's order, and every wait was answered "applied" (nothing here is invalid).

Repeatable from a seed: QUILL_TORTURE_SEED (default 1234) and QUILL_TORTURE_KILLS (default 6
writer kills or 4 fleet kills; 30 and 20 in the QUILL_SLOW=1 variants)."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, QuillCLI, quill_env

PRODUCERS = 4
#: Seconds a producer's wait may take: writers are down between kills for at most ~1 s.
WAIT_S = 120.0


def _present(cfg, batch: str) -> bool:
    """Whether ``batch`` is in ``cfg``'s store now, read on a reader of its own."""
    from quill.store.factory import open_reader

    with open_reader(cfg) as reader:
        return batch in reader.applied_positions([batch])


def _producer(home: str, k: int, batches: int, log_path: str, seed: int) -> None:
    """Append ``batches`` batches to session ``w-<k>``, each then waited for (odd ``k``:
    ``AsyncClient.wait``); one JSON line per batch once its wait answered: the ack, the
    outcome and whether the store held the batch right after the answer."""
    from quill.ops.client.aclient import AsyncClient
    from quill.ops.client.client import Client

    rng = random.Random(seed * 1000 + k)
    client = Client(home)
    aclient = AsyncClient(client=client)
    with open(log_path, "a", encoding="utf-8") as log:
        for n in range(batches):
            msgs = [
                {"role": "user", "content": f"w{k} b{n} m{i}"} for i in range(rng.randint(1, 4))
            ]
            ack = client.append(f"w-{k}", msgs)
            if k % 2:
                outcome = asyncio.run(aclient.wait(ack, timeout=WAIT_S))
            else:
                outcome = client.wait(ack, timeout=WAIT_S)
            present = _present(client.config, ack.batch_id)
            line = {
                "batch": ack.batch_id,
                "contents": [m["content"] for m in msgs],
                "status": outcome.status,
                "present": present,
            }
            log.write(json.dumps(line) + "\n")
            log.flush()
            time.sleep(rng.random() * 0.01)


def _start(home: Path, target: str) -> subprocess.Popen:
    """The writer alone, or a fleet (``quill run``) in a process group of its own."""
    argv = (
        [sys.executable, "-m", "quill.ops.worker_main", "writer", "--home", str(home)]
        if target == "writer"
        else QuillCLI(home).argv("run")
    )
    return subprocess.Popen(
        argv,
        env=quill_env(home),
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def _wait_up(home: Path, target: str, proc: subprocess.Popen) -> None:
    """Until ``proc`` holds its lease (the fleet's, or the writer's): its signal handlers are
    installed right after it takes it."""
    from quill.home import RunDir

    role = "fleet" if target == "fleet" else "writer"
    deadline = time.monotonic() + 60
    while RunDir(home).lease_holder(role) is None:
        assert proc.poll() is None, f"the {role} exited {proc.returncode} while starting"
        assert time.monotonic() < deadline, f"the {role} did not take its lease in 60 s"
        time.sleep(0.05)
    time.sleep(0.2)


def _kill(proc: subprocess.Popen) -> None:
    """``kill -9`` of ``proc``'s whole process group (a fleet's workers are in it)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(30)


def _contents(home: Path) -> dict[str, list[str]]:
    """Every message's content per session, in the store's order, read through the client."""
    from quill.ops.client.client import Client

    client = Client(home)
    return {
        f"w-{k}": [m["content"] for m in client.messages(f"w-{k}", "audit")]
        for k in range(PRODUCERS)
    }


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
@pytest.mark.parametrize(
    ("target", "kills"),
    [
        ("writer", 6),
        ("fleet", 4),
        pytest.param("writer", 30, marks=pytest.mark.slow),
        pytest.param("fleet", 20, marks=pytest.mark.slow),
    ],
)
def test_waits_answered_applied_are_in_the_store_through_kills(
    tmp_path, backend, target, kills, request
):
    seed = int(os.environ.get("QUILL_TORTURE_SEED", "1234"))
    kills = int(os.environ.get("QUILL_TORTURE_KILLS", kills))
    rng = random.Random(seed)
    home = tmp_path / "home"
    home.mkdir()
    config = "[writer]\nchunk_rows = 10\n"
    if backend == "postgres":
        config += f'[store]\nurl = "{request.getfixturevalue("pg_store_url")}"\n'
    (home / "config.toml").write_text(config)
    batches = 25 * kills
    producers = [
        multiprocessing.Process(
            target=_producer, args=(str(home), k, batches, str(tmp_path / f"log-{k}"), seed)
        )
        for k in range(PRODUCERS)
    ]
    for p in producers:
        p.start()
    up = (0.3, 1.5) if target == "writer" else (1.0, 4.0)  # a fleet takes longer to start
    for _ in range(kills):  # SIGKILL at random moments while producers wait
        w = _start(home, target)
        time.sleep(rng.uniform(*up))
        _kill(w)
        time.sleep(rng.uniform(0.0, 0.3))  # waits meanwhile see no writer
    w = _start(home, target)  # a final, uninterrupted one answers the rest
    try:
        # On a quiet machine the producers may be done before it is up: the SIGTERM below is
        # for a started fleet (one killed while importing dies by the signal, exit -15).
        _wait_up(home, target, w)
        for p in producers:
            p.join(WAIT_S * 2)
            assert p.exitcode == 0, f"seed {seed}: producer exit {p.exitcode}"
    finally:
        w.send_signal(signal.SIGTERM)
        assert w.wait(60) == 0
    logged = {
        k: [json.loads(x) for x in (tmp_path / f"log-{k}").read_text().splitlines()]
        for k in range(PRODUCERS)
    }
    ahead = [e["batch"] for lines in logged.values() for e in lines if not e["present"]]
    assert not ahead, f"seed {seed}: told applied before the store held it: {ahead[:5]}"
    assert {e["status"] for lines in logged.values() for e in lines} == {"applied"}
    stored = _contents(home)
    for k in range(PRODUCERS):
        assert len(logged[k]) == batches
        expected = [c for e in logged[k] for c in e["contents"]]
        assert stored[f"w-{k}"] == expected, f"seed {seed}: producer {k} lost or doubled"

"""A bounded load test on loopback: 16 concurrent HTTP clients append through a real
`quill serve`; a real fleet drains the spool; the store holds every message exactly once."""

from __future__ import annotations

import threading
import uuid

import httpx
from service_helpers import served

from quill.store import Reader

CLIENTS, REQUESTS, PER_REQUEST = 16, 20, 5


def _client(base: str, n: int, acks: list, errors: list) -> None:
    with httpx.Client(timeout=60) as http:
        for i in range(REQUESTS):
            batch = str(uuid.uuid5(uuid.NAMESPACE_URL, f"load/{n}/{i}"))
            body = {
                "batch": batch,
                "messages": [
                    {
                        "role": "user",
                        "id": f"{n}-{i}-{k}",
                        "content": f"client {n} request {i} message {k}",
                    }
                    for k in range(PER_REQUEST)
                ],
            }
            for attempt in range(3):  # a transport error is retried with the same batch id
                try:
                    r = http.post(f"{base}/api/v1/sessions/load-{n % 4}/messages", json=body)
                    break
                except httpx.TransportError:
                    if attempt == 2:
                        raise
            if r.status_code != 202:
                errors.append(r.text)
            else:
                acks.append(r.json()["acks"][0])


def test_sixteen_concurrent_clients_lose_nothing_and_duplicate_nothing(quill, home):
    acks: list = []
    errors: list = []
    with served(quill) as base:
        threads = [
            threading.Thread(target=_client, args=(base, n, acks, errors)) for n in range(CLIENTS)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
    assert not errors
    assert len(acks) == CLIENTS * REQUESTS
    assert len({a["position"] for a in acks}) == len(acks)  # one durable record per ack
    assert quill.run("run", "--until-idle", "--timeout", "240").returncode == 0
    with Reader(home / "state.db") as r:
        rows = r.conn.execute("SELECT session_id, ext_id FROM messages").fetchall()
        batches = {b for (b,) in r.conn.execute("SELECT batch_id FROM applied_batches")}
    expected = {
        (f"load-{n % 4}", f"{n}-{i}-{k}")
        for n in range(CLIENTS)
        for i in range(REQUESTS)
        for k in range(PER_REQUEST)
    }
    assert len(rows) == len(expected)  # nothing duplicated
    assert set(rows) == expected  # nothing lost
    assert {a["batch"] for a in acks} <= batches

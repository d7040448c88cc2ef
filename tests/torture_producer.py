"""A producer of the multi-host torture test (tests/test_torture_hosts.py), run as a real
process: ``python torture_producer.py HOME NAME ACKS END_EPOCH SHARE``.

Appends numbered messages through ``quill.Client(HOME)`` until END_EPOCH (seconds since the
epoch): message n of producer NAME has the content ``"NAME n<n>"`` and goes to the session
``shared`` (written by every host) when n % SHARE == 0, else to ``NAME-own``. After each
append returns (the ack: the record is fsync'd), one JSON line ``{"n", "batch", "session",
"at"}`` is written and flushed to ACKS; a message is counted as acknowledged only once its
line is there."""

from __future__ import annotations

import json
import random
import sys
import time


def main(home: str, name: str, acks: str, end: float, share: int) -> None:
    """Produce until ``end``; raises whatever the client raises (the test sees exit != 0)."""
    import quill

    client = quill.Client(home)
    n = 0
    with open(acks, "a", encoding="utf-8") as log:
        while time.time() < end:
            session = "shared" if n % share == 0 else f"{name}-own"
            ack = client.append(session, [{"role": "user", "content": f"{name} n{n}"}])
            line = {"n": n, "batch": ack.batch_id, "session": session, "at": time.time()}
            log.write(json.dumps(line) + "\n")
            log.flush()
            n += 1
            time.sleep(random.uniform(0.02, 0.12))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), int(sys.argv[5]))

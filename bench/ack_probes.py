"""§1 probes of the ack path, measured in the same run as the appends they explain.

* ``sync_kinds``: the device's price of one ``fdatasync`` after a write that *grows* the file
  (what a spool append is: the new size and any new blocks are metadata, so ext4 commits its
  journal) against a write that *overwrites* space allocated and zero-filled beforehand (what
  SQLite's reused WAL gets: data only) and against space reserved with ``posix_fallocate``
  (unwritten extents: the first write converts them, metadata again). One process, the three
  kinds interleaved call by call so load swings hit all three alike; 4 KiB and a record of the
  size of a real 10-message append.
* ``append_cpu``: CPU µs (``process_time``) per step of one append of a real 10-message
  record: batch id, msgspec encode, the plain-JSON walk that stands in for the decode-back
  check, CRC-32, the locked write's system calls, and the whole ``Spool.append`` without its
  ``fdatasync``. Best of several passes (load only ever adds).
"""

from __future__ import annotations

import fcntl
import os
import time
import uuid
import zlib
from pathlib import Path
from typing import Any

from .common import ms, pct, ratio, tempdir
from .messages import calls, real_stream

KINDS = ("append", "overwrite", "fallocate")


def sync_kinds(d: Path, calls_per_kind: int, size: int) -> dict[str, Any]:
    """p50/p99 ms of write+fdatasync per kind (module doc) and overwrite ÷ append."""
    block = b"x" * (size - 1) + b"\n"
    total = calls_per_kind * size + (1 << 20)
    fds: dict[str, int] = {}
    for kind in KINDS:
        flags = os.O_RDWR | os.O_CREAT | (os.O_APPEND if kind == "append" else 0)
        fd = fds[kind] = os.open(d / f"sync-{kind}", flags, 0o600)
        if kind == "overwrite":
            zeros = b"\0" * (1 << 20)
            for off in range(0, total, 1 << 20):
                os.pwrite(fd, zeros, off)
            os.fsync(fd)
        elif kind == "fallocate":
            os.posix_fallocate(fd, 0, total)
            os.fsync(fd)
    lat: dict[str, list[float]] = {k: [] for k in KINDS}
    try:
        for i in range(calls_per_kind):
            for kind in KINDS:
                fd = fds[kind]
                t = time.perf_counter()
                if kind == "append":
                    os.write(fd, block)
                else:
                    os.pwrite(fd, block, i * size)
                os.fdatasync(fd)
                lat[kind].append(time.perf_counter() - t)
    finally:
        for fd in fds.values():
            os.close(fd)
    out: dict[str, Any] = {"bytes": size, "calls": calls_per_kind}
    for kind in KINDS:
        out[kind] = {
            "p50_ms": ms(pct(lat[kind], 50)),
            "p99_ms": ms(pct(lat[kind], 99)),
            "mean_ms": ms(sum(lat[kind]) / len(lat[kind])),
        }
    out["overwrite_over_append_mean"] = ratio(out["overwrite"]["mean_ms"], out["append"]["mean_ms"])
    out["overwrite_over_append_p99"] = ratio(out["overwrite"]["p99_ms"], out["append"]["p99_ms"])
    return out


def append_cpu(n: int = 300, passes: int = 5) -> dict[str, Any]:
    """CPU µs per step of one append of a real 10-message record (module doc)."""
    from quill.spool import Spool, record

    work = [c for _, c in zip(range(n), calls(real_stream(10**6), 10, prefix="cpu"))]
    bodies = [
        {
            "v": record.VERSION,
            "op": "messages.append",
            "batch": str(uuid.uuid4()),
            "producer": "bench",
            "seq": i,
            "ts": time.time(),
            "data": {"session_id": sid, "messages": msgs},
        }
        for i, (sid, msgs) in enumerate(work)
    ]
    encoder, decoder, _ = record._msgspec()
    raw = [encoder.encode(b) for b in bodies]
    lines = [record.encode(b) for b in bodies]

    def best(step) -> float:
        b = float("inf")
        for _ in range(passes):
            t = time.process_time()
            step()
            b = min(b, time.process_time() - t)
        return round(b / n * 1e6, 1)

    out: dict[str, Any] = {"record_bytes": sum(map(len, lines)) // n}
    out["uuid4_us"] = best(lambda: [str(uuid.uuid4()) for _ in range(n)])
    out["msgspec_encode_us"] = best(lambda: [encoder.encode(b) for b in bodies])
    out["plain_json_walk_us"] = best(lambda: [record.plain_json(b) for b in bodies])
    out["decode_back_check_us"] = best(
        lambda: [decoder.decode(r) == b for r, b in zip(raw, bodies)]
    )
    out["crc32_us"] = best(lambda: [zlib.crc32(r) for r in raw])
    out["record_encode_us"] = best(lambda: [record.encode(b) for b in bodies])
    with tempdir("append-cpu") as d:
        fd = os.open(d / "f", os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)

        def syscalls() -> None:  # what Spool._write does around the bytes, without the sync
            for line in lines:
                fcntl.flock(fd, fcntl.LOCK_EX)
                size = os.fstat(fd).st_size
                if size:
                    os.pread(fd, 1, size - 1)
                os.write(fd, line)
                fcntl.flock(fd, fcntl.LOCK_UN)

        out["locked_write_syscalls_us"] = best(syscalls)
        os.close(fd)
        with Spool(d / "spool", fsync=False) as sp:
            out["spool_append_no_sync_us"] = best(
                lambda: [
                    sp.append("messages.append", {"session_id": s, "messages": m}) for s, m in work
                ]
            )
    return out


def run(sizes, log) -> dict[str, Any]:
    """Both probes; ``sizes.ingest_seconds`` bounds the sync probe's length."""
    out: dict[str, Any] = {"sync_kinds": []}
    cpu = append_cpu()
    n = max(100, int(sizes.ingest_seconds * 100))
    for size in (4096, cpu["record_bytes"]):
        with tempdir("sync-kinds") as d:
            r = sync_kinds(d, n, size)
        out["sync_kinds"].append(r)
        log(
            f"§1 fdatasync {size:>6d} B: append (grows) p50 {r['append']['p50_ms']} "
            f"p99 {r['append']['p99_ms']} mean {r['append']['mean_ms']} ms | "
            f"overwrite (preallocated, zeroed) p50 {r['overwrite']['p50_ms']} "
            f"p99 {r['overwrite']['p99_ms']} mean {r['overwrite']['mean_ms']} ms | fallocate p50 "
            f"{r['fallocate']['p50_ms']} p99 {r['fallocate']['p99_ms']} ms | "
            f"overwrite ÷ append: mean "
            f"{r['overwrite_over_append_mean']} p99 {r['overwrite_over_append_p99']}"
        )
    out["append_cpu"] = cpu
    log(
        "§1 CPU µs per append of a real 10-message record ("
        + f"{cpu['record_bytes']:,} B): "
        + ", ".join(f"{k[:-3]} {v}" for k, v in cpu.items() if k.endswith("_us"))
    )
    return out

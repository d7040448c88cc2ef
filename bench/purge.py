"""Cost of ``--purge`` next to a baseline from the same run: ``python -m bench.purge [--records
40000] [--json]``.

Builds a spool of ``--records`` message records (~540 bytes each, 16 MiB segments, one
session in 400 records is the victim), applies it, takes a snapshot, then times
(a) ``spool verify`` of the whole spool (one checksummed read: the baseline) and
(b) ``ops.purge.procedure.purge`` of the victim after its ``sessions.delete`` (three spool
scans, the rewrite of every segment holding the victim, the live store's scrub: FTS optimize +
VACUUM + TRUNCATE checkpoint, a compacted fresh snapshot, the old one removed).
Reported: both in seconds and their ratio, with the spool size and what was rewritten, and
the scrub's part (seconds of its optimize and VACUUM, share of the purge), and (c) the
pending-purge check ``quill doctor`` / ``quill status`` run (``ops.purge.pending``) after it.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from quill.jobs.worker_jobs import snapshot
from quill.ops.purge.procedure import interrupted, purge
from quill.ops.recover.replay import replay, verify
from quill.spool import Spool

from .common import ratio, tempdir


def run(records: int) -> dict[str, Any]:
    with tempdir("purge") as root:
        spool = Spool(root / "spool", segment_bytes=16 << 20)
        for i in range(records):
            sid = "victim" if i % 400 == 0 else f"s{i % 97}"
            spool.append(
                "messages.append",
                {
                    "session_id": sid,
                    "messages": [{"role": "user", "content": f"message {i} " + "x" * 300}],
                },
            )
        spool.append("sessions.delete", {"session_ids": ["victim"], "purge": True})
        replay(root / "spool", root / "state.db", None)
        snapshot(str(root / "state.db"), str(root / "snapshots"))
        size = sum(p.stat().st_size for p in (root / "spool").glob("*.jsonl"))
        start = time.monotonic()
        verify(root / "spool")
        verify_s = time.monotonic() - start
        start = time.monotonic()
        figures = purge(root / "spool", root / "state.db", root / "snapshots", ["victim"])
        purge_s = time.monotonic() - start
        start = time.monotonic()  # what doctor / status add: the pending-purge read of the spool
        assert interrupted(root / "spool", root / "state.db") is None
        pending_s = time.monotonic() - start
    scrub = figures["store_scrub"] or {}
    return {
        "records": records,
        "spool_bytes": size,
        "store_bytes": scrub.get("bytes_before"),
        "purged": figures["records_purged"],
        "segments_rewritten": len(figures["segments_rewritten"]),
        "verify_s": round(verify_s, 3),
        "purge_s": round(purge_s, 3),
        "purge_over_verify": ratio(purge_s, verify_s),
        "scrub_s": scrub.get("seconds"),
        "scrub_optimize_s": scrub.get("optimize_seconds"),
        "scrub_vacuum_s": scrub.get("vacuum_seconds"),
        "scrub_share_of_purge": ratio(scrub.get("seconds") or 0.0, purge_s),
        "pending_check_s": round(pending_s, 3),
        "pending_check_over_verify": ratio(pending_s, verify_s),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=40_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    out = run(args.records)
    print(json.dumps(out) if args.json else "\n".join(f"{k}: {v}" for k, v in out.items()))


if __name__ == "__main__":
    main()

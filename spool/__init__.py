"""Quill's durable spool: fsync'd, checksummed JSONL segments that producers append to and
the single writer drains. See ``docs/spool-format.md`` and ``docs/architecture.md`` ("The spool").

Names are resolved on first use (PEP 562) so a producer (``quill push``) does not import the
reader and quarantine (bench/cli.py measures the push process)."""

from __future__ import annotations

from importlib import import_module
from typing import Any

_LAZY = {
    **dict.fromkeys(
        (
            "DamagedRecordError",
            "InvalidOpError",
            "NotDrainingError",
            "RecordTooLargeError",
            "SpoolError",
            "SpoolFullError",
            "SpoolLocationError",
            "WaitTimeoutError",
        ),
        "errors",
    ),
    **dict.fromkeys(("Ack", "Spool"), "producer"),
    "Quarantine": "quarantine",
    **dict.fromkeys(("Entry", "SpoolReader"), "reader"),
    "OP_KINDS": "record",
    "TORN_WRITE": "torn",
    **dict.fromkeys(("START", "Position"), "segments"),
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'quill.spool' has no attribute {name!r}")
    return getattr(import_module(f".{module}", __name__), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])

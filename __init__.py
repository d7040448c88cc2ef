"""Quill: a durable store for AI-agent transcripts.

The installed package ``quill`` is this repository's root: ``quill.spool`` (the producer side),
``quill.store`` (the SQLite store), ``quill.jobs``, ``quill.workers`` and ``quill.ops`` (CLI,
configuration, importers). Architecture: ``docs/architecture.md``.

This module stays import-light: every ``quill`` command imports it first, so public names are
resolved lazily (PEP 562 ``__getattr__``) and cost nothing until used.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__version__ = "0.2.0"

# public name -> "module:attribute", imported on first use
_LAZY: dict[str, str] = {
    "Client": "quill.ops.client.client:Client",
    "AsyncClient": "quill.ops.client.aclient:AsyncClient",
    "Outcome": "quill.ops.client.client:Outcome",
    "Ack": "quill.spool.producer:Ack",
    "FenceWarning": "quill.ops.client.fence:FenceWarning",
    **{
        name: f"quill.ops.client.errors:{name}"
        for name in (
            "QuillError",
            "InvalidInputError",
            "BadCursorError",
            "NotFoundError",
            "WaitTimeoutError",
            "NotDrainingError",
            "QuarantinedError",
            "SpoolFullError",
            "StoreBusyError",
            "OverloadedError",
            "StoreDamagedError",
            "QueueUnavailableError",
            "ScheduleUnreadableError",
            "StorageError",
        )
    },
}


def __getattr__(name: str) -> Any:
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'quill' has no attribute {name!r}")
    module, _, attr = target.partition(":")
    return getattr(import_module(module), attr)


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])

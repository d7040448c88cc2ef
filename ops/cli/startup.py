"""What every ``quill`` command does first, click-free: the ``quill push`` fast path
(``ops/cli/__init__.py``) and the click group (``ops/cli/root.py``) both call ``setup``, so
neither imports the other for it."""

from __future__ import annotations

import os
from typing import Any


def setup(home: str | None) -> Any:
    """What every command does first: owner-only file mode, then the configuration of
    ``home`` (``quill.home.load``; None = ``$QUILL_HOME`` / the default data dir)."""
    from quill import home as data_dir

    os.umask(0o077)  # every file Quill creates is owner-only (docs/architecture.md, "Data layout")
    return data_dir.load(home)

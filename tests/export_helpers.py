"""A small Quill export to import back: three one-message sessions pushed, drained and exported
with `quill export -o` (tests/test_export_round_trip.py, tests/test_export_reimport.py)."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import QuillCLI


def three_session_export(quill: QuillCLI, tmp_path: Path) -> Path:
    """Push sessions ``s0``…``s2`` (one user message each, ``message {i}``), drain, and export
    the store to ``tmp_path / "export.jsonl"``; returns that path."""
    for i in range(3):
        quill.run(
            "push",
            "--session",
            f"s{i}",
            input=json.dumps({"role": "user", "content": f"message {i}"}) + "\n",
        )
    quill.drain()
    out = tmp_path / "export.jsonl"
    quill.run("export", "-o", str(out))
    return out

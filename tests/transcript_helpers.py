"""Shared by the transcript semantics tests (test_semantics_writes.py,
test_semantics_reads.py): ``n`` user/assistant turns with ids and text named by a word."""

from __future__ import annotations

from semantics_helpers import assistant, user


def _turns(n: int, word: str = "turn") -> list[dict]:
    out = []
    for i in range(n):
        out += [
            user(f"{word} question {i}", id=f"{word}-u{i}"),
            assistant(f"{word} answer {i}", id=f"{word}-a{i}"),
        ]
    return out

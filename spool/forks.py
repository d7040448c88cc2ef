"""Which fork of this process is running, known without a system call.

``generation()`` is a counter every forked child increments (``os.register_at_fork``, which
``multiprocessing``'s fork start method runs too). Per-process state a forked child must not
share with its parent — random bytes drawn ahead for batch ids (``spool.envelope.RandomIds``),
a client's spool handle — keeps the generation it was made in and is remade when the current
one differs: the check ``os.getpid()`` gave, without its system call on every append.
"""

from __future__ import annotations

import os

_generation = 0


def _forked() -> None:
    global _generation
    _generation += 1


os.register_at_fork(after_in_child=_forked)


def generation() -> int:
    """How many forks lie between this process and the one that first imported this module
    (0 there); differs in every forked child from its parent's value at the fork."""
    return _generation

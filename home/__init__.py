"""Layer 0: a Quill data dir, its settings and its run directory. Imports nothing from the rest
of Quill, so every layer (spool < store < jobs < workers < ops) may import it; every public
name is re-exported here (``from quill.home import RunDir``).

* ``quill.home.layout``: every file and folder name in a data dir, and where the data dir is.
* ``quill.home.settings``: ``Settings``, the defaults table ``DEFAULTS``, ``load`` and
  ``ConfigError``.
* ``quill.home.identity``: process identity (``process_identity``, ``holder_alive``), which
  deciding whether a run-directory record is current needs.
* ``quill.home.rundir``: ``RunDir`` and the typed records it keeps (``Halt``, ``SwapRequest``,
  ``WriterStatus``).
* ``quill.home.throttle``: ``Throttle``, the one rule for warnings that repeat.
* ``quill.home.descriptors``: descriptor exhaustion (EMFILE/ENFILE) decided by errno for
  every layer (``is_exhaustion``, ``exhausted_now``).

Every command imports this package, the per-turn ``quill push`` included, so it stays cheap:
records are NamedTuples (no ``dataclasses``/``inspect``), and ``psutil`` and ``tomllib`` are
imported only when used (tests/test_cli_contract.py checks the push path).
"""

from __future__ import annotations

from quill.home.descriptors import EXHAUSTED_ERRNOS, exhausted_now, is_exhaustion
from quill.home.identity import (
    BOOT_SHIFT_S,
    boot_id,
    holder_alive,
    process_identity,
    read_holder,
    runner_dead,
    runner_tag,
    start_ticks,
)

# Dependency order: layout < settings, identity < rundir.
from quill.home.layout import (
    AGENT_ROOTS,
    CONFIG_TOML,
    DATA_DIR_MARKERS,
    EVIDENCE_DIR,
    LOGS_DIR,
    OTLP_LINKS_DB,
    QUEUE_DB,
    RUN_DIR,
    SCHEDULE_DB,
    SNAPSHOT_GLOB,
    SNAPSHOTS_DIR,
    SPOOL_DIR,
    SPOOL_ID,
    STATE_DB,
    TOKENS_DB,
    WAITERS_DIR,
    WATCH_STATE,
    agent_home,
    default_home,
    evidence_dir,
    parse_snapshot_name,
    snapshot_name,
)
from quill.home.rundir import (
    ANY_STORE,
    LEASES,
    ROLES,
    Halt,
    RunDir,
    SwapRequest,
    WriterStatus,
    read_halt,
)
from quill.home.settings import (
    ANONYMOUS,
    DAY,
    DEFAULTS,
    ConfigError,
    DataDirError,
    Settings,
    check_home,
    load,
)
from quill.home.throttle import Throttle

__all__ = [
    "AGENT_ROOTS",
    "WAITERS_DIR",
    "WATCH_STATE",
    "agent_home",
    "CONFIG_TOML",
    "DATA_DIR_MARKERS",
    "EVIDENCE_DIR",
    "LOGS_DIR",
    "QUEUE_DB",
    "RUN_DIR",
    "SCHEDULE_DB",
    "SNAPSHOT_GLOB",
    "SNAPSHOTS_DIR",
    "SPOOL_DIR",
    "SPOOL_ID",
    "STATE_DB",
    "TOKENS_DB",
    "OTLP_LINKS_DB",
    "default_home",
    "evidence_dir",
    "parse_snapshot_name",
    "snapshot_name",
    "ANONYMOUS",
    "DAY",
    "DEFAULTS",
    "ConfigError",
    "DataDirError",
    "check_home",
    "Settings",
    "load",
    "BOOT_SHIFT_S",
    "boot_id",
    "holder_alive",
    "runner_dead",
    "runner_tag",
    "process_identity",
    "read_holder",
    "start_ticks",
    "ANY_STORE",
    "LEASES",
    "ROLES",
    "Halt",
    "RunDir",
    "SwapRequest",
    "WriterStatus",
    "read_halt",
    "Throttle",
    "EXHAUSTED_ERRNOS",
    "exhausted_now",
    "is_exhaustion",
]

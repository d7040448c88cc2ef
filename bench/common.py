"""Small helpers shared by the benchmark sections: percentiles, temp dirs, machine facts."""

from __future__ import annotations

import contextlib
import os
import platform
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TMP_ROOT = Path(os.environ.get("QUILL_BENCH_TMP", "/tmp"))


@dataclass(frozen=True)
class Sizes:
    """Every size knob of a run; ``--quick``/default/``--full`` pick one of ``PROFILES``."""

    name: str
    ingest_seconds: float  # §1: wall time of each (system, batch, procs) run
    searchable_n: int  # §2: real messages drained per chunk size
    naive_seconds: float  # §2: time budget of the naive per-message writer
    scale_ns: tuple[
        int, ...
    ]  # §5: store sizes (synthetic); §3 searches the ones >= 100k (or the largest)
    search_reps: int  # §3: repetitions of each query
    maint_producers: int  # §4: producer processes appending during maintenance
    idle_seconds: float  # §4: idle window before maintenance
    naive_search_max: int  # §3: largest store the naive FTS baseline is built for
    reps: int = 1  # §2: repetitions (median reported)


PROFILES = {
    "quick": Sizes("quick", 1.0, 3_000, 1.5, (2_000, 10_000), 15, 4, 1.5, 10_000, 1),
    "default": Sizes("default", 3.0, 10_000, 3.0, (10_000, 100_000), 40, 4, 3.0, 100_000, 3),
    "full": Sizes("full", 5.0, 50_000, 5.0, (10_000, 100_000, 1_000_000), 60, 4, 5.0, 100_000, 3),
}


def pct(values: list[float], p: float) -> float | None:
    """The p-th percentile (nearest rank) of ``values``; None when empty."""
    if not values:
        return None
    s = sorted(values)
    k = max(0, min(len(s) - 1, int(round(p / 100.0 * len(s) + 0.5)) - 1))
    return s[k]


def ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000.0, 3)


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return round(a / b, 2)


@contextlib.contextmanager
def tempdir(prefix: str) -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix=f"quill-bench-{prefix}-", dir=TMP_ROOT))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


class Timer:
    def __enter__(self) -> Timer:
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self.t0


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


def machine() -> dict[str, Any]:
    """Machine and version facts recorded with every result file."""
    import apsw

    info: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "nproc": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "apsw": apsw.apsw_version(),
        "sqlite_apsw": apsw.sqlite_lib_version(),
        "sqlite_stdlib": sqlite3.sqlite_version,
    }
    try:
        with open("/proc/meminfo") as f:
            info["ram_gib"] = round(int(f.readline().split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    from importlib import metadata

    for pkg in ("openai-agents", "langgraph-checkpoint-sqlite", "langgraph-checkpoint"):
        try:
            info[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            info[pkg] = None
    fs = TMP_ROOT
    try:
        import subprocess

        out = subprocess.run(
            ["df", "-T", str(fs)], capture_output=True, text=True
        ).stdout.splitlines()
        info["tmp_fs"] = out[-1].split()[1] if len(out) > 1 else None
    except Exception:
        info["tmp_fs"] = None
    return info


@contextlib.contextmanager
def revision_tree(rev: str | None) -> Iterator[str]:
    """A temp dir holding ``quill`` as of git revision ``rev`` (``git archive``; empty when
    ``rev`` is None), removed on exit: put it first on ``PYTHONPATH`` to run the bench code of
    this tree against that revision. Raises ``subprocess.CalledProcessError`` when git fails."""
    import subprocess

    root = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory(prefix="quill-bench-base-") as tmp:
        if rev is not None:
            archive = subprocess.run(
                ["git", "-C", str(root), "archive", "--prefix=quill/", rev],
                check=True,
                capture_output=True,
            ).stdout
            subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
            _map_packages(Path(tmp) / "quill")
        yield tmp


def _map_packages(tree: Path) -> None:
    """Give the archived ``tree`` the packages its pyproject maps elsewhere
    (``[tool.setuptools.package-dir]``, e.g. ``quill.integrations`` = ``ops/integrations``) as
    symlinks: without them Python finds such a package through this checkout's editable
    install, and the baseline would run this tree's code."""
    import tomllib

    dirs = tomllib.loads((tree / "pyproject.toml").read_text())["tool"]["setuptools"]
    for name, where in dirs.get("package-dir", {}).items():
        parts = name.split(".")[1:]
        if parts and where != "/".join(parts):
            link = tree.joinpath(*parts)
            if not link.exists():
                link.symlink_to(tree / where, target_is_directory=True)


def run_json(module: str, tree: str, *args: str) -> Any:
    """The JSON that ``python -m <module> *args`` prints with ``tree`` (``revision_tree``)
    first on ``PYTHONPATH``. Raises ``subprocess.CalledProcessError`` when the run fails."""
    import json
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=Path(__file__).resolve().parent.parent,
        env=dict(os.environ, PYTHONPATH=tree),
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out)


def at_revision(module: str, rev: str, *args: str) -> Any:
    """The JSON that ``python -m <module> *args`` prints under the ``quill`` of git revision
    ``rev``: a baseline measured on the same machine in the same run. Raises
    ``subprocess.CalledProcessError`` when git or the run fails."""
    with revision_tree(rev) as tree:
        return run_json(module, tree, *args)

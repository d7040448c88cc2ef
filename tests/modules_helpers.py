"""The installed package's modules, found from the repository: what the static tests of
imports (tests/test_layers.py, tests/test_store_door.py) walk."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

#: Top-level folders of the repository that are not part of the installed package.
NOT_INSTALLED = {"tests", "bench", "build", "docs", "out"}


def _package_dirs() -> dict[str, Path]:
    """``{package: folder}`` from pyproject's ``package-dir`` (quill = the repository root)."""
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    return {name: (REPO / folder).resolve() for name, folder in setuptools["package-dir"].items()}


def production_modules(root: Path = REPO) -> dict[str, Path]:
    """``{dotted module name: file}`` of every module the wheel installs from ``root``."""
    dirs = sorted(_package_dirs().items(), key=lambda kv: -len(kv[1].parts))
    if root != REPO:
        dirs = [(name, root / d.relative_to(REPO)) for name, d in dirs]
    out = {}
    for path in _sources(root):
        package, folder = next((n, d) for n, d in dirs if path.is_relative_to(d))
        parts = [*package.split("."), *path.relative_to(folder).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _sources(root: Path) -> list[Path]:
    """The ``.py`` files under ``root``, sorted, outside ``NOT_INSTALLED`` and hidden or
    ``.egg-info`` folders; those folders are not entered (a virtualenv in ``.venv`` holds
    tens of thousands of files)."""
    found = []
    for folder, dirs, files in os.walk(root):
        top = Path(folder) == root
        dirs[:] = [
            d
            for d in dirs
            if not d.startswith(".")
            and not d.endswith(".egg-info")
            and not (top and d in NOT_INSTALLED)
        ]
        found += [Path(folder) / f for f in files if f.endswith(".py")]
    return sorted(found)

"""One bytecode cache for every process of a test run, filled before the first of them starts.

Where ``PYTHONDONTWRITEBYTECODE`` is set (as on the project's machines) the run's processes
share a cache folder instead (``PYTHONPYCACHEPREFIX``, in the run's state dir: the checkout stays
free of ``__pycache__`` folders). With a prefix set, an interpreter reads compiled modules from
the prefix only, never from the ``__pycache__`` folders beside the sources, so an empty prefix
makes the run compile again every standard-library and installed module it imports, and the
pytest-xdist workers, which start together, each did it all at once (a worker's collection:
25 CPU s with an empty prefix, 16.5 with the installed modules' own files in it).

``fill`` gives the prefix, before any worker starts, the compiled files the interpreter's
library and site-packages already hold (a symbolic link each: a stale one is replaced by a new
file, never written through, as Python writes bytecode to a temporary name and renames it)
and compiles the checkout's own modules once; the tests' modules are left to the workers
(pytest rewrites their asserts as it imports them)."""

from __future__ import annotations

import compileall
import os
import sys
from pathlib import Path

#: Folders of the library and site-packages never imported by a test run (whatever is, is
#: compiled on first import as before).
_PRUNE = {"test", "tests", "idlelib", "lib2to3", "turtledemo", "ensurepip", "pip"}
#: The checkout's folders that are not the package's modules.
_NOT_PACKAGE = {"tests", "bench", ".venv", ".git"}


def share(run_dir: Path, checkout: Path) -> None:
    """Make every later process of the run (xdist workers, CLI calls, fleets: they inherit this
    environment) cache bytecode in ``run_dir/pycache``, filled by ``fill``, when
    ``PYTHONDONTWRITEBYTECODE`` is set; otherwise leave the environment as it is."""
    if os.environ.pop("PYTHONDONTWRITEBYTECODE", None) is None:
        return
    prefix = Path(os.environ.setdefault("PYTHONPYCACHEPREFIX", str(run_dir / "pycache")))
    if prefix.is_relative_to(run_dir):  # a prefix given by the caller is theirs: left as it is
        fill(prefix, checkout)


def fill(prefix: Path, checkout: Path) -> int:
    """Link into ``prefix`` each ``__pycache__`` file of this interpreter's version found
    under ``sys.path`` (standard library, site-packages), at the name the import system looks
    for there, then compile ``checkout``'s modules (not ``tests``, ``bench``, ``.venv``) into
    it. Returns the number of files linked. Raises ``OSError`` if ``prefix`` cannot be made."""
    suffix = f".{sys.implementation.cache_tag}.pyc"
    linked = 0
    walked: set[str] = set()
    for entry in sys.path:
        if not entry or not os.path.isabs(entry) or entry in walked or not os.path.isdir(entry):
            continue
        walked.add(entry)
        for folder, subdirs, files in os.walk(entry):
            subdirs[:] = [d for d in subdirs if d not in _PRUNE]
            if os.path.basename(folder) != "__pycache__":
                continue
            subdirs.clear()
            # the import system's name: the prefix, then the source's folder without its root
            dest = prefix / os.path.dirname(folder).lstrip(os.sep)
            for name in files:
                if not name.endswith(suffix):
                    continue
                dest.mkdir(parents=True, exist_ok=True)
                try:
                    os.symlink(os.path.join(folder, name), dest / name)
                    linked += 1
                except FileExistsError:
                    pass
    old = sys.pycache_prefix
    sys.pycache_prefix = str(prefix)  # compileall writes where cache_from_source says
    try:
        for path in sorted(checkout.iterdir()):
            if path.is_dir() and path.name not in _NOT_PACKAGE and (path / "__init__.py").exists():
                compileall.compile_dir(path, quiet=1)
            elif path.suffix == ".py":
                compileall.compile_file(path, quiet=1)
    finally:
        sys.pycache_prefix = old
    return linked

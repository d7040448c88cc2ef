"""Layers import downwards only: quill.home < spool < store < jobs < workers < ops.

Every production module (each ``.py`` file of the installed package: the repository minus
tests/, bench/ and tooling) is parsed with ``ast``, and every import it can make is an edge:
module level, inside functions and under ``if TYPE_CHECKING:`` alike; absolute (``quill.x``)
and relative (``from ..store import y``); plus literal module names given to
``importlib.import_module`` and ``"quill.pkg.mod:attr"`` references that something resolves
by import later (APScheduler job rows, lazy command tables). An edge into a higher layer
fails, and so does a module that belongs to no layer.

The package root ``quill/__init__.py`` is a facade: it re-exports ``quill.Client`` and the
error classes lazily (PEP 562) from ``ops``, so it ranks with ``ops`` (nothing below ops may
import names from it), and it must import nothing from Quill eagerly — every ``import
quill.spool`` runs it first, so an eager import there would be an edge from every layer.
"""

from __future__ import annotations

import ast
import functools
import re
import shutil
from pathlib import Path

import pytest
from modules_helpers import REPO, production_modules

#: Rank of each top-level name of the package; the root facade ranks with ops (module doc).
LAYERS = {
    "quill.home": 0,
    "quill.spool": 1,
    "quill.store": 2,
    "quill.jobs": 3,
    "quill.workers": 4,
    "quill.ops": 5,
    "quill.integrations": 5,
    "quill": 5,
}
#: A string naming a Quill module, optionally with ``:attribute`` (a callable reference).
MODULE_REF = re.compile(r"quill(\.[A-Za-z_]\w*)+(:[A-Za-z_][\w.]*)?")


def layer(module: str) -> int | None:
    """The rank of ``module`` (the ``LAYERS`` entry it is or lies under; the root ``quill``
    only as itself), None when it is in no layer."""
    for name, rank in LAYERS.items():
        if module == name or (name != "quill" and module.startswith(name + ".")):
            return rank
    return None


def imports(module: str, path: Path) -> list[tuple[int, str]]:
    """``(line, target module)`` of every Quill import and module reference in ``path``."""
    package = path.name == "__init__.py"
    return list(_imports_of(module, package, path.read_text(encoding="utf-8")))


@functools.cache
def _imports_of(module: str, is_package: bool, source: str) -> tuple[tuple[int, str], ...]:
    """``imports`` of ``source``: each text is parsed once per process (the tests walk the
    package, and copies of it that differ in one file, several times)."""
    tree = ast.parse(source, module)
    package = module if is_package else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            # ``from quill import home`` imports the module quill.home, not the facade.
            found += [
                (node.lineno, f"{target}.{a.name}" if target == "quill" else target)
                for a in node.names
            ]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if MODULE_REF.fullmatch(node.value):
                found.append((node.lineno, node.value.partition(":")[0]))
    return tuple((line, t) for line, t in found if t == "quill" or t.startswith("quill."))


def _resolves_to(target: str, modules: dict[str, Path]) -> str:
    """``target`` itself or, for ``from quill import name`` of a non-module name (such as
    ``__version__``), the package root."""
    if layer(target) is None and target not in modules and target.rpartition(".")[0] in modules:
        return target.rpartition(".")[0]
    return target


def upward_edges(root: Path = REPO) -> tuple[list[str], list[str]]:
    """``(upward edges, modules in no layer)`` of the package at ``root``, as readable lines."""
    modules = production_modules(root)
    unlayered = sorted(m for m in modules if layer(m) is None)
    up = []
    for module, path in modules.items():
        source = layer(module)
        for line, target in imports(module, path):
            target = _resolves_to(target, modules)
            rank = layer(target)
            if rank is None:
                unlayered.append(f"{target} (imported by {module}:{line})")
            elif source is not None and rank > source:
                up.append(
                    f"{path.relative_to(root)}:{line}: {module} (layer {source}) "
                    f"imports {target} (layer {rank})"
                )
    return up, unlayered


def test_no_module_imports_a_higher_layer():
    up, unlayered = upward_edges()
    assert not unlayered, f"modules in no layer: {unlayered}"
    assert not up, "upward imports:\n" + "\n".join(up)


def test_the_walk_sees_every_layer_and_every_kind_of_import():
    """The checker is not vacuous: it finds modules of each layer and edges of each kind."""
    modules = production_modules()
    assert {layer(m) for m in modules} == set(range(6))
    assert "quill.home" in modules and "quill.ops.worker_main" in modules
    # quill.home is a package: each of its modules is layer 0 as well.
    assert {
        "quill.home.layout",
        "quill.home.settings",
        "quill.home.identity",
        "quill.home.rundir",
    } <= {m for m in modules if layer(m) == 0}
    assert "quill.integrations.openai_agents" in modules  # package-dir maps ops/integrations
    edges = {t for m, p in modules.items() for _, t in imports(m, p)}
    assert "quill.home" in edges and "quill.store.errors" in edges  # absolute, relative
    worker_jobs = imports("quill.jobs.worker_jobs", modules["quill.jobs.worker_jobs"])
    assert "quill.store.sqlite.indexer" in {t for _, t in worker_jobs}  # inside a function


def test_layer_0_imports_only_itself():
    """The whole ``quill.home`` package is layer 0: its modules import one another and nothing
    else from Quill (not even the root facade, which ranks with ops)."""
    modules = production_modules()
    home = {m: p for m, p in modules.items() if layer(m) == 0}
    assert len(home) >= 5, sorted(home)
    outside = [
        f"{m}:{line} imports {t}"
        for m, p in home.items()
        for line, t in imports(m, p)
        if not (t == "quill.home" or t.startswith("quill.home."))
    ]
    assert not outside, outside


def test_the_root_facade_imports_nothing_from_quill_eagerly():
    """Every ``import quill.x`` runs ``quill/__init__.py``: at module level it may import only
    the standard library; its re-exports are lazy ``"quill.ops…:Name"`` references (edges of
    the top layer, checked like any other)."""
    tree = ast.parse((REPO / "__init__.py").read_text(encoding="utf-8"))
    eager = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    named = [a.name for n in eager for a in n.names] + [
        n.module or "" for n in eager if isinstance(n, ast.ImportFrom)
    ]
    assert not [m for m in named if m.startswith("quill") or m.startswith(".")], named
    assert any(t.startswith("quill.ops.") for _, t in imports("quill", REPO / "__init__.py"))


UPWARD = {
    "module level": "from quill.ops import errors\n",
    "in a function": "def f():\n    from quill.workers.scheduler import fire\n",
    "under TYPE_CHECKING": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
    "    from quill.jobs.catalog import JobSpec\n",
    "relative": "from ..workers import FIRE_REF\n",
    "a callable reference": 'REF = "quill.workers.scheduler:fire"\n',
}


def _copy(tmp_path: Path) -> Path:
    """A copy of the package's sources (the walk needs files, not an installed package)."""
    copy = tmp_path / "quill"
    shutil.copytree(
        REPO,
        copy,
        ignore=shutil.ignore_patterns(
            ".venv", ".git", "build", "*.egg-info", "__pycache__", ".pytest_cache", "tests", "bench"
        ),
    )
    return copy


@pytest.mark.parametrize("kind", sorted(UPWARD))
def test_an_injected_upward_import_fails(tmp_path, kind):
    """A copy of the package with one upward import added to ``store`` is caught."""
    copy = _copy(tmp_path)
    lease = copy / "store" / "lease.py"
    lease.write_text(lease.read_text() + UPWARD[kind])
    up, unlayered = upward_edges(copy)
    assert not unlayered
    assert len(up) == 1 and up[0].startswith("store/lease.py:"), up
    assert "quill.store.lease (layer 2)" in up[0], up


def test_a_module_in_no_layer_fails(tmp_path):
    copy = _copy(tmp_path)
    (copy / "tools").mkdir()
    (copy / "tools" / "helper.py").write_text("import os\n")
    up, unlayered = upward_edges(copy)
    assert unlayered == ["quill.tools.helper"] and not up

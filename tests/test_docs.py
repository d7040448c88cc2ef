"""The docs say what the code does: README's first screen shows a client snippet that runs,
its job names are real, and docs/configuration.md documents every config.toml key (with its
real default and range)."""

from __future__ import annotations

import re
import subprocess
import sys

import pack_env
import pytest
from conftest import REPO, quill_env, worker_pids

README = (REPO / "README.md").read_text()
CONFIG_DOC = (REPO / "docs" / "configuration.md").read_text()


def test_readme_first_screen_shows_the_client_in_five_lines_and_it_runs(home, fleet):
    first_screen = "\n".join(README.splitlines()[:25])
    block = re.search(r"```python\n(.*?)```", first_screen, re.S)
    assert block, "no python block on README's first screen"
    code = [line for line in block.group(1).splitlines() if line.strip()]
    assert len(code) <= 5 and "quill.Client()" in block.group(1)
    worker_pids(home)  # the fleet is up (the snippet waits 5 s for its batch)
    out = subprocess.run(
        [sys.executable, "-c", block.group(1)],
        capture_output=True,
        text=True,
        env=quill_env(home),
        cwd=home.parent,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "status='applied'" in out.stdout and "where is the config parsed?" in out.stdout


def test_readme_job_names_are_real():
    from quill.jobs import catalog

    named = set(
        re.findall(
            r"quill (?:jobs run|schedule add|schedule pause|schedule remove) ([a-z_]+)", README
        )
    )
    listed = re.search(r"quill jobs list[^\n]*# e\.g\. ([a-z_, ]+)", README)
    assert listed, "README no longer lists example job names after `quill jobs list`"
    named |= {n.strip() for n in listed.group(1).split(",")}
    named -= {"NAME", "JOB", "ID"}
    unknown = named - set(catalog.BY_NAME)
    assert named and not unknown, f"README names jobs that do not exist: {unknown}"


def test_every_config_key_is_documented_with_its_default():
    from quill.home import settings as config

    defaults = {
        name: value for name, value in config.Settings._field_defaults.items() if name != "home"
    }
    for (section, key), name in config._SECTIONS.items():
        row = next(
            (line for line in CONFIG_DOC.splitlines() if line.startswith(f"| `{section}.{key}` |")),
            None,
        )
        assert row, f"{section}.{key} is not documented in docs/configuration.md"
        default = defaults[name]
        if default is None:
            assert "absent" in row, row
        elif isinstance(default, bool):
            assert f"`{str(default).lower()}`" in row, row
        elif isinstance(default, tuple):
            assert str(list(default)).replace("'", '"') in row, row
        elif isinstance(default, str):
            assert f'`"{default}"`' in row, row
        else:
            shown = str(int(default)) if float(default).is_integer() else repr(default)
            assert f"`{shown}`" in row, (row, default)
    documented = set(re.findall(r"^\| `([a-z_]+\.[a-z_]+)` \|", CONFIG_DOC, re.M))
    assert documented == {f"{s}.{k}" for s, k in config._SECTIONS}


def test_the_documented_example_config_loads(tmp_path):
    from quill import home as config

    example = re.search(r"```toml\n(.*?)```", CONFIG_DOC, re.S).group(1)
    (tmp_path / "config.toml").write_text(example)
    defaults = config.Settings(home=tmp_path.resolve())  # the run's (QUILL_TEST_PACK_MIN_BYTES)
    assert config.load(tmp_path) == defaults._replace(
        pack_min_bytes=pack_env.production_pack_min_bytes()
    )


@pytest.mark.parametrize(
    "setting",
    [
        "[writer]\nchunk_rows = 0",
        "[writer]\npoll_interval = 0",
        "[writer]\nhung_after_s = -1",
        "[spool]\nsegment_bytes = 10",
        "[snapshots]\nkeep = 0",
        "[prune]\nretention_s = -5",
        "[prune]\nstale_after_s = nan",
        "[spool]\nretention_s = inf",
        "[writer]\nchunk_rowz = 5",
        '[writer]\nchunk_rows = "5"',
    ],
)
def test_bad_config_values_are_errors_in_the_one_format(quill, home, setting):
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(setting + "\n")
    proc = quill.run("status", check=False)
    assert (
        proc.returncode == 1
        and proc.stderr.startswith("quill: error: ")
        and "config.toml" in proc.stderr
    )
    assert "docs/configuration.md" in proc.stderr


def test_every_file_architecture_md_names_exists():
    """docs/architecture.md names the files of the main flow and the packages of each layer:
    each named source file or folder (a backticked path ending in ``.py`` or ``/``) exists, and
    the main-flow table names at most three files per path."""
    doc = (REPO / "docs" / "architecture.md").read_text()
    named = set(re.findall(r"`((?:[\w.-]+/)*[\w.-]+\.py)`", doc))
    named |= {p for p in re.findall(r"`((?:[\w-]+/)+)`", doc)}
    # The layer table names a package's folders relative to it (``apply/`` of store/).
    bases = (REPO, REPO / "store", REPO / "ops")
    missing = sorted(p for p in named if not any((b / p).exists() for b in bases))
    assert len(named) >= 12, named
    assert not missing, f"docs/architecture.md names files that do not exist: {missing}"
    flow = re.search(r"## The main flow in files\n(.*?)\n## ", doc, re.S)
    assert flow, "docs/architecture.md lost its 'The main flow in files' section"
    rows = [r for r in flow.group(1).splitlines() if r.startswith("| an ") or r.startswith("| a ")]
    assert len(rows) == 3, rows
    for row in rows:
        files = re.findall(r"`([\w/]+\.py)`", row)
        assert 1 <= len(files) <= 3 and all((REPO / f).is_file() for f in files), row


#: Backticked dotted names in the docs that are files or op kinds, not code (config keys,
#: ``section.key`` of ``config.toml``, are told apart by ``_config_keys``).
NOT_CODE = {"ops.md"}
NOT_CODE_PREFIXES = ("spool.purged", "spool.interrupted_purge")


def _config_keys() -> set[str]:
    from quill.home import settings

    return {f"{section}.{key}" for section, key in settings._SECTIONS}


def _resolves(dotted: str) -> bool:
    """Whether ``quill.<dotted>`` names a module, or an attribute reached from one."""
    import importlib

    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module("quill." + ".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def test_every_module_the_docs_name_exists():
    """A backticked ``store.x.y`` / ``ops.…`` / ``spool.…`` name in README or docs/ names a real
    module or attribute (modules move; the docs must follow)."""
    pattern = re.compile(r"`((?:store|ops|spool|jobs|workers|home)\.[A-Za-z_][\w.]*)")
    stale, config = set(), _config_keys()
    for doc in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for name in pattern.findall(doc.read_text()):
            name = name.rstrip(".")
            if name in NOT_CODE or name in config or name.startswith(NOT_CODE_PREFIXES):
                continue
            if not _resolves(name):
                stale.add(f"{doc.name}: {name}")
    assert not stale, sorted(stale)

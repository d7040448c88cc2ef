"""The built wheel installs one top-level package, `quill`, beside a distribution that owns the
generic name `ops` (PyPI has one), and `import quill` works in that fresh venv.

The default run installs the wheel without its dependencies (fast, offline); QUILL_SLOW=1 also
installs them and runs `quill --version` and a client append from the fresh venv.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import REPO

GENERIC = {"ops", "spool", "store", "jobs", "workers", "tests", "bench"}


def _fake_wheel(dist: Path, name: str) -> Path:
    """A minimal real wheel of a distribution named ``name`` with a top-level package ``name``."""
    files = {
        f"{name}/__init__.py": "MARK = 'the other ops'\n",
        f"{name}-1.0.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n",
        f"{name}-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: quill-test\n"
        "Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = (
            base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        )
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    record.append(f"{name}-1.0.dist-info/RECORD,,")
    wheel = dist / f"{name}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for path, text in files.items():
            z.writestr(path, text)
        z.writestr(f"{name}-1.0.dist-info/RECORD", "\n".join(record) + "\n")
    return wheel


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    dist = tmp_path_factory.mktemp("dist")
    # Built from a clean copy: setuptools' build/ dir in a work tree could carry stale modules.
    source = tmp_path_factory.mktemp("src") / "quill"
    shutil.copytree(
        REPO,
        source,
        ignore=shutil.ignore_patterns(
            ".venv", ".git", "build", "*.egg-info", "__pycache__", ".pytest_cache", "out"
        ),
    )
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(source)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    [built] = dist.glob("quill-*.whl")
    return built


def test_the_wheel_holds_only_the_quill_package(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"quill", wheel.name.split("-py3")[0] + ".dist-info"}
    assert not tops & GENERIC
    for module in (
        "quill/__init__.py",
        "quill/home/__init__.py",
        "quill/home/settings.py",
        "quill/spool/producer.py",
        "quill/ops/client/client.py",
        "quill/integrations/openai_agents.py",
        "quill/ops/cli/__init__.py",
    ):
        assert module in names, module


def _venv(tmp_path: Path) -> Path:
    env = tmp_path / "fresh venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(env)], check=True, timeout=300
    )
    return env / "bin" / "python"


def _pip(python: Path, *args: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", *args],
        check=True,
        capture_output=True,
        timeout=900,
    )


def test_install_beside_a_package_named_ops_and_import_quill(wheel, tmp_path):
    python = _venv(tmp_path)
    _pip(python, _fake_wheel(tmp_path, "ops").as_posix())
    slow = os.environ.get("QUILL_SLOW") == "1"
    _pip(python, *([] if slow else ["--no-deps"]), wheel.as_posix())
    probe = (
        "import ops, quill, quill.spool, quill.ops, quill.integrations\n"
        "assert ops.MARK == 'the other ops', ops\n"
        "assert quill.ops.__file__.endswith('quill/ops/__init__.py'), quill.ops.__file__\n"
        "assert 'Client' in dir(quill)\n"
        "print(quill.__version__)\n"
    )
    out = subprocess.run(
        [str(python), "-c", probe], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    import quill

    assert out.stdout.strip() == quill.__version__
    site = next((python.parent.parent / "lib").glob("python3*/site-packages"))
    assert not {p.name for p in site.iterdir()} & (GENERIC - {"ops"})
    if slow:  # with the dependencies: the console script and a client append
        home = tmp_path / "home"
        version = subprocess.run(
            [str(python.parent / "quill"), "--version"], capture_output=True, text=True
        )
        assert version.stdout.strip() == f"quill {quill.__version__}"
        append = (
            f"import quill; q = quill.Client({str(home)!r}); "
            "print(q.append('s', [{'role': 'user', 'content': 'hi'}]))"
        )
        done = subprocess.run(
            [str(python), "-c", append], capture_output=True, text=True, cwd=tmp_path
        )
        assert done.returncode == 0 and "Ack(" in done.stdout, done.stderr

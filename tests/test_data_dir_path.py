"""A data dir path that cannot be a data dir is one clear error, whichever way Quill is entered.

``quill.home.load`` is the funnel every entry point goes through (the CLI and its ``push``
fast path, the fleet, ``serve``, ``quill.Client``, ``quill.AsyncClient``), so each case here
is a real entry point on a real path: a file, a path under a file, and (as a second OS user)
a folder its owner keeps to itself. Each ends in ``quill: error: the data dir … `` with a hint
(the CLI) or a ``QuillError`` with a hint (Python), creates nothing and leaves the file as it
was.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import quill
from quill.home import load

MESSAGE = '{"role": "user", "content": "hi"}\n'


def _cli(home: str, *args: str) -> subprocess.CompletedProcess:
    code = "import sys\nfrom quill.ops.cli import main\nsys.argv = ['quill', *sys.argv[1:]]\nmain()"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        input=MESSAGE,
        env={**os.environ, "QUILL_HOME": home},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def a_file(tmp_path: Path) -> Path:
    path = tmp_path / "notes.txt"
    path.write_text("not a data dir\n")
    return path


@pytest.mark.parametrize(
    "args",
    [
        ("push", "--session", "s"),  # the fast path, without click
        ("push", "--session", "s", "--wait", "5", "--json"),
        ("status",),
        ("sessions", "list"),
        ("run", "--until-idle"),
        ("serve", "--listen", "127.0.0.1:0"),
    ],
    ids=" ".join,
)
def test_every_command_on_a_file_says_so_with_a_hint(a_file, args):
    proc = _cli(str(a_file), *args)
    assert proc.returncode != 0
    text = proc.stdout + proc.stderr
    assert f"the data dir {a_file} is a file, not a folder" in text
    assert "use another folder as the data dir" in text
    assert "Traceback" not in text and "--home'" not in text  # not click's usage error
    assert a_file.read_text() == "not a data dir\n"


def test_a_data_dir_under_a_file_says_so(a_file):
    proc = _cli(str(a_file / "home"), "status")
    assert proc.returncode != 0
    assert f"the data dir {a_file / 'home'} lies under a file, not a folder" in proc.stderr
    assert "quill: hint:" in proc.stderr


@pytest.mark.parametrize("make", [quill.Client, quill.AsyncClient], ids=["Client", "AsyncClient"])
def test_the_python_clients_raise_one_quill_error_with_a_hint(a_file, make):
    for path, problem in ((a_file, "is a file"), (a_file / "sub", "lies under a file")):
        with pytest.raises(quill.QuillError) as caught:
            make(path)
        assert f"the data dir {path} {problem}" in str(caught.value)
        assert caught.value.hint and "use another folder" in caught.value.hint
    assert a_file.read_text() == "not a data dir\n"


def test_a_missing_data_dir_is_fine_and_not_created(tmp_path):
    assert load(tmp_path / "new").home == tmp_path / "new"
    assert not (tmp_path / "new").exists()


def test_a_data_dir_its_owner_keeps_to_itself_is_refused_to_another_user(tmp_path):
    """Root's 0700 data dir, loaded by the ``nobody`` account (``runuser``): refused by name,
    not met later as a failed open of some file inside it."""
    import pwd
    import shutil

    if os.geteuid() != 0 or shutil.which("runuser") is None:
        pytest.skip("needs root and runuser to load a data dir as a second OS user")
    pwd.getpwnam("nobody")
    # nobody cannot run the project's interpreter (under /root); the system Python can
    # import this checkout through a world-readable link named ``quill``. pytest's tmp_path
    # lies in root's 0700 folder, which nobody could not even reach: a folder in /tmp instead.
    shared = Path(tempfile.mkdtemp(prefix="quill-datadir-"))
    lib = Path(tempfile.mkdtemp(prefix="quill-datadir-lib-"))
    try:
        os.chmod(shared, 0o755)
        os.chmod(lib, 0o755)
        (lib / "quill").symlink_to(Path(quill.__file__).resolve().parent)
        as_nobody = [
            "runuser", "-u", "nobody", "--", "env", f"PYTHONPATH={lib}",
            "PYTHONDONTWRITEBYTECODE=1", "/usr/bin/python3", "-c",
        ]  # fmt: skip
        probe = subprocess.run(
            [*as_nobody, "import quill.home"], capture_output=True, text=True, timeout=60
        )
        if probe.returncode != 0:
            pytest.skip(f"the nobody account cannot import this checkout: {probe.stderr[-200:]}")
        home = shared / "home"
        home.mkdir(mode=0o700)
        code = (
            "import sys\nfrom quill.home import DataDirError, load\n"
            "try:\n    load(sys.argv[1])\nexcept DataDirError as e:\n    print(e, '|', e.hint)\n"
        )
        out = subprocess.run(
            [*as_nobody, code, str(home)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert f"the data dir {home} cannot be read by this user" in out.stdout, out.stderr
        assert "run Quill as its owner" in out.stdout
        # A folder above it that nobody may enter: named as such.
        os.chmod(shared, 0o700)
        out = subprocess.run(
            [*as_nobody, code, str(home)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert f"the data dir {home} cannot be reached by this user" in out.stdout, out.stderr
    finally:
        shutil.rmtree(shared)
        shutil.rmtree(lib)

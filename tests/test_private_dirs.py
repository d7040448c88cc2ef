"""Nothing readable by another OS user, from the first write on: a data dir a client creates
(no fleet ever ran, so ``Settings.ensure_dirs`` never chmod'ed it) under the usual umask 022
must be owner-only — the data dir, ``run/`` (made for a waiting client's doorbell) and every
other folder Quill makes on the way — and ``quill doctor``'s file-mode check must pass.
Real processes, real files."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

from conftest import REPO, QuillCLI, quill_env

_CLIENT = """
import sys
import quill
from quill.ops.client.errors import WaitTimeoutError
c = quill.Client(sys.argv[1])
ack = c.append("s", [{"role": "user", "content": "hi"}])
try:
    c.wait(ack, timeout=0.2)  # no fleet: its doorbell is made, then it times out
except WaitTimeoutError:
    pass
"""


def _modes(top) -> dict[str, str]:
    out = {str(top): oct(stat.S_IMODE(os.stat(top).st_mode))}
    for root, dirs, _ in os.walk(top):
        for d in dirs:
            p = os.path.join(root, d)
            out[p] = oct(stat.S_IMODE(os.lstat(p).st_mode))
    return out


def test_a_data_dir_a_client_creates_is_owner_only(tmp_path):
    home = tmp_path / "new" / "quill home"  # its parent is made too: ours, so owner-only
    env = quill_env(home)
    proc = subprocess.run(
        [sys.executable, "-c", f"import os; os.umask(0o022)\n{_CLIENT}", str(home)],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    loose = {p: m for p, m in _modes(tmp_path / "new").items() if int(m, 8) & 0o077}
    assert not loose, f"folders other users can list: {loose}"
    doctor = json.loads(QuillCLI(home).run("doctor", "--json", check=False).stdout)
    modes = {c["check"]: c for c in doctor}["file modes"]
    assert modes["status"] == "ok", modes

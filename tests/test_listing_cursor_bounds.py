"""A ``--after`` cursor of a paged listing (``quill.store.paging``) holding a value no row's
key can hold — an integer past 64 bits, a number that is not finite — is a usage error
(exit 2, the listing's one error format), not a traceback from the store's SQL binding.
In-process CLI runs (``base.run``) against a real store."""

from __future__ import annotations

import base64
import json

import pytest
from harness import drain, make_home

from quill.ops.cli.base import run
from quill.ops.cli.root import cli
from quill.spool import Spool
from quill.store import paging

#: The listing name and scope of each listing's cursors (jobs history: no --job).
_LISTINGS = {
    "history": ("job_runs", paging.scope_of(None)),
    "list": ("quarantine", ""),
    "orphans": ("orphans", ""),
}


def _cursor(key: str, listing: list[str] | None = None) -> str:
    """A well-formed cursor of ``listing`` (a command) holding the raw JSON items ``key``."""
    name, scope = _LISTINGS[(listing or ["jobs", "history"])[-1]]
    text = f'["{name}","{scope}",{key[1:]}'
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


@pytest.fixture
def cfg(home):
    cfg = make_home(home, watch={"enabled": False})
    with Spool(cfg.spool_dir) as sp:
        sp.append("session.create", {"session_id": "keyed", "source": "cli"})
    drain(home)
    return cfg


@pytest.mark.parametrize(
    ("listing", "key"),
    [
        (["jobs", "history"], "[9223372036854775808]"),
        (["jobs", "history"], "[-9223372036854775809]"),
        (["jobs", "history"], "[100000000000000000000000000]"),
        (["spool", "quarantine", "list"], "[100000000000000000000000, 1]"),
        (["sessions", "orphans"], '[NaN, "x"]'),
        (["sessions", "orphans"], '[1e999, "x"]'),
    ],
)
def test_a_cursor_no_row_can_have_is_a_usage_error(capsys, home, cfg, listing, key):
    for fmt in ([], ["--json"]):
        capsys.readouterr()
        code = run(cli, ["--home", str(home), *listing, *fmt, "--after", _cursor(key, listing)])
        out = capsys.readouterr()
        assert code == 2, (out.out, out.err)
        if fmt:
            assert json.loads(out.out)["error"]["kind"] == "usage", out.out
        else:
            assert "not a cursor of the" in out.err and "Traceback" not in out.err


def test_the_largest_64_bit_cursor_is_still_a_cursor(capsys, home, cfg):
    capsys.readouterr()
    code = run(cli, ["--home", str(home), "jobs", "history", "--after", _cursor(f"[{2**63 - 1}]")])
    assert code == 0, capsys.readouterr().err

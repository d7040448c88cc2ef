"""A pytest plugin for running the Agents SDK's *wider* test suite (from its sdist, not
vendored) with ``SQLiteSession`` bound to ``QuillSession``, as ``conftest.py`` here does for
the two vendored modules: each ``db_path`` is a Quill data dir with the production writer in a
thread of the test process. Not collected by Quill's own run. Usage::

    pip download openai-agents==0.24.0 --no-binary :all: --no-deps -d /tmp/sdk
    tar xzf /tmp/sdk/openai_agents-0.24.0.tar.gz -C /tmp/sdk && cd /tmp/sdk/openai_agents-0.24.0
    PYTHONPATH=QUILL/tests/peer/agents_sdk:QUILL/tests python -m pytest -p swap_plugin \\
        -p no:randomly -p no:xdist -o addopts="" tests/memory/test_compaction_suffix.py …

Run each module on its own: writer threads accumulate over a long run and slow it down.
"""

import tempfile
import threading
from pathlib import Path

import agents
import agents.memory
from harness import make_home

from quill import AsyncClient
from quill.integrations.openai_agents import QuillSession
from quill.ops import logs
from quill.workers.writer import Writer

ROOT = Path(tempfile.mkdtemp(prefix="quill-sdk-swap-"))
STOP = threading.Event()
_clients: dict[str, AsyncClient] = {}


def _client(db_path: object) -> AsyncClient:
    """The client of ``db_path``'s data dir (a fresh one for ``:memory:``), its writer
    started on first use."""
    key = str(db_path)
    if key != ":memory:" and key in _clients:
        return _clients[key]
    cfg = make_home(ROOT / f"home{len(list(ROOT.iterdir()))}")
    writer = Writer(cfg, logs.configure(cfg.logs_dir, "writer"))
    threading.Thread(target=writer.run, args=(STOP,), daemon=True).start()
    client = AsyncClient(cfg.home)
    if key != ":memory:":
        _clients[key] = client
    return client


class SwappedSession(QuillSession):
    """``SQLiteSession``'s constructor signature, a ``QuillSession`` underneath."""

    def __init__(
        self,
        session_id: str,
        db_path: object = ":memory:",
        sessions_table: str = "agent_sessions",
        messages_table: str = "agent_messages",
        session_settings: object = None,
        **_: object,
    ):
        super().__init__(session_id, client=_client(db_path), session_settings=session_settings)


agents.SQLiteSession = SwappedSession
agents.memory.SQLiteSession = SwappedSession

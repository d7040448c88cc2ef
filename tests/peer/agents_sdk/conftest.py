"""Run the Agents SDK's own session tests (vendored here, README.md) on ``SQLiteSession`` and
on ``QuillSession``.

Every test of the vendored modules runs twice: ``[SQLiteSession]`` as the SDK ships it, and
``[QuillSession]`` with the module's ``SQLiteSession`` name bound to a ``QuillSession``
subclass that takes ``SQLiteSession``'s constructor arguments. Each ``db_path`` a test
names becomes a real Quill data dir (the same path: the same data dir, as the same file is
the same database), with the production writer (``workers.writer.Writer``) running in a
thread of this process, so ``add_items`` returns only once that writer applied the batch.
``":memory:"`` (the default) is a fresh data dir per session, as it is a fresh database per
``SQLiteSession``.

``SQLITE_ONLY`` names the tests that exercise ``SQLiteSession``'s own implementation (its
connection pool, file locks, rows corrupted by raw SQL, transaction rollback after a dropped
table): they run on ``SQLiteSession`` only, each with the reason.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents")

from harness import make_home  # noqa: E402

from quill import AsyncClient  # noqa: E402
from quill.integrations.openai_agents import QuillSession  # noqa: E402
from quill.ops import logs  # noqa: E402
from quill.workers.writer import Writer  # noqa: E402

_POOL = "SQLiteSession's per-thread connection pool (_connections, _get_connection)"
_CORRUPT = (
    "a row of invalid JSON written into the SDK's table by raw SQL: Quill refuses an item "
    "that is not JSON before the ack, so no such row can exist"
)
_LOCK = "SQLiteSession's shared per-file lock (_file_locks, _file_lock_counts)"
_ROLLBACK = "a table dropped under SQLiteSession by raw SQL to make its transaction fail"
_TRIGGER = (
    "a trigger created in SQLiteSession's table by raw SQL fails the compaction's insert "
    "(sqlite3.IntegrityError); Quill's replace is one op applied whole by the writer or refused"
)
_GATE = (
    "holds SQLiteSession's transaction open by patching its private _insert_items(conn, items), "
    "a helper of its SQLite connection, not of the session protocol"
)

#: Tests of SQLiteSession's implementation, not of the session protocol (run on SQLite only).
SQLITE_ONLY = {
    "test_sqlite_session_close_closes_worker_thread_connections": _POOL,
    "test_sqlite_session_reaps_connections_from_exited_worker_threads": _POOL,
    "test_sqlite_session_closes_retired_connections_before_the_next_allocation": _POOL,
    "test_sqlite_session_keeps_connections_of_live_worker_threads": _POOL,
    "test_sqlite_session_rollback_failure_evicts_connection": _POOL,
    "test_sqlite_session_close_retries_quarantined_connection": _POOL,
    "test_sqlite_session_post_commit_cancellation_propagates_after_known_outcome": _POOL,
    "test_sqlite_session_pop_item_skips_corrupt_most_recent": _CORRUPT,
    "test_sqlite_session_pop_item_returns_none_after_dropping_only_corrupt_rows": _CORRUPT,
    "test_sqlite_session_get_items_limit_skips_corrupt_newest_rows": _CORRUPT,
    "test_sqlite_session_get_items_session_settings_limit_skips_corrupt_rows": _CORRUPT,
    "test_sqlite_session_file_lock_is_shared_across_instances": _LOCK,
    "test_sqlite_session_failed_add_items_releases_write_lock": _ROLLBACK,
    "test_sqlite_session_failed_clear_session_rolls_back": _ROLLBACK,
    "test_sqlite_session_failed_pop_item_releases_write_lock": _ROLLBACK,
    "test_suffix_transaction_rolls_back_failed_insert": _TRIGGER,
    "test_failed_encrypted_suffix_transaction_preserves_original_tokens": _TRIGGER,
    "test_cancelled_suffix_transaction_settles_before_newer_append": _GATE,
}


class QuillHomes:
    """Quill data dirs under ``root``, one per ``db_path``, each with a running writer thread
    and one ``AsyncClient``. ``close`` stops every writer and raises what one of them raised."""

    def __init__(self, root: Path):
        self.root = root
        self.clients: dict[str, AsyncClient] = {}
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.errors: list[BaseException] = []

    def client(self, db_path: Any) -> AsyncClient:
        key = str(db_path)
        if key == ":memory:" or key not in self.clients:
            cfg = make_home(self.root / f"home{len(self.threads)}")
            writer = Writer(cfg, logs.configure(cfg.logs_dir, "writer"))
            thread = threading.Thread(target=self._run, args=(writer,), daemon=True)
            thread.start()
            self.threads.append(thread)
            client = AsyncClient(cfg.home)
            if key == ":memory:":
                return client
            self.clients[key] = client
        return self.clients[key]

    def _run(self, writer: Writer) -> None:
        try:
            writer.run(self.stop)
        except BaseException as exc:  # reported by close(), in the test's thread
            self.errors.append(exc)

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=30)
        assert not [t for t in self.threads if t.is_alive()], "a writer thread did not stop"
        if self.errors:
            raise self.errors[0]


@pytest.fixture(params=["SQLiteSession", "QuillSession"], autouse=True)
def session_class(request, tmp_path, monkeypatch):
    """Bind the test module's ``SQLiteSession`` to the session class under test."""
    if request.param == "SQLiteSession":
        yield request.param
        return
    reason = SQLITE_ONLY.get(request.node.originalname)
    if reason:
        pytest.skip(f"tests SQLiteSession's implementation: {reason}")
    homes = QuillHomes(tmp_path / "quill")

    class QuillSQLiteSession(QuillSession):
        """``SQLiteSession``'s constructor, a ``QuillSession`` underneath (a class, as tests
        call ``isinstance(backend, SQLiteSession)``)."""

        def __init__(
            self,
            session_id: str,
            db_path: Any = ":memory:",
            sessions_table: str = "agent_sessions",
            messages_table: str = "agent_messages",
            session_settings: Any = None,
        ):
            super().__init__(
                session_id, client=homes.client(db_path), session_settings=session_settings
            )

    monkeypatch.setattr(request.module, "SQLiteSession", QuillSQLiteSession)
    try:
        yield request.param
    finally:
        homes.close()

"""``store.open``: the one place that looks at the store URL.

A data dir's ``[store] url`` names a shared PostgreSQL store; without it the store is the
embedded SQLite file ``state.db``. Everything above this module asks the store it was given
(its capability flags, ``store.contract.Store``) instead of the URL.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from quill.home import RunDir, Settings

from quill.store.contract import Store

SCHEMES = ("postgresql", "postgres")


def is_postgres_url(url: str | None) -> bool:
    """True for a ``postgresql://`` / ``postgres://`` store URL."""
    return bool(url) and url.split(":", 1)[0] in SCHEMES


def kind_of(url: str | None) -> str:
    """The kind of store ``[store] url`` names: ``"postgres"`` or ``"sqlite"`` (no URL).
    Processes that never open the store (the scheduler, the CLI's job checks) ask this instead
    of looking at the URL themselves."""
    return "postgres" if is_postgres_url(url) else "sqlite"


def open_url(url: str | None, state_db: Path, spool_id: str, *, connect: bool = True,
             **kw: Any) -> Store:
    """The store at ``url``: PostgreSQL for a ``postgresql://`` URL, else the SQLite file
    ``state_db`` (created if missing). ``kw`` goes to the store's constructor (SQLite:
    ``synchronous``, ``writer``, ``run_dir``, ``log``, ``spool_dir``, ``snapshots_dir``;
    PostgreSQL: ``spool_dir``, ``retention_s``, ``log``, ``application_name``). With
    ``connect`` False the store is returned unopened (the writer opens it in its retry loop).
    Raises ``ValueError`` for another scheme and the store error tree when opening fails."""
    if url is None:
        from quill.store.sqlite.store import SqliteStore
        kw = {k: v for k, v in kw.items() if k in SqliteStore.OPTIONS}
        store: Store = SqliteStore(Path(state_db), spool_id, **kw)
    elif is_postgres_url(url):
        from quill.store.postgres.store import PgStore
        kw = {k: v for k, v in kw.items() if k in PgStore.OPTIONS}
        store = PgStore(url, spool_id, **kw)
    else:
        raise ValueError(f"[store] url must be postgresql://…, got {url.split(':', 1)[0]!r}")
    if connect:
        store.connect()
    return store


def open_store(settings: Settings, log: Any = None, *, run_dir: RunDir | None = None,
               writer: bool = False,
               spool_id: str | None = None, connect: bool = True) -> Store:
    """The store of the data dir whose settings are ``settings`` (``quill.home.Settings``).

    ``writer``: opened for the data dir's writer (it holds the writer lease): the SQLite
    store then keeps a file guard, runs its start-up upkeep and records its halt through
    ``run_dir`` (default: the data dir's ``quill.home.RunDir``).
    ``spool_id``: defaults to the data dir's own (PostgreSQL) or ``"local"`` (SQLite).
    Raises the store error tree when ``connect`` and opening fails."""
    url = settings.store_url
    if writer and run_dir is None:
        run_dir = RunDir(settings.home)
    if spool_id is None:
        if is_postgres_url(url):
            from quill.spool.identity import load_or_create
            spool_id = load_or_create(settings.spool_id_path)
        else:
            spool_id = "local"
    return open_url(url, settings.state_db, spool_id, connect=connect, log=log,
                    synchronous=settings.synchronous, writer=writer, run_dir=run_dir,
                    spool_dir=settings.spool_dir, snapshots_dir=settings.snapshots_dir,
                    retention_s=settings.spool_retention_s)

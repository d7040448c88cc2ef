"""``store.open``: the one place that looks at the store URL.

A data dir's ``[store] url`` names a shared PostgreSQL store; without it the store is the
embedded SQLite file ``state.db``. Everything above this module asks the store it was given
(its capability flags, ``store.contract.Store``), or before opening one the store's class
(``capabilities``), instead of the URL; readers open here too (``open_reader``).
tests/test_store_door.py fails on any other module that branches on the URL.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from quill.home import RunDir, Settings
from quill.home.settings import STORE_SCHEMES
from quill.store.capabilities import Capabilities, PostgresCapabilities, SqliteCapabilities
from quill.store.contract import ReaderLike, Store

SCHEMES = STORE_SCHEMES


def is_postgres_url(url: str | None) -> bool:
    """True for a ``postgresql://`` / ``postgres://`` store URL."""
    return url is not None and url.split(":", 1)[0] in SCHEMES


def _url(settings: Any) -> str | None:
    """``[store] url`` of ``settings`` (a ``quill.home.Settings``), or ``settings`` itself
    when it is already a URL or None."""
    return settings if settings is None or isinstance(settings, str) else settings.store_url


def _refuse(url: str) -> ValueError:
    return ValueError(f"[store] url must be postgresql://…, got {url.split(':', 1)[0]!r}")


def capabilities(settings: Any) -> Capabilities:
    """The capability class of the store ``settings`` names (``store.capabilities``: ``kind``,
    ``local_file``, ``cluster``, ``maintenance_jobs``), without connecting or importing the
    store's driver. ``settings``: a ``quill.home.Settings``, or a store URL (None: SQLite).
    Raises ``ValueError`` for a URL of another scheme (the error ``open_url`` raises)."""
    url = _url(settings)
    if url is None or url == "":
        return SqliteCapabilities
    if is_postgres_url(url):
        return PostgresCapabilities
    raise _refuse(url)


def open_url(
    url: str | None, state_db: Path, spool_id: str, *, connect: bool = True, **kw: Any
) -> Store:
    """The store at ``url``: PostgreSQL for a ``postgresql://`` URL, else the SQLite file
    ``state_db`` (created if missing). ``kw`` goes to the store's constructor (SQLite:
    ``synchronous``, ``writer``, ``run_dir``, ``log``, ``spool_dir``, ``snapshots_dir``;
    PostgreSQL: ``spool_dir``, ``retention_s``, ``log``, ``application_name``, ``holder``,
    ``client``: libpq bounds, ``Settings.pg_client_params``). With
    ``connect`` False the store is returned unopened (the writer opens it in its retry loop).
    Raises ``ValueError`` for another scheme and the store error tree when opening fails."""
    if url is None or url == "":
        from quill.store.sqlite.store import SqliteStore

        kw = {k: v for k, v in kw.items() if k in SqliteStore.OPTIONS}
        store: Store = SqliteStore(Path(state_db), spool_id, **kw)
    elif is_postgres_url(url):
        from quill.store.postgres.store import PgStore

        kw = {k: v for k, v in kw.items() if k in PgStore.OPTIONS}
        store = PgStore(url, spool_id, **kw)
    else:
        raise _refuse(url)
    if connect:
        store.connect()
    return store


def open_store(
    settings: Settings,
    log: Any = None,
    *,
    run_dir: RunDir | None = None,
    writer: bool = False,
    spool_id: str | None = None,
    connect: bool = True,
) -> Store:
    """The store of the data dir whose settings are ``settings`` (``quill.home.Settings``).

    ``writer``: opened for the data dir's writer (it holds the writer lease): the SQLite
    store then keeps a file guard, runs its start-up upkeep and records its halt through
    ``run_dir`` (default: the data dir's ``quill.home.RunDir``).
    ``spool_id``: defaults to the data dir's own (PostgreSQL) or ``"local"`` (SQLite); a
    PostgreSQL writer of its own id then claims it (``store.postgres.claims``) when it connects.
    Raises the store error tree when ``connect`` and opening fails."""
    url = settings.store_url
    if writer and run_dir is None:
        run_dir = RunDir(settings.home)
    holder = None
    if spool_id is None:
        if capabilities(url).cluster:
            from quill.spool.identity import holder as spool_holder
            from quill.spool.identity import load_or_create

            spool_id = load_or_create(settings.spool_id_path)
            # A writer claims its id in the shared store (store.postgres.claims).
            holder = spool_holder(settings.spool_id_path) if writer else None
        else:
            spool_id = "local"
    return open_url(
        url,
        settings.state_db,
        spool_id,
        connect=connect,
        log=log,
        synchronous=settings.synchronous,
        pack_min_bytes=settings.pack_min_bytes,
        writer=writer,
        run_dir=run_dir,
        spool_dir=settings.spool_dir,
        snapshots_dir=settings.snapshots_dir,
        retention_s=settings.spool_retention_s,
        holder=holder,
        client=settings.pg_client_params(),
    )


def open_reader(settings: Settings, *, spool_id: str | None = None) -> ReaderLike:
    """A read-only reader on the store of ``settings``: ``store.read.reader.Reader`` on
    ``state.db``, or ``store.postgres.PgReader`` for spool ``spool_id`` (default: this data
    dir's spool id when its file exists, so ``figures()["cursor"]`` is this host's cursor, once
    proved to be this spool's: ``PgReader``).
    Raises ``store.errors.CantOpenError`` when the store does not exist yet (no ``state.db``,
    or a database without Quill's schema), and the rest of the store error tree otherwise (an
    unreachable server is ``TransientError``)."""
    if capabilities(settings).local_file:
        from quill.store.read.reader import Reader

        return Reader(settings.state_db)
    from quill.store.postgres import PgReader

    own = None
    if settings.spool_id_path.exists():
        from quill.spool.identity import load_or_create

        own = load_or_create(settings.spool_id_path)
    spool_id = own if spool_id is None else spool_id
    # This data dir's own id: its cursor counts as this host's only once proved against this
    # spool (PgReader: a copied data dir carries the id, not the progress).
    mine = spool_id is not None and spool_id == own
    return PgReader(
        settings.store_url,
        spool_id=spool_id,
        client=settings.pg_client_params(),
        spool_dir=settings.spool_dir if mine else None,
        max_line=settings.max_record_bytes if mine else None,
    )


def own_spool_id(settings: Settings) -> str | None:
    """The spool id this data dir's writer applies under, read without creating anything:
    ``"local"`` on SQLite, the id file's on PostgreSQL, None while that file does not exist
    (no writer or producer ran yet). Raises ``SpoolError`` for an id file that holds no
    valid id."""
    if not capabilities(settings).cluster:
        return "local"
    if not settings.spool_id_path.exists():
        return None
    from quill.spool.identity import load_or_create

    return load_or_create(settings.spool_id_path)


def location(settings: Settings) -> str:
    """Where the store of ``settings`` lives, for messages: ``state.db``'s path, or the
    PostgreSQL URL with its password removed."""
    if capabilities(settings).local_file:
        return str(settings.state_db)
    from quill.store.postgres.reach import redact

    return redact(settings.store_url)


def jobstore_url(settings: Settings) -> str:
    """The store's database as an SQLAlchemy URL (psycopg 3 driver), where a cluster keeps its
    schedules. Raises ``ValueError`` for a store that is not shared (``cluster`` False)."""
    url = _url(settings)
    if url is None or not capabilities(url).cluster:
        raise ValueError("only a shared PostgreSQL store holds the schedules")
    return "postgresql+psycopg://" + url.split("://", 1)[1]

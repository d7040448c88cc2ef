"""API tokens: bearer secrets with scopes, stored hashed in ``tokens.db`` (owner-only).

A token reads ``quill_<id>_<secret>``: ``id`` (8 hex) names the row, ``secret`` (32 random
bytes, URL-safe base64) is never stored — only its SHA-256. A slow password hash is not
needed: the secret has 256 bits of entropy, so a leaked digest cannot be brute-forced, and
verification stays a microsecond on every request. Comparison is constant-time.

Scopes: ``read`` (views, search, status, metrics), ``write`` (appends), ``admin`` (run jobs;
implies read and write). This module is the only owner of ``tokens.db``; the server opens it
read-only per check, so ``quill token revoke`` takes effect on the next request.

A ``tokens.db`` copied with its data dir (``cp -a``, a VM image, a restored backup) would let
the copy accept the original's secrets. So the file is *bound* to where it lives: a digest of
the machine id, the data dir's real path and the file's device and inode (``binding``; no
boot id: tokens outlive reboots), recorded at the first write and checked on every use. A
copy (another path or inode, another machine) refuses every token with ``TokensCopiedError``,
which names the way out: ``quill token rebind`` (accept them here) or ``quill token rebind
--revoke-all`` (give the copy its own). A file from before bindings is bound by its first
write (``quill serve`` binds it at start).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import os
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apsw

from quill.home.identity import machine_id
from quill.home.layout import private_dirs

SCOPES = ("read", "write", "admin")
_PREFIX = "quill_"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS tokens (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    scopes      TEXT NOT NULL,        -- space-separated subset of SCOPES
    digest      TEXT NOT NULL,        -- sha256(secret) hex
    created_at  REAL NOT NULL,
    revoked_at  REAL
);
"""


_BINDING = """
CREATE TABLE IF NOT EXISTS binding (
    one       INTEGER PRIMARY KEY CHECK (one = 1),
    digest    TEXT NOT NULL,         -- binding(path) when bound
    home      TEXT NOT NULL,         -- the data dir's real path then (for messages)
    bound_at  REAL NOT NULL
);
"""


class TokenError(Exception):
    """A token operation failed: unknown scope, unknown token id."""


class TokensUnavailableError(TokenError):
    """``tokens.db`` cannot be read or written now: another process holds its lock past the
    busy timeout (a ``sqlite3`` shell, a ``quill token`` command, a backup), or an I/O error
    (SQLITE_BUSY, SQLITE_LOCKED, SQLITE_IOERR by apsw exception type). Nothing was changed;
    retry shortly (HTTP: 503 ``tokens-unavailable`` with ``Retry-After``)."""

    def __init__(self, path: Path, cause: BaseException):
        self.cause = f"{type(cause).__name__}: {cause}"
        super().__init__(f"{path.name} cannot be used now ({self.cause}); retry shortly")


#: apsw exception types (SQLite primary result codes) of a ``tokens.db`` that passes by itself.
_UNAVAILABLE = (apsw.BusyError, apsw.LockedError, apsw.IOError)


class TokensCopiedError(TokenError):
    """``tokens.db`` is bound to another data dir or machine: it was copied here. Its tokens
    are refused until ``quill token rebind``; ``bound_home`` is where it was bound."""

    def __init__(self, path: Path, bound_home: str):
        self.bound_home = bound_home
        super().__init__(
            f"{path} was bound to the data dir {bound_home} (or another machine or file) and "
            "copied here, so its tokens are refused; run `quill token rebind` to accept them "
            "on this data dir, or `quill token rebind --revoke-all` to revoke them and create "
            "new ones (`quill token create`)"
        )


def binding(path: Path) -> str:
    """The identity a ``tokens.db`` at ``path`` is bound to: a digest (32 hex) of the machine
    id, the data dir's real path and the file's device and inode. Raises ``OSError`` when
    ``path`` is missing."""
    st = os.stat(path)
    parts = (machine_id(), os.path.realpath(Path(path).parent), str(st.st_dev), str(st.st_ino))
    return hashlib.sha256("\0".join(parts).encode("utf-8", "surrogateescape")).hexdigest()[:32]


@dataclass(frozen=True)
class Principal:
    """Who a request acts as: a token id (None for an anonymous loopback caller) and scopes."""

    token_id: str | None
    scopes: frozenset[str]

    def allows(self, scope: str) -> bool:
        return scope in self.scopes or "admin" in self.scopes


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class TokenStore:
    """Tokens of one data dir (``path`` = ``cfg.tokens_db``)."""

    def __init__(self, path: Path):
        self.path = Path(path)

    def _open(self, *, write: bool) -> apsw.Connection:
        """A connection whose file is proved this data dir's (``_check_binding``); a write
        connection binds an unbound file first. Raises ``TokensCopiedError``, and
        ``quill.store.errors.DescriptorsExhaustedError`` when no file descriptor was left
        to open it (every request with a token opens it: 503 ``overloaded``, not 500)."""
        try:
            return self._open_checked(write=write)
        except apsw.Error as exc:
            from quill.store.errors import DescriptorsExhaustedError, translate

            mapped = translate(exc)
            if isinstance(mapped, DescriptorsExhaustedError):
                raise mapped from exc
            if isinstance(exc, _UNAVAILABLE):
                raise TokensUnavailableError(self.path, exc) from exc
            raise

    def _open_checked(self, *, write: bool) -> apsw.Connection:
        """``_open`` without the exhaustion check."""
        if write:
            private_dirs(self.path.parent)
            conn = apsw.Connection(str(self.path))
            conn.setbusytimeout(5000)
            conn.execute(_SCHEMA + _BINDING)
            os.chmod(self.path, 0o600)
            conn.execute(
                "INSERT OR IGNORE INTO binding VALUES (1, ?, ?, ?)",
                (binding(self.path), os.path.realpath(self.path.parent), time.time()),
            )
        else:
            conn = apsw.Connection(str(self.path), flags=apsw.SQLITE_OPEN_READONLY)
            conn.setbusytimeout(5000)
        try:
            self._check_binding(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def _check_binding(self, conn: apsw.Connection) -> None:
        has = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'binding'"
        ).fetchone()
        row = conn.execute("SELECT digest, home FROM binding").fetchone() if has else None
        if row is not None and row[0] != binding(self.path):
            raise TokensCopiedError(self.path, row[1])

    @contextlib.contextmanager
    def _available(self) -> Iterator[None]:
        """Statements on an open ``tokens.db``: a lock or I/O error becomes
        ``TokensUnavailableError`` (nothing was changed: the transaction rolled back)."""
        try:
            yield
        except _UNAVAILABLE as exc:
            raise TokensUnavailableError(self.path, exc) from exc

    def bind(self) -> None:
        """Bind an unbound ``tokens.db`` (one from before bindings) here; a no-op when there is
        none or it is bound here. Raises ``TokensCopiedError`` when it is bound elsewhere and
        ``TokensUnavailableError`` when it cannot be written now."""
        if self.path.exists():
            self._open(write=True).close()

    def rebind(self, *, revoke_all: bool = False) -> int:
        """Bind ``tokens.db`` to this data dir whatever it was bound to (``quill token
        rebind``: the owner accepts a copy's tokens here); ``revoke_all``: revoke every token
        too (a copy that must not share the original's secrets). Returns the number of tokens
        that are now accepted here. Raises ``TokensUnavailableError`` when the file cannot be
        written now (locked by another process, I/O)."""
        try:
            return self._rebind(revoke_all=revoke_all)
        except _UNAVAILABLE as exc:
            raise TokensUnavailableError(self.path, exc) from exc

    def _rebind(self, *, revoke_all: bool = False) -> int:
        private_dirs(self.path.parent)
        conn = apsw.Connection(str(self.path))
        try:
            conn.setbusytimeout(5000)
            with conn:
                conn.execute(_SCHEMA + _BINDING)
                os.chmod(self.path, 0o600)
                conn.execute(
                    "INSERT OR REPLACE INTO binding VALUES (1, ?, ?, ?)",
                    (binding(self.path), os.path.realpath(self.path.parent), time.time()),
                )
                if revoke_all:
                    conn.execute(
                        "UPDATE tokens SET revoked_at = ? WHERE revoked_at IS NULL", (time.time(),)
                    )
                return conn.execute(
                    "SELECT count(*) FROM tokens WHERE revoked_at IS NULL"
                ).fetchone()[0]
        finally:
            conn.close()

    def create(self, name: str, scopes: list[str]) -> tuple[str, dict[str, Any]]:
        """Create a token; returns ``(token, row)``. The token is shown once, never stored.
        Raises ``TokenError`` for an unknown scope or no scope, and for a name an unrevoked
        token already has (names are how operators tell tokens apart in ``token list``)."""
        bad = sorted(set(scopes) - set(SCOPES))
        if bad or not scopes:
            raise TokenError(
                f"scopes must be some of {', '.join(SCOPES)} (got {', '.join(bad) or 'none'})"
            )
        token_id = secrets.token_hex(4)
        secret = (
            base64.urlsafe_b64encode(secrets.token_bytes(32)).decode().rstrip("=").replace("_", "-")
        )
        row = {
            "id": token_id,
            "name": name,
            "scopes": sorted(set(scopes)),
            "created_at": time.time(),
            "revoked_at": None,
        }
        conn = self._open(write=True)
        try:
            # One transaction: the name check and the insert (two creates race otherwise).
            with self._available(), conn:
                taken = conn.execute(
                    "SELECT id FROM tokens WHERE name = ? AND revoked_at IS NULL", (name,)
                ).fetchone()
                if taken:
                    raise TokenError(
                        f"token {taken[0]} is already named {name!r}; pick another name or "
                        f"revoke it first (`quill token revoke {taken[0]}`)"
                    )
                conn.execute(
                    "INSERT INTO tokens VALUES (?, ?, ?, ?, ?, NULL)",
                    (token_id, name, " ".join(row["scopes"]), _digest(secret), row["created_at"]),
                )
        finally:
            conn.close()
        return f"{_PREFIX}{token_id}_{secret}", row

    def list(self) -> list[dict[str, Any]]:
        """Every token (revoked ones too), oldest first, without digests."""
        if not self.path.exists():
            return []
        conn = self._open(write=False)
        try:
            with self._available():
                rows = conn.execute(
                    "SELECT id, name, scopes, created_at, revoked_at FROM tokens"
                    " ORDER BY created_at"
                ).fetchall()
        finally:
            conn.close()
        return [
            {
                "id": r[0],
                "name": r[1],
                "scopes": str(r[2]).split(),  # TEXT NOT NULL
                "created_at": r[3],
                "revoked_at": r[4],
            }
            for r in rows
        ]

    def revoke(self, token_id: str) -> None:
        """Revoke a token by id (idempotent). Raises ``TokenError`` for an unknown id."""
        conn = self._open(write=True)
        try:
            with self._available():
                conn.execute(
                    "UPDATE tokens SET revoked_at = coalesce(revoked_at, ?) WHERE id = ?",
                    (time.time(), token_id),
                )
            if conn.changes() == 0:
                raise TokenError(f"no token with id {token_id!r}; see `quill token list`")
        finally:
            conn.close()

    def verify(self, token: str) -> Principal | None:
        """The principal for a presented token, or None if it is malformed, unknown or revoked.
        Raises ``TokensCopiedError`` when ``tokens.db`` is bound to another data dir and
        ``TokensUnavailableError`` when it cannot be read now (locked, I/O)."""
        if not token.startswith(_PREFIX) or not self.path.exists():
            return None
        token_id, sep, secret = token[len(_PREFIX) :].partition("_")
        if not sep or not secret:
            return None
        conn = self._open(write=False)
        try:
            row = conn.execute(
                "SELECT scopes, digest FROM tokens WHERE id = ? AND revoked_at IS NULL", (token_id,)
            ).fetchone()
        except _UNAVAILABLE as exc:
            raise TokensUnavailableError(self.path, exc) from exc
        finally:
            conn.close()
        if row is None or not hmac.compare_digest(row[1], _digest(secret)):
            return None
        return Principal(token_id, frozenset(row[0].split()))

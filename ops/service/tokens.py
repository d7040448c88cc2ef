"""API tokens: bearer secrets with scopes, stored hashed in ``tokens.db`` (owner-only).

A token reads ``quill_<id>_<secret>``: ``id`` (8 hex) names the row, ``secret`` (32 random
bytes, URL-safe base64) is never stored — only its SHA-256. A slow password hash is not
needed: the secret has 256 bits of entropy, so a leaked digest cannot be brute-forced, and
verification stays a microsecond on every request. Comparison is constant-time.

Scopes: ``read`` (views, search, status, metrics), ``write`` (appends), ``admin`` (run jobs;
implies read and write). This module is the only owner of ``tokens.db``; the server opens it
read-only per check, so ``quill token revoke`` takes effect on the next request.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apsw

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


class TokenError(Exception):
    """A token operation failed: unknown scope, unknown token id."""


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
        if write:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = apsw.Connection(str(self.path))
            conn.setbusytimeout(5000)
            conn.execute(_SCHEMA)
            os.chmod(self.path, 0o600)
            return conn
        conn = apsw.Connection(str(self.path), flags=apsw.SQLITE_OPEN_READONLY)
        conn.setbusytimeout(5000)
        return conn

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
            with conn:
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
            rows = conn.execute(
                "SELECT id, name, scopes, created_at, revoked_at FROM tokens ORDER BY created_at"
            ).fetchall()
        finally:
            conn.close()
        return [
            {
                "id": r[0],
                "name": r[1],
                "scopes": r[2].split(),
                "created_at": r[3],
                "revoked_at": r[4],
            }
            for r in rows
        ]

    def revoke(self, token_id: str) -> None:
        """Revoke a token by id (idempotent). Raises ``TokenError`` for an unknown id."""
        conn = self._open(write=True)
        try:
            conn.execute(
                "UPDATE tokens SET revoked_at = coalesce(revoked_at, ?) WHERE id = ?",
                (time.time(), token_id),
            )
            if conn.changes() == 0:
                raise TokenError(f"no token with id {token_id!r}; see `quill token list`")
        finally:
            conn.close()

    def verify(self, token: str) -> Principal | None:
        """The principal for a presented token, or None if it is malformed, unknown or revoked."""
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
        finally:
            conn.close()
        if row is None or not hmac.compare_digest(row[1], _digest(secret)):
            return None
        return Principal(token_id, frozenset(row[0].split()))

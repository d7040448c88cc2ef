"""One live holder per spool id: the claims a shared store keeps (``spool_claims``).

A spool id is read from a file in the data dir (``spool.identity``), and a copied data dir
(``cp -a``, a VM image, a restored backup) carries it too; two writers with one id would share
one cursor and silently skip each other's records. So a writer *claims* its id before it
applies anything (``claim``, at connect) as its holder (``spool.identity.holder``: a token
derived from the machine, its boot, the data dir's path and the id file's inode — never read
from the data dir), and keeps it by renewing:

* the claim is a row ``(spool_id, holder, host, path, pid, claimed_at, deadline)``; times are
  the *server's* clock (epoch s), so hosts' clock skew does not matter;
* the same holder (the same data dir restarted) takes its own claim back at once;
* another holder is refused (``SpoolClaimedError``) while ``deadline`` has not passed, and
  takes the claim over once it has (the holder has been gone ``LEASE_S``: a data dir moved to
  new hardware, or a host back after a reboot). A takeover is safe because the cursor it then
  resumes from is checked against its own spool (``spool.cursor_proof``);
* every chunk's transaction renews the claim and applies only while this holder still holds
  it (``fence``): a writer that lost its claim (frozen past its deadline while another took
  over) applies nothing more; an idle writer renews every ``RENEW_S``;
* a stopped writer leaves its claim to expire (so a copy started right after is refused);
  ``release`` drops it (``quill spool reidentify`` on the holder itself).
"""

from __future__ import annotations

from typing import Any

from quill.store.errors import SpoolClaimedError
from quill.store.postgres.connection import PgConnection

#: How long a claim lasts without renewal (seconds): a copy is refused at least this long
#: after the holder's last chunk or renewal; a holder that comes back with another token
#: (after a reboot) waits at most this long.
LEASE_S = 60.0
#: How often an idle writer renews its claim (seconds): well inside ``LEASE_S``.
RENEW_S = 15.0

_NOW = "extract(epoch from clock_timestamp())::double precision"
_FIELDS = ("holder", "host", "path", "pid", "claimed_at", "deadline")


def claim(
    conn: PgConnection, spool_id: str, holder: dict[str, Any], lease_s: float = LEASE_S
) -> dict[str, Any]:
    """Claim ``spool_id`` for ``holder`` (``spool.identity.holder``) in one transaction.
    Returns ``{"outcome": "claimed"|"renewed"|"taken_over", "previous": row or None}``
    (``previous``: the expired claim taken over). Raises ``SpoolClaimedError`` (nothing
    changed) while another holder's claim is live, and the store error tree."""
    conn.execute("BEGIN")
    try:
        conn.execute(
            "INSERT INTO spool_claims (spool_id, holder, host, path, pid, claimed_at, deadline) "
            f"VALUES (?, ?, ?, ?, ?, {_NOW}, {_NOW} + ?) ON CONFLICT (spool_id) DO NOTHING",
            (spool_id, holder["token"], holder["host"], holder["path"], holder["pid"], lease_s),
        )
        fresh = conn.changes() > 0
        row = conn.execute(
            f"SELECT holder, host, path, pid, claimed_at, deadline, {_NOW} "
            "FROM spool_claims WHERE spool_id = ? FOR UPDATE",
            (spool_id,),
        ).fetchone()
        current, now = dict(zip(_FIELDS, row[:6])), row[6]
        if fresh:
            outcome, previous = "claimed", None
        elif current["holder"] == holder["token"]:
            outcome, previous = "renewed", None
        elif current["deadline"] < now:
            outcome, previous = "taken_over", current
        else:
            conn.execute("ROLLBACK")
            raise SpoolClaimedError(refusal(spool_id, current, now), current)
        if not fresh:
            conn.execute(
                "UPDATE spool_claims SET holder = ?, host = ?, path = ?, pid = ?, "
                f"claimed_at = CASE WHEN holder = ? THEN claimed_at ELSE {_NOW} END, "
                f"deadline = {_NOW} + ? WHERE spool_id = ?",
                (
                    holder["token"],
                    holder["host"],
                    holder["path"],
                    holder["pid"],
                    holder["token"],
                    lease_s,
                    spool_id,
                ),
            )
        conn.execute("COMMIT")
    except BaseException:
        if not conn.closed and conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return {"outcome": outcome, "previous": previous}


def refusal(spool_id: str, current: dict[str, Any], now: float) -> str:
    """The message of a refused claim: who holds ``spool_id`` and for how long yet."""
    return (
        f"spool id {spool_id!r} is claimed in the shared store by another data dir "
        f"({current['host']}:{current['path']}, pid {current['pid']}) for "
        f"{max(0.0, current['deadline'] - now):.0f} s more: this data dir is a copy "
        "(or that one is), and two writers with one spool id would share one cursor; "
        "nothing was applied"
    )


def renewal(conn: PgConnection, spool_id: str, token: str, lease_s: float = LEASE_S) -> Any:
    """``fence``'s renewal of ``token``'s claim, queued (``PgConnection.defer``) to go with
    the statements after it: pass what this returns to ``fence``."""
    return conn.defer(
        f"UPDATE spool_claims SET deadline = {_NOW} + ? WHERE spool_id = ? AND holder = ? "
        "RETURNING 1",
        (lease_s, spool_id, token),
    )


def fence(
    conn: PgConnection,
    spool_id: str,
    token: str,
    lease_s: float = LEASE_S,
    renewed: Any = None,
) -> None:
    """Inside the caller's transaction: renew ``token``'s claim on ``spool_id``; raise
    ``SpoolClaimedError`` (the caller rolls back) when another holder has it now. The row
    stays locked until the transaction ends, so no takeover slips in before the commit.
    ``renewed``: the renewal already queued (``renewal``; default: renew now)."""
    asked = renewed if renewed is not None else renewal(conn, spool_id, token, lease_s)
    row = asked.fetchone()
    if row is not None:
        return
    other = conn.execute(
        f"SELECT holder, host, path, pid, claimed_at, deadline, {_NOW} "
        "FROM spool_claims WHERE spool_id = ?",
        (spool_id,),
    ).fetchone()
    if other is None:
        raise SpoolClaimedError(
            f"the claim on spool id {spool_id!r} was released (reidentified?): "
            "nothing more is applied under it"
        )
    raise SpoolClaimedError(refusal(spool_id, dict(zip(_FIELDS, other[:6])), other[6]))


def renew(conn: PgConnection, spool_id: str, token: str, lease_s: float = LEASE_S) -> None:
    """Renew ``token``'s claim in a transaction of its own (``fence``). Raises
    ``SpoolClaimedError`` when the claim is another holder's now, and the store error tree."""
    conn.execute("BEGIN")
    try:
        fence(conn, spool_id, token, lease_s)
        conn.execute("COMMIT")
    except BaseException:
        if not conn.closed and conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def release(conn: PgConnection, spool_id: str, token: str) -> bool:
    """Drop ``token``'s claim on ``spool_id`` (True) — none when another holder has it
    (False). Autocommit. Raises the store error tree."""
    conn.execute("DELETE FROM spool_claims WHERE spool_id = ? AND holder = ?", (spool_id, token))
    return conn.changes() > 0


def claims(conn: PgConnection) -> list[dict[str, Any]]:
    """Every claim, by spool id, with ``expires_in_s`` (server time; negative: expired)."""
    return [
        {"spool_id": r[0], **dict(zip(_FIELDS, r[1:7])), "expires_in_s": r[6] - r[7]}
        for r in conn.execute(
            f"SELECT spool_id, holder, host, path, pid, claimed_at, deadline, {_NOW} "
            "FROM spool_claims ORDER BY spool_id"
        )
    ]

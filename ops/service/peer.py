"""Which OS user is on the other end of a loopback TCP connection (Linux).

A loopback connection has both ends on this machine, in this network namespace, so the
kernel's socket table (``/proc/net/tcp`` and ``/proc/net/tcp6``) lists the client's socket too:
the row whose local address is the peer's address and port and whose remote address is ours.
Its ``uid`` column is the user that owns the client's socket. The anonymous-access policy uses
it to admit only the user the server runs as (the data dir's owner): on a machine with several
accounts, another local user must present a token like any remote caller.

Nothing here trusts what the client says about itself: the addresses come from the accepted
socket, the uid from the kernel.
"""

from __future__ import annotations

import ipaddress
import struct

from quill.home.descriptors import EXHAUSTED_ERRNOS

#: The kernel's socket tables, one per address family (docs: proc(5), /proc/net/tcp).
TABLES = ("/proc/net/tcp", "/proc/net/tcp6")


def _hex_address(host: str, port: int) -> str:
    """``host:port`` as the kernel prints it in /proc/net/tcp*: the address bytes as 32-bit
    words in host byte order, each in hex, then the port in hex (upper case)."""
    packed = ipaddress.ip_address(host).packed
    words = struct.unpack(f"={len(packed) // 4}I", packed)
    return "".join(f"{w:08X}" for w in words) + f":{port:04X}"


def _forms(host: str, port: int) -> set[str]:
    """Every way the kernel may print ``host:port``: an IPv4 peer of a dual-stack (IPv6)
    listener appears as the v4-mapped address ``::ffff:a.b.c.d`` in /proc/net/tcp6."""
    addr = ipaddress.ip_address(host)
    forms = {_hex_address(str(addr), port)}
    if addr.version == 4:
        forms.add(_hex_address(f"::ffff:{addr}", port))
    elif addr.ipv4_mapped is not None:
        forms.add(_hex_address(str(addr.ipv4_mapped), port))
    return forms


def peer_uid(client: tuple[str, int], server: tuple[str, int]) -> int | None:
    """The uid owning the client end of the loopback TCP connection ``client`` → ``server``
    (each ``(address, port)`` as the accepted socket reports them), or None when the kernel's
    tables do not show it (not Linux, not loopback, or the connection already closed).
    Raises ``OSError`` (EMFILE/ENFILE) when no descriptor was left to read the tables."""
    try:
        if not ipaddress.ip_address(client[0]).is_loopback and not _mapped_loopback(client[0]):
            return None
        local, remote = _forms(*client), _forms(*server)
    except ValueError:
        return None
    for table in TABLES:
        try:
            with open(table, encoding="ascii") as fh:
                next(fh, None)  # the header line
                for line in fh:
                    # sl local_address rem_address st tx:rx tr:tm retrnsmt uid timeout inode
                    fields = line.split()
                    if len(fields) > 7 and fields[1] in local and fields[2] in remote:
                        return int(fields[7])
        except OSError as exc:
            if exc.errno in EXHAUSTED_ERRNOS:
                raise  # out of descriptors: overload (a 503), never "another user"
            continue  # no such table (no IPv6): the other one answers
    return None


def _mapped_loopback(host: str) -> bool:
    addr = ipaddress.ip_address(host)
    return addr.version == 6 and addr.ipv4_mapped is not None and addr.ipv4_mapped.is_loopback


def same_user(client: tuple[str, int] | None, server: tuple[str, int] | None, uid: int) -> bool:
    """Whether the loopback connection ``client`` → ``server`` belongs to ``uid``."""
    if client is None or server is None:
        return False
    return peer_uid(client, server) == uid

"""Content-addressed blob store: large binary parts (base64 images, documents) stored once.

A transcript repeats the same binary payload: Claude Code writes each image of a tool result
twice (the ``tool_result`` block the model saw and the CLI's ``toolUseResult`` copy), a
re-sent screenshot appears in every later request, a compaction carries it again. Measured
on a real 107 MB Claude Code transcript: 5 images became 10 stored copies (issue 12, A6).

Rule: when a message is written, every *large* binary payload in its structured fields
(``parts``, ``extra``) is cut out and replaced by a reference string ``quill-blob:<sha256>``;
the payload is stored once in ``blobs`` keyed by the SHA-256 of the exact original string.
Every read puts the exact original string back (``inflate``), so parts, extras and exports
are returned byte-for-byte as they arrived. A payload is:

* a string that is a whole ``data:<type>;base64,<payload>`` URL (OpenAI ``image_url``,
  Codex ``input_image``), or
* the ``data`` string of an object that declares base64 content: Anthropic
  ``{"type": "base64", "media_type", "data"}`` sources, Gemini ``inlineData``
  ``{"mimeType", "data"}``, or any object with ``media_type``/``mime_type``/``mimeType``;

and at least ``MIN_BLOB_CHARS`` characters long (smaller ones cost less inline than a
reference and a lookup). Payloads are stored decoded when base64 round-trips exactly (¾ of
the size), else as the exact text (e.g. base64 corrupted by an upstream redactor): nothing is
ever "repaired" on the way in.

Public API (all pure functions over an ``apsw`` connection; no module state)::

    extract(value) -> (value_with_refs, {sha256: original_string})   # no I/O
    put(conn, original) -> sha256            # INSERT OR IGNORE: one row per distinct payload
    put_many(conn, {sha256: original}) -> rows inserted
    get(conn, sha256) -> original string | None
    inflate(conn, value) -> value with every known reference replaced by its original
    has_refs(text) -> bool                   # cheap pre-check on a stored JSON text

``put``/``put_many`` must run inside the writer's transaction (the op that references the
blob), so a blob row exists exactly when a message that references it was committed.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import time
from typing import Any

import apsw

#: Reference string prefix; the full reference is ``REF_PREFIX + sha256 hex`` (64 chars).
REF_PREFIX = "quill-blob:"
#: Payloads shorter than this (characters) stay inline: a reference is 75 characters and
#: reading it back costs a primary-key lookup, so small icons are cheaper inline.
MIN_BLOB_CHARS = 1024

DDL = """
CREATE TABLE IF NOT EXISTS blobs (
    sha256     TEXT PRIMARY KEY,        -- hex SHA-256 of the original string (UTF-8)
    prefix     TEXT NOT NULL,           -- 'data:<type>;base64,' for a data URL, else ''
    encoding   TEXT NOT NULL CHECK (encoding IN ('base64', 'text')),
    data       BLOB NOT NULL,           -- decoded bytes (base64) or the exact payload text (UTF-8)
    size       INTEGER NOT NULL,        -- bytes in ``data``
    created_at REAL NOT NULL
) WITHOUT ROWID;
"""

_MEDIA_KEYS = ("media_type", "mime_type", "mimeType")


def sha256_of(original: str) -> str:
    """Hex SHA-256 of ``original`` encoded as UTF-8 (lone surrogates are replaced first by
    the store's normaliser, so every stored string encodes)."""
    return hashlib.sha256(original.encode("utf-8", "surrogatepass")).hexdigest()


def ref(sha256: str) -> str:
    """The reference string stored in place of a payload."""
    return REF_PREFIX + sha256


def parse_ref(value: Any) -> str | None:
    """The sha256 a reference string names, or None when ``value`` is not a reference."""
    if isinstance(value, str) and len(value) == len(REF_PREFIX) + 64 and value.startswith(REF_PREFIX):
        return value[len(REF_PREFIX):]
    return None


def has_refs(text: str | None) -> bool:
    """True when a stored JSON text may hold references (a substring test, no parsing)."""
    return bool(text) and REF_PREFIX in text


def _is_data_url(value: str) -> bool:
    return value.startswith("data:") and ";base64," in value[:256]


def _declares_base64(obj: dict) -> bool:
    return obj.get("type") == "base64" or any(isinstance(obj.get(k), str) for k in _MEDIA_KEYS)


def extract(value: Any) -> tuple[Any, dict[str, str]]:
    """Replace large binary payloads in a JSON value by references.

    Returns ``(new_value, blobs)`` where ``blobs`` maps sha256 → the exact original string.
    ``value`` is not modified; containers without payloads are returned as the same objects.
    Pure: no I/O, so the caller decides when (inside which transaction) to ``put_many``.
    """
    found: dict[str, str] = {}

    def cut(s: str) -> str:
        sha = sha256_of(s)
        found[sha] = s
        return ref(sha)

    def walk(v: Any) -> Any:
        if isinstance(v, str):
            return cut(v) if len(v) >= MIN_BLOB_CHARS and _is_data_url(v) else v
        if isinstance(v, list):
            out = [walk(x) for x in v]
            return v if all(a is b for a, b in zip(out, v)) else out
        if isinstance(v, dict):
            changed = False
            new: dict = {}
            payload_key = isinstance(v.get("data"), str) and len(v["data"]) >= MIN_BLOB_CHARS and _declares_base64(v)
            for k, x in v.items():
                y = cut(x) if payload_key and k == "data" else walk(x)
                changed = changed or y is not x
                new[k] = y
            return new if changed else v
        return v

    return walk(value), found


def _encode(original: str) -> tuple[str, str, bytes]:
    """``(prefix, encoding, data)`` for an original string (exact round trip guaranteed)."""
    prefix, payload = "", original
    if _is_data_url(original):
        cut = original.index(";base64,") + len(";base64,")
        prefix, payload = original[:cut], original[cut:]
    try:
        raw = base64.b64decode(payload, validate=True)
        if base64.b64encode(raw).decode("ascii") == payload:
            return prefix, "base64", raw
    except (binascii.Error, ValueError):
        pass
    return prefix, "text", payload.encode("utf-8", "surrogatepass")


def _decode(prefix: str, encoding: str, data: bytes) -> str:
    body = base64.b64encode(data).decode("ascii") if encoding == "base64" else bytes(data).decode("utf-8", "surrogatepass")
    return prefix + body


def put(conn: apsw.Connection, original: str) -> str:
    """Store ``original`` once (``INSERT OR IGNORE`` on its sha256); returns the sha256."""
    sha = sha256_of(original)
    put_many(conn, {sha: original})
    return sha


def put_many(conn: apsw.Connection, blobs: dict[str, str]) -> int:
    """Store each ``sha256 → original`` not stored yet; returns rows inserted (0 for repeats).
    Callers pass what ``extract`` returned; the key is trusted to be ``sha256_of(value)``."""
    if not blobs:
        return 0
    now = time.time()
    inserted = 0
    for sha, original in blobs.items():
        if conn.execute("SELECT 1 FROM blobs WHERE sha256 = ?", (sha,)).fetchone():
            continue  # checked first: a repeat costs a lookup, never an encode
        prefix, encoding, data = _encode(original)
        conn.execute("INSERT INTO blobs (sha256, prefix, encoding, data, size, created_at) "
                     "VALUES (?, ?, ?, ?, ?, ?)", (sha, prefix, encoding, data, len(data), now))
        inserted += 1
    return inserted


def get(conn: apsw.Connection, sha256: str) -> str | None:
    """The exact original string stored under ``sha256``, or None."""
    row = conn.execute("SELECT prefix, encoding, data FROM blobs WHERE sha256 = ?", (sha256,)).fetchone()
    return _decode(*row) if row else None


def inflate(conn: apsw.Connection, value: Any, cache: dict[str, str | None] | None = None) -> Any:
    """``value`` with every reference to a stored blob replaced by its original string.

    A reference string whose blob is unknown is left as is (it was producer text that only
    looks like a reference). ``cache`` (sha256 → original) may be shared across the messages
    of one read so a repeated image is fetched once.
    """
    cache = {} if cache is None else cache

    def walk(v: Any) -> Any:
        if isinstance(v, str):
            sha = parse_ref(v)
            if sha is None:
                return v
            if sha not in cache:
                cache[sha] = get(conn, sha)
            return cache[sha] if cache[sha] is not None else v
        if isinstance(v, list):
            return [walk(x) for x in v]
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items()}
        return v

    return walk(value)


def stats(conn: apsw.Connection) -> dict[str, int]:
    """``{"blobs": distinct payloads, "bytes": stored bytes}`` for status and benchmarks."""
    n, size = conn.execute("SELECT count(*), coalesce(sum(size), 0) FROM blobs").fetchone()
    return {"blobs": n, "bytes": size}

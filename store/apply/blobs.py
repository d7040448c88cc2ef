"""Content-addressed blob store: large binary parts (base64 images, documents) stored once.

A transcript repeats the same binary payload: Claude Code writes each image of a tool result
twice (the ``tool_result`` block the model saw and the CLI's ``toolUseResult`` copy), a
re-sent screenshot appears in every later request, a compaction carries it again, so a
real transcript would store each image more than once (bench/RESULTS.md).

Rule: when a message is written, every *large* binary payload in its structured fields
(``parts``, ``extra``) is cut out and stored once in ``blobs``, keyed by the SHA-256 of the
payload text; in the row it is replaced by the reference ``quill-blob:<sha256>``:

* a whole ``data:<type>;base64,<payload>`` URL (OpenAI ``image_url``, Codex
  ``input_image``) keeps its prefix: ``data:<type>;base64,quill-blob:<sha256>``;
* the ``data`` string of an object that declares base64 content (Anthropic
  ``{"type": "base64", "media_type", "data"}`` sources, Gemini ``inlineData``
  ``{"mimeType", "data"}``, any object with ``media_type``/``mime_type``/``mimeType``)
  becomes ``quill-blob:<sha256>``.

So the same image as a data URL and as a bare source is one row. Only payloads of at least
``MIN_BLOB_CHARS`` characters are cut (smaller ones cost less inline than a reference and a
lookup). Every read puts the exact payload back (``inflate``): parts, extras and exports are
returned byte for byte as they arrived. Payloads are stored decoded when base64 round-trips
exactly (¾ of the size), else as the exact text (e.g. base64 corrupted by an upstream
redactor): nothing is "repaired" on the way in.

Public API (pure functions over an ``apsw`` connection; no module state)::

    extract(value) -> (value_with_refs, {sha256: payload})   # no I/O
    may_hold_payload(value) -> bool          # False: extract would return value unchanged
    put(conn, payload, now=T) -> sha256      # one row per distinct payload (repeat = no-op)
    put_many(conn, {sha256: payload}, now=T) -> rows inserted
    get(conn, sha256) -> payload | None
    inflate(conn, value) -> value with every known reference replaced by its payload
    has_refs(text) -> bool                   # cheap pre-check on a stored JSON text

``put``/``put_many`` run inside the writer's transaction of the op that references the blob,
so a blob row exists exactly when a message that references it was committed. Their ``now``
(the row's ``created_at``) is required and is the arrival time of that op, never the clock at
apply time: a store rebuilt from a snapshot plus the spool must write the same row.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from typing import Any

import apsw
import msgspec

#: Reference string prefix; the full reference is ``REF_PREFIX + sha256 hex`` (64 chars).
REF_PREFIX = "quill-blob:"
#: Payloads shorter than this (characters) stay inline: a reference is 75 characters and
#: reading it back costs a primary-key lookup, so small icons are cheaper inline.
MIN_BLOB_CHARS = 1024

DDL = """
CREATE TABLE IF NOT EXISTS blobs (
    sha256     TEXT PRIMARY KEY,        -- hex SHA-256 of the payload text (UTF-8)
    encoding   TEXT NOT NULL CHECK (encoding IN ('base64', 'text')),
    data       BLOB NOT NULL,           -- decoded bytes (base64) or the exact payload text (UTF-8)
    size       INTEGER NOT NULL,        -- bytes in ``data``
    created_at REAL NOT NULL
) WITHOUT ROWID;
"""

_MEDIA_KEYS = ("media_type", "mime_type", "mimeType")


def sha256_of(payload: str) -> str:
    """Hex SHA-256 of ``payload`` encoded as UTF-8."""
    return hashlib.sha256(payload.encode("utf-8", "surrogatepass")).hexdigest()


def ref(sha256: str) -> str:
    """The reference string stored in place of a payload."""
    return REF_PREFIX + sha256


_REF_LEN = len(REF_PREFIX) + 64


def parse_ref(value: Any) -> tuple[str, str] | None:
    """``(prefix, sha256)`` when ``value`` is a reference (``quill-blob:<sha>``, or a data
    URL prefix followed by one), else None."""
    if not isinstance(value, str) or len(value) < _REF_LEN or value[-_REF_LEN:-64] != REF_PREFIX:
        return None
    prefix = value[:-_REF_LEN]
    if prefix and not (prefix.startswith("data:") and prefix.endswith(";base64,")):
        return None
    return prefix, value[-64:]


def has_refs(text: str | None) -> bool:
    """True when a stored JSON text may hold references (a substring test, no parsing)."""
    return text is not None and REF_PREFIX in text


def _is_data_url(value: str) -> bool:
    return value.startswith("data:") and ";base64," in value[:256]


def _declares_base64(obj: dict) -> bool:
    return obj.get("type") == "base64" or any(isinstance(obj.get(k), str) for k in _MEDIA_KEYS)


#: Stateless encoder (a constant; msgspec documents encoders as safe to share).
_ENCODER = msgspec.json.Encoder()


def may_hold_payload(value: Any) -> bool:
    """False only when ``extract`` cannot find a payload in ``value`` (then it returns
    ``value`` itself): a cheap necessary condition, checked on the compact JSON (C speed)
    instead of a Python walk of every node.

    Why it is necessary: a payload is a string of at least ``MIN_BLOB_CHARS`` characters,
    either a data URL (its text holds ``;base64,``) or the ``data`` member of an object (the
    JSON holds ``"data":"``). JSON escapes neither ``;base64,`` nor a plain key, and a value's
    JSON is at least as long as any string in it. A value the encoder refuses (a lone
    surrogate, a non-JSON type) gets True: the walk decides. tests/test_blobs.py checks that
    ``extract`` with and without this test agree on generated and corpus values.
    """
    if isinstance(value, str):
        return len(value) >= MIN_BLOB_CHARS and value.startswith("data:")
    if not isinstance(value, (list, dict)):
        return False
    try:
        text = _ENCODER.encode(value)
    except (TypeError, ValueError, msgspec.MsgspecError):
        return True
    return len(text) >= MIN_BLOB_CHARS and (b";base64," in text or b'"data":"' in text)


def extract(value: Any) -> tuple[Any, dict[str, str]]:
    """Replace large binary payloads in a JSON value by references.

    Returns ``(new_value, blobs)`` where ``blobs`` maps sha256 → the payload text.
    ``value`` is not modified; containers without payloads are returned as the same objects
    (a value ``may_hold_payload`` rules out is not walked at all).
    Pure: no I/O, so the caller decides when (inside which transaction) to ``put_many``.
    """
    if not may_hold_payload(value):
        return value, {}
    return walk_extract(value)


def walk_extract(value: Any) -> tuple[Any, dict[str, str]]:
    """``extract`` without the ``may_hold_payload`` shortcut: the walk of every node."""
    found: dict[str, str] = {}

    def cut(payload: str) -> str:
        sha = sha256_of(payload)
        found[sha] = payload
        return ref(sha)

    def walk(v: Any) -> Any:
        if isinstance(v, str):
            if len(v) >= MIN_BLOB_CHARS and _is_data_url(v):
                split = v.index(";base64,") + len(";base64,")
                return v[:split] + cut(v[split:])
            return v
        if isinstance(v, list):
            out = [walk(x) for x in v]
            return v if all(a is b for a, b in zip(out, v)) else out
        if isinstance(v, dict):
            changed = False
            new: dict = {}
            payload_key = (
                isinstance(v.get("data"), str)
                and len(v["data"]) >= MIN_BLOB_CHARS
                and _declares_base64(v)
            )
            for k, x in v.items():
                y = cut(x) if payload_key and k == "data" and not _is_data_url(x) else walk(x)
                changed = changed or y is not x
                new[k] = y
            return new if changed else v
        return v

    return walk(value), found


def _encode(payload: str) -> tuple[str, bytes]:
    """``(encoding, data)`` for a payload (exact round trip guaranteed)."""
    try:
        raw = base64.b64decode(payload, validate=True)
        if base64.b64encode(raw).decode("ascii") == payload:
            return "base64", raw
    except (binascii.Error, ValueError):
        pass
    return "text", payload.encode("utf-8", "surrogatepass")


def _decode(encoding: str, data: bytes) -> str:
    return (
        base64.b64encode(data).decode("ascii")
        if encoding == "base64"
        else bytes(data).decode("utf-8", "surrogatepass")
    )


def put(conn: apsw.Connection, payload: str, *, now: float) -> str:
    """Store ``payload`` once (a repeat is a no-op) with ``created_at = now``; returns its
    sha256."""
    sha = sha256_of(payload)
    put_many(conn, {sha: payload}, now=now)
    return sha


def put_many(conn: apsw.Connection, blobs: dict[str, str], *, now: float) -> int:
    """Store each ``sha256 → payload`` not stored yet; returns rows inserted (0 for repeats).
    Callers pass what ``extract`` returned; the key is trusted to be ``sha256_of(value)``.
    ``now`` (epoch s) is ``created_at`` and has no default: op appliers pass the op's arrival
    time (``store.apply.chunking.arrival_time``), so a rebuild by replay writes the same value
    as the live store (a wall-clock default would make a rebuilt store's blobs differ)."""
    if not blobs:
        return 0
    inserted = 0
    for sha, payload in blobs.items():
        if conn.execute("SELECT 1 FROM blobs WHERE sha256 = ?", (sha,)).fetchone():
            continue  # checked first: a repeat costs a lookup, never an encode
        encoding, data = _encode(payload)
        conn.execute(
            "INSERT INTO blobs (sha256, encoding, data, size, created_at) VALUES (?, ?, ?, ?, ?)",
            (sha, encoding, data, len(data), now),
        )
        inserted += 1
    return inserted


def get(conn: apsw.Connection, sha256: str) -> str | None:
    """The exact payload stored under ``sha256``, or None."""
    row = conn.execute("SELECT encoding, data FROM blobs WHERE sha256 = ?", (sha256,)).fetchone()
    return _decode(*row) if row else None


_REFS = re.compile(re.escape(REF_PREFIX) + "([0-9a-f]{64})")


def referenced(texts: Any) -> set[str]:
    """The sha256s referenced anywhere in ``texts`` (stored JSON texts; None skipped)."""
    return {sha for t in texts if t for sha in _REFS.findall(t)}


def get_many(conn: apsw.Connection, shas: set[str]) -> dict[str, str | None]:
    """``{sha256: payload or None}`` for every sha in ``shas``, in one query per 500 (a
    page of rows is inflated from this instead of one round trip per reference)."""
    out: dict[str, str | None] = dict.fromkeys(shas)
    wanted = sorted(shas)
    for at in range(0, len(wanted), 500):
        part = wanted[at : at + 500]
        marks = ", ".join("?" for _ in part)
        for sha, encoding, data in conn.execute(
            f"SELECT sha256, encoding, data FROM blobs WHERE sha256 IN ({marks})", part
        ).fetchall():
            out[sha] = _decode(encoding, data)
    return out


def inflate(
    conn: apsw.Connection,
    value: Any,
    cache: dict[str, str | None] | None = None,
    *,
    sent: set[str] | None = None,
    kept: set[str] | None = None,
) -> Any:
    """``value`` with every reference to a stored blob replaced by its payload.

    A reference whose blob is unknown is left as is (producer text that only looks like a
    reference). ``cache`` (sha256 → payload) may be shared across the messages of one read
    so a repeated image is fetched once. With ``sent`` (and ``kept``), each payload is
    inflated once across calls (the export sends it once per session): a reference whose
    hash is already in ``sent`` stays a reference and its hash goes into ``kept``; an
    inflated one's hash is added to ``sent``.
    """
    cache = {} if cache is None else cache

    def walk(v: Any) -> Any:
        if isinstance(v, str):
            found = parse_ref(v)
            if found is None:
                return v
            prefix, sha = found
            if sha not in cache:
                cache[sha] = get(conn, sha)
            payload = cache[sha]
            if payload is None:
                return v
            if sent is not None:
                if sha in sent:
                    if kept is not None:
                        kept.add(sha)
                    return v
                sent.add(sha)
            return prefix + payload
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

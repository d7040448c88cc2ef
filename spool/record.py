"""Spool record format v1: one JSON object per line, checksummed.

A line is the compact JSON of the record body with a trailing ``"crc"`` member::

    {"v":1,"op":"messages.append","batch":"<uuid>","producer":"<id>","seq":7,
     "ts":1764412345.12,"data":{...},"crc":"1a2b3c4d"}\n

The checksum is CRC-32 (zlib) of the exact bytes of the body *without* the crc member, i.e.
``line[:-CRC_SUFFIX_LEN] + b"}"``. Checking bytes, not a re-serialisation, means the check
cannot be fooled by JSON round-trip differences. Full format: ``docs/spool-format.md``.
The CRC-32 is zlib's (the same polynomial and values as ``zlib.crc32``), computed by zlib-ng,
which uses the CPU's carry-less multiply: ~8x fewer instructions per byte than the system
zlib's table loop, on every append and every record the drain reads.
"""

from __future__ import annotations

import functools
import json
import re
import sys
from typing import Any

from zlib_ng.zlib_ng import crc32

from quill.spool.errors import DamagedRecordError

VERSION = 1

#: Every op kind a producer may append (docs/architecture.md, "The spool").
OP_KINDS = frozenset(
    {
        "session.create",
        "session.end",
        "session.title",
        "session.flags",
        "session.read",
        "messages.append",
        "messages.compact",
        "messages.rewind",
        "messages.replace",
        "sessions.delete",
        "usage.record",
        "messages.restore",
        "usage.reprice",
    }
)


@functools.cache
def _msgspec() -> tuple[Any, Any, type[Exception]]:
    """(encoder, decoder, error type) of msgspec, imported on first use: importing it costs
    more than it saves on the one record a `quill push` process writes (bench/cli.py).
    The codec objects are stateless constants (msgspec documents them as safe to share)."""
    import msgspec

    return msgspec.json.Encoder(), msgspec.json.Decoder(), msgspec.MsgspecError


@functools.cache
def _orjson() -> tuple[Any, int]:
    """(``orjson.dumps``, its options) for plain bodies (``encode_into``), imported on first
    use. orjson writes a plain body's JSON in about three quarters of msgspec's CPU on spool
    records (SIMD string escaping; bench/RESULTS.md). The passthrough options make it refuse
    (``TypeError``) subclasses, datetimes and dataclasses rather than convert them; it only
    ever sees bodies ``plain_json`` accepted, so they are belt and braces."""
    import orjson

    options = (
        orjson.OPT_PASSTHROUGH_SUBCLASS
        | orjson.OPT_PASSTHROUGH_DATETIME
        | orjson.OPT_PASSTHROUGH_DATACLASS
    )
    return orjson.dumps, options


_SURROGATE = re.compile("[\ud800-\udfff]")
_CRC_PREFIX = b',"crc":"'
_CRC_SUFFIX = _CRC_PREFIX + b'%08x"}\n'
CRC_SUFFIX_LEN = len(_CRC_PREFIX) + 8 + len(b'"}\n')


def encode(body: dict[str, Any], *, fast: bool = True, plain: bool = False) -> bytes:
    """Serialise a record body to one checksummed line (bytes, ending in ``\\n``):
    ``encode_into`` a fresh buffer. Raises what ``encode_into`` raises."""
    buf = bytearray()
    encode_into(buf, 0, body, fast=fast, plain=plain)
    return bytes(buf)


def encode_into(
    buf: bytearray, start: int, body: dict[str, Any], *, fast: bool = True, plain: bool = False
) -> int:
    """Write ``body``'s checksummed line (ending in ``\\n``) into ``buf`` at ``start``,
    replacing whatever ``buf`` held from there on; returns the line's end (``len(buf)``).
    A producer reuses one buffer for every append: msgspec writes into its retained capacity,
    so a record costs no allocation and no copy of its bytes besides the encode itself.

    ``fast=False`` skips msgspec and takes the stdlib path (the same record format; readers
    cannot tell): for one-shot producers that write a single record per process.

    Fast path: a ``plain_json`` body is written by orjson (``_orjson``): its round trip holds
    by construction (the property tests/test_spool_codec.py checks), so it is not decoded
    again; ``plain=True``: the caller has found ``plain_json(body)`` true already
    (``Spool.append(plain=True)``), so it is not walked again. orjson refuses an int past 64
    bits and a lone surrogate: such a body, and any body that is not plain, goes to msgspec,
    accepted only when decoding its output gives back a value equal to ``body`` — msgspec
    writes NaN/Infinity as ``null``, sets and tuples as lists, bytes as base64 and int keys as
    strings, which the stdlib path below refuses or renders itself, so the bytes written
    always decode to what the producer passed (for a plain body that needs no check either).
    Anything msgspec cannot encode (lone surrogates, unknown types) takes the stdlib path.

    Stdlib path: ``ensure_ascii=False`` keeps non-ASCII text readable; ``allow_nan=False``
    refuses NaN/Infinity (``ValueError``). A lone surrogate (an undecodable byte smuggled in
    by ``surrogateescape``, half of a broken UTF-16 pair) cannot be encoded to UTF-8: it
    becomes U+FFFD, the replacement character the store's normaliser writes (docs/ops.md),
    never ``?``, which would make a lost character look like a real ``?`` (``surrogatepass``
    would write invalid UTF-8). Raises ``TypeError``/``ValueError`` for data that is not JSON
    (``buf`` then holds nothing from ``start`` on), and ``BufferError`` when ``buf`` has a
    live ``memoryview`` and so cannot be resized.
    """
    done = False
    if fast:
        plain = plain or plain_json(body)
        if plain:
            dumps, options = _orjson()
            try:
                buf[start:] = dumps(body, option=options)
                done = True
            except TypeError:  # an int past 64 bits, a lone surrogate: msgspec or the stdlib
                pass
    if fast and not done:
        encoder, decoder, error = _msgspec()
        try:
            encoder.encode_into(body, buf, start)
            done = plain or decoder.decode(memoryview(buf)[start:]) == body
        except (TypeError, ValueError, error):
            pass
    if not done:
        raw = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        try:
            data = raw.encode("utf-8")
        except UnicodeEncodeError:
            data = _SURROGATE.sub("\ufffd", raw).encode("utf-8")
        buf[start:] = data
    # The crc member replaces the body's closing "}" in place: the body is not copied again.
    crc = crc32(memoryview(buf)[start:]) & 0xFFFFFFFF
    buf[-1:] = _CRC_SUFFIX % crc
    return len(buf)


#: Longest id a record may carry (batch id, session id, message id, tool-call id, response id,
#: session key), in characters and in UTF-8 bytes: both backends index ids, and PostgreSQL's
#: B-tree refuses an index row over 2704 bytes (SQLSTATE 54000). Two ids in one index row
#: (``messages(session_id, ext_id)``, ``(session_id, tool_call_id)``) stay under it.
MAX_ID_CHARS = 512
MAX_ID_BYTES = 1024


def id_size_problem(value: str, name: str) -> str | None:
    """Why the id ``value`` (named ``name`` in the message) is too long, or None when it
    fits ``MAX_ID_CHARS`` and ``MAX_ID_BYTES`` (UTF-8; a lone surrogate counts 3 bytes)."""
    if len(value) > MAX_ID_CHARS:
        return f"{name} has {len(value)} characters; the limit is {MAX_ID_CHARS}"
    if len(value) * 4 > MAX_ID_BYTES:  # only then can it pass the byte limit
        size = len(value.encode("utf-8", "surrogatepass"))
        if size > MAX_ID_BYTES:
            return f"{name} is {size} bytes in UTF-8; the limit is {MAX_ID_BYTES}"
    return None


#: Deepest nesting of objects and arrays a producer may append (``store.apply.precheck``): readers
#: decode recursively, against the interpreter's recursion limit (1,000 frames by default)
#: minus their own stack, so a line must stay well inside it wherever it is read.
MAX_NESTING = 200


def nesting_ok(value: Any, limit: int = MAX_NESTING) -> bool:
    """Whether ``value`` nests objects/arrays at most ``limit`` levels deep (iterative, so
    any depth is measured without recursion). Scalars are level 0."""
    stack = [(value, 1)]
    pop, push = stack.pop, stack.append
    while stack:
        x, depth = pop()
        t = type(x)
        if t is dict:
            items = x.values()
        elif t is list or t is tuple:
            items = x
        else:
            continue
        if depth > limit:
            return False
        for y in items:
            if type(y) in (dict, list, tuple):
                push((y, depth + 1))
    return True


def plain_json(value: Any) -> bool:
    """True when ``value`` holds only exact ``dict`` (``str`` keys), ``list``, ``str``,
    ``int`` (any size), finite ``float``, ``bool`` and ``None``: values msgspec's JSON encoder
    writes so that its decoder gives back an equal value (ints exactly, floats by shortest
    round-trip repr, str as UTF-8 with escapes). Anything else — tuples, sets, bytes, NaN,
    non-str keys, subclasses such as enums — is False, and ``encode`` checks the round trip.
    tests/test_spool_codec.py holds the property (generated plain values round-trip)."""
    stack = [value]
    pop, push = stack.pop, stack.append
    while stack:
        x = pop()
        t = type(x)
        if t is str or x is None or t is bool or t is int:
            continue
        if t is dict:
            for k, y in x.items():
                if type(k) is not str:
                    return False
                if type(y) is not str:
                    push(y)
        elif t is list:
            stack.extend(x)
        elif t is float:
            if x - x != 0.0:  # NaN or ±Infinity (x - x is NaN for both)
                return False
        else:
            return False
    return True


#: ``scan`` results.
PLAIN, NOT_PLAIN, TOO_DEEP, HUGE_INT = "plain", "not-plain", "too-deep", "huge-int"


@functools.cache
def _huge_bound(max_digits: int) -> tuple[int, int]:
    """``(bits, bound)``: an ``int`` of ``bits`` bits or more may have more than
    ``max_digits`` decimal digits; one ``>= bound`` in magnitude has."""
    bound = 10**max_digits
    return bound.bit_length() - 1, bound


def scan(value: Any, limit: int = MAX_NESTING) -> str:
    """``nesting_ok`` and ``plain_json`` of ``value`` in one walk, for a producer's precheck,
    plus the integers no encoder here can write: ``TOO_DEEP`` when objects/arrays nest past
    ``limit`` (as ``nesting_ok``: dicts, lists and tuples count, scalars are level 0);
    else ``HUGE_INT`` when an ``int`` has more decimal digits than Python writes as text
    (``sys.get_int_max_str_digits``; msgspec and the stdlib both raise ``ValueError``);
    else ``PLAIN`` or ``NOT_PLAIN`` (``plain_json``'s answer)."""
    digits = sys.get_int_max_str_digits()
    bits, bound = _huge_bound(digits) if digits else (0, 0)
    plain, huge = True, False
    stack = [(value, 1)]
    pop, push = stack.pop, stack.append
    while stack:
        x, depth = pop()
        t = type(x)
        if t is dict:
            if depth > limit:
                return TOO_DEEP
            items: Any = x.values()
            for k in x:
                if type(k) is not str:
                    plain = False
                    break
        elif t is list or t is tuple:
            if depth > limit:
                return TOO_DEEP
            items = x
            if t is tuple:
                plain = False
        else:  # a scalar at the top
            items = (x,)
            depth -= 1
        for y in items:
            ty = type(y)
            if ty is str or y is None or ty is bool:
                continue
            if ty is int:
                if bits and y.bit_length() >= bits and abs(y) >= bound:
                    huge = True
            elif ty is dict or ty is list or ty is tuple:
                push((y, depth + 1))
            elif ty is float:
                if y - y != 0.0:  # NaN or ±Infinity
                    plain = False
            else:
                plain = False
    if huge:
        return HUGE_INT
    return PLAIN if plain else NOT_PLAIN


def loads(data: bytes) -> Any:
    """JSON bytes → value: msgspec (several times faster than the stdlib on spool lines;
    integers of any size exact), and the stdlib for what msgspec refuses (NaN/Infinity
    literals, lone-surrogate escapes, out-of-range floats, UTF-16/32), so any input decodes
    exactly as ``json.loads`` decodes it. Raises ``UnicodeDecodeError`` or
    ``json.JSONDecodeError`` like ``json.loads``."""
    _, decoder, error = _msgspec()
    try:
        return decoder.decode(data)
    except error:
        return json.loads(data)


def decode(line: bytes) -> dict[str, Any]:
    """Decode one complete line (with its ``\\n``) into a record body.

    Raises ``DamagedRecordError`` when the line is not a valid v1 record: missing or wrong
    checksum, invalid JSON/UTF-8, NUL bytes, an unknown version or a missing field.
    """
    if b"\x00" in line:
        raise DamagedRecordError("nul-bytes", "line contains NUL bytes (torn or zeroed write)")
    # The line ends with: ,"crc":"XXXXXXXX"}\n  -> prefix at [-19:-11], hex at [-11:-3].
    if (
        len(line) <= CRC_SUFFIX_LEN
        or line[-CRC_SUFFIX_LEN:-11] != _CRC_PREFIX
        or line[-3:] != b'"}\n'
    ):
        raise DamagedRecordError("checksum", "line has no crc member at its end")
    body = line[:-CRC_SUFFIX_LEN] + b"}"
    try:
        want = int(line[-11:-3], 16)
    except ValueError:
        raise DamagedRecordError("checksum", "crc member is not hexadecimal") from None
    got = crc32(body) & 0xFFFFFFFF
    if got != want:
        raise DamagedRecordError("checksum", f"crc mismatch: stored {want:08x}, computed {got:08x}")
    try:
        rec = loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DamagedRecordError("bad-json", str(exc)) from None
    except RecursionError:
        # Both decoders recurse per nesting level against the interpreter's limit, so how deep
        # a line can be read depends on the reader's own stack: refuse it as a record, never
        # let it escape (it crash-looped the writer). Producers refuse data nested deeper than
        # MAX_NESTING before appending (store.precheck), far below that limit.
        raise DamagedRecordError(
            "too-deep",
            f"JSON nested too deeply to decode (producers refuse more than {MAX_NESTING} levels)",
        ) from None
    if not isinstance(rec, dict) or rec.get("v") != VERSION:
        raise DamagedRecordError(
            "version",
            f"unsupported record version {rec.get('v') if isinstance(rec, dict) else None!r}",
        )
    for key in ("op", "batch", "data"):
        if key not in rec:
            raise DamagedRecordError("shape", f"record has no {key!r}")
    if not isinstance(rec["op"], str):
        # Every reader keys on the op name (appliers, purge, stats): a non-string is no record.
        raise DamagedRecordError(
            "shape", f"record op must be a string, got {type(rec['op']).__name__}"
        )
    return rec


def decode_lenient(line: bytes) -> dict[str, Any] | None:
    """The record body of ``line`` when ``decode`` accepts it, else (a damaged line) its JSON
    object as far as it parses, checksum unchecked; None when neither works. For attributing
    a damaged line to a session (quarantine, purge), never for applying it. A torn write
    (``torn.torn_body``) gives its op and, when its prefix reached it, its session id."""
    try:
        return decode(line if line.endswith(b"\n") else line + b"\n")
    except DamagedRecordError:
        pass
    try:
        rec = json.loads(line)
    except RecursionError:
        return None
    except ValueError:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        from quill.spool.torn import (
            torn_body,
        )  # a torn write: whose it is, as far as its prefix says

        return torn_body(line.rstrip(b"\n"))
    return rec if isinstance(rec, dict) else None

"""Telling a torn, never-acknowledged write from damage, by its bytes alone.

A producer writes each record with one ``write()`` and acknowledges it only after that write
returned in full and was synced (``spool.producer``). A producer killed mid-write leaves a
*strict prefix* of its record's bytes; the next producer (or the writer) terminates it with a
lone ``\\n`` (docs/spool-format.md, append protocol step 3). The record encoding puts the
``crc`` member last (``record.encode``), so such a prefix never ends in a crc member.

``is_record_prefix(fragment)`` proves that ``fragment`` (a line without its ``\\n``) is such a
prefix: it opens like every record (``{"v":1,"op":"``), is an *incomplete* compact JSON text
with no syntax error, its top-level keys are record keys in the producer's order (``v, op,
batch, producer, seq, ts, data``, none repeated), and it has not reached the ``crc`` member.
An acknowledged record damaged later keeps its full length, so a bit flip either leaves the
crc member in place (the check fails as a ``checksum`` mismatch), breaks the JSON syntax,
completes the object (a flipped key letter), or, when it hits the crc member's own bytes,
still leaves the top-level ``crc`` key or its 8 hex digits — none of which is an incomplete
prefix without ``crc``.
The one flip that yields such a prefix is a byte turned into ``\\n``, which splits a record
in two: the rest is a line that is no record prefix, which is why the reader also requires
what follows a torn line to be a record, another torn line, or the end of the segment
(``spool.reader``).
"""

from __future__ import annotations

import json
import re

#: Reason of a line proven to be a torn, never-acknowledged write: not damage. The reader
#: yields it, the drain quarantines it (bytes kept), verify/doctor/status report it apart.
TORN_WRITE = "torn-write"
#: How verify, doctor and status name such lines, after their count: the one wording, saying
#: only what the bytes prove. A strict prefix of a record is what a producer killed mid-write
#: leaves (never acknowledged), but also what a cut of the file leaves of an acknowledged
#: record (the end of the newest segment truncated, and later appends terminating it): the
#: bytes cannot tell the two apart, and a cut producer's *last* records leave no sequence gap.
#: What else is known (every other record intact) is for ``spool.integrity`` to say.
TORN_SUMMARY = (
    "torn record(s) (a producer killed mid-write, or the spool cut there: "
    "the bytes cannot tell which)"
)
#: A torn record's own detail (quarantine entry, verify's list), before its size.
TORN_DETAIL = "torn record: a producer killed mid-write, or the spool cut there"
#: How every record line begins (``record.encode`` writes the body's keys in this order).
HEAD = b'{"v":1,"op":"'
#: The top-level keys of a record body before ``crc``, in the order producers write them.
KEYS = ("v", "op", "batch", "producer", "seq", "ts", "data")

#: A JSON string, as an unrolled loop (runs of plain bytes matched in one step: a 40 MB
#: message is one match, not 40 M alternations).
#: Possessive quantifiers: a string cut off by the end fails at once instead of backtracking
#: over every byte before it.
_CHARS = rb'[^"\\\x00-\x1f]*+(?:\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})[^"\\\x00-\x1f]*+)*+'
_STRING = rb'"' + _CHARS + rb'"'
_TOKEN = re.compile(
    rb"(?P<s>" + _STRING + rb")"
    rb"|(?P<n>-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)(?![0-9.eE+-])"
    rb"|(?P<l>true|false|null)"
    rb"|(?P<p>[{}\[\]:,])"
)
#: What may be cut off at the very end of a prefix: a string, number or literal in progress.
_PARTIAL = re.compile(
    rb'"' + _CHARS + rb"(?:\\(?:u[0-9a-fA-F]{0,3})?)?\Z"
    rb"|-?(?:0|[1-9][0-9]*)?(?:\.[0-9]*)?(?:[eE][+-]?[0-9]*)?\Z"
    rb"|(?:t(?:r(?:ue?)?)?|f(?:a(?:l(?:se?)?)?)?|n(?:u(?:ll?)?)?)\Z"
)

# Parser states: what may come next inside the innermost container.
_KEY_OR_CLOSE, _KEY, _COLON, _VALUE, _VALUE_OR_CLOSE, _COMMA_OR_CLOSE = range(6)


#: What a torn write's prefix tells about whose it is: its op and, when the cut came after it,
#: the session id its data opens with. Top-level strings before ``data`` are escaped JSON, so
#: the unescaped ``,"data":{"session_id":"`` can only be the data member's own opening.
_OP = re.compile(rb'\{"v":1,"op":"([a-z._]+)"')
_SESSION = re.compile(rb',"data":\{"session_id":("(?:[^"\\]|\\.)*")')
_BATCH = re.compile(rb',"batch":("(?:[^"\\]|\\.)*")')


def torn_body(fragment: bytes) -> dict | None:
    """``{"op", "batch"?, "data"?: {"session_id"}}`` of a torn write, as far as its prefix
    reached (None when ``fragment`` is not one, ``is_record_prefix``): enough to attribute it
    to a session and give it a same-length tombstone (purge), never to apply it. A data
    object that does not open with ``session_id`` gives no session: such a line stays
    unattributed."""
    if not is_record_prefix(fragment):
        return None
    op = _OP.match(fragment)
    if op is None:
        return None
    body: dict = {"op": op.group(1).decode()}
    batch = _BATCH.search(fragment, op.end())
    if batch is not None:
        body["batch"] = json.loads(batch.group(1))
    sid = _SESSION.search(fragment)
    if sid is not None:
        body["data"] = {"session_id": json.loads(sid.group(1))}
    return body


def is_record_prefix(fragment: bytes) -> bool:
    """True when ``fragment`` (one line's bytes without its ``\\n``) is a strict prefix of a
    record line that stops before the record's ``crc`` member (module doc). Linear in the
    fragment's length; a 40 MB message record is a handful of tokens (its strings are matched
    by one regex each)."""
    if not fragment.startswith(HEAD) or b"\n" in fragment or b"\x00" in fragment:
        return False
    stack: list[bytes] = []  # b"{" / b"[" of the open containers, outermost first
    state = _VALUE
    keys: list[str] = []  # top-level keys seen so far
    pos, end = 0, len(fragment)
    while pos < end:
        m = _TOKEN.match(fragment, pos)
        if m is None:
            # A token cut off by the end of the fragment (or a syntax error).
            if state not in (_VALUE, _VALUE_OR_CLOSE, _KEY, _KEY_OR_CLOSE):
                return False
            tail = fragment[pos:]
            if state in (_KEY, _KEY_OR_CLOSE):
                return (
                    tail.startswith(b'"')
                    and bool(_PARTIAL.match(tail))
                    and _key_ok(stack, keys, tail, partial=True)
                )
            return bool(_PARTIAL.match(tail))
        kind, tok = m.lastgroup, m.group()
        pos = m.end()
        if kind == "p":
            if tok in (b"{", b"["):
                if state not in (_VALUE, _VALUE_OR_CLOSE):
                    return False
                stack.append(tok)
                state = _KEY_OR_CLOSE if tok == b"{" else _VALUE_OR_CLOSE
            elif tok in (b"}", b"]"):
                want = b"{" if tok == b"}" else b"["
                if (
                    not stack
                    or stack[-1] != want
                    or state
                    not in (_COMMA_OR_CLOSE, _KEY_OR_CLOSE if tok == b"}" else _VALUE_OR_CLOSE)
                ):
                    return False
                stack.pop()
                if not stack:
                    return False  # the record's object is complete: not a strict prefix
                state = _COMMA_OR_CLOSE
            elif tok == b":":
                if state != _COLON:
                    return False
                state = _VALUE
            else:  # ","
                if state != _COMMA_OR_CLOSE:
                    return False
                state = _KEY if stack[-1] == b"{" else _VALUE
        elif state in (_KEY, _KEY_OR_CLOSE):
            if kind != "s" or not _key_ok(stack, keys, tok, partial=False):
                return False
            state = _COLON
        elif state in (_VALUE, _VALUE_OR_CLOSE):
            if not stack:
                return False
            state = _COMMA_OR_CLOSE
        else:
            return False
    return bool(stack)  # ends between tokens, inside the record's object


def _key_ok(stack: list[bytes], keys: list[str], tok: bytes, *, partial: bool) -> bool:
    """Whether a top-level key (complete, or cut off when ``partial``) continues the
    producer's key order: a key of ``KEYS`` after the last one seen (a key may be absent, none
    repeats, ``crc`` and unknown keys never pass); keys of nested objects (the op's data) are
    free."""
    if len(stack) != 1:
        return True
    try:
        name = tok.strip(b'"').decode("ascii")
    except UnicodeDecodeError:
        return False
    later = KEYS[KEYS.index(keys[-1]) + 1 :] if keys else KEYS
    if partial:
        return any(k.startswith(name) for k in later)
    if name not in later:
        return False
    keys.append(name)
    return True

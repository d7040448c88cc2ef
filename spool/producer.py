"""The producer side of the spool: ``Spool(dir).append(op, data)``.

Durability and concurrency contract (docs/architecture.md, "The spool"):

* one ``write()`` per record to a segment opened ``O_APPEND``, under an exclusive ``flock`` on
  that segment held only for the write, so records from concurrent producer processes never
  interleave and no producer holds up another for longer than one append;
* before writing, a segment whose last byte is not ``\\n`` (a producer was killed mid-write)
  gets a lone ``\\n``: the torn fragment becomes its own damaged line, which the drain
  quarantines, and never fuses with the new record;
* ``fdatasync`` after the lock is released, before ``append`` returns; ``append_many``
  writes all its records first and covers them with one ``fdatasync`` (one per segment when
  a rotation falls inside: the old segment is synced before its descriptor is given up).
  Concurrent producers already share the filesystem's journal commit (ext4/jbd2 batches
  concurrent fdatasyncs).
  ``group_commit=True`` adds a user-space group commit (off by default: on a 2-core machine
  it lowers the 16-producer p50 but raises the p99, and the p99 is the target;
  bench/RESULTS.md has the figures). With it, the syncer holds an exclusive
  ``flock`` on ``SYNC_FILE`` in the spool directory, reads the segment's size, ``fdatasync``s
  and then publishes ``(segment, size)`` in that file (page cache only: it is coordination,
  not state; a crash takes its readers with it). A producer whose record ends at or below
  the published size of its segment was written before that size was read, so the completed
  ``fdatasync`` covered it: it returns without syncing. Everyone else waits for the lock and
  syncs for all who wrote before it. "Durable before the ack" is unchanged: an ack follows an
  ``fdatasync`` that began after the record's ``write`` returned;
* once the record is durable, the writer's doorbell (``segments.DOORBELL``, a named pipe,
  ``quill.home.doorbell``) is rung so an idle writer drains at once; a ring nobody hears (no
  writer) or that fails (kept in ``ring_error``) costs only the writer's poll interval;
* rotation by size: a producer that finds the active segment at or past ``segment_bytes``
  terminates a torn tail it ends in (``\n``, synced), then creates the next one (``O_EXCL``)
  and fsyncs the directory, so a sealed segment always ends in ``\n``. A producer that finds, under
  its segment's lock, that the next segment already exists moves to the newest one instead of
  writing: that is how ``spool.purge.seal`` retires a segment before it is full (one
  ``stat`` per append), so "once N+1 exists nothing but a ``\n`` is written to N" holds;
* a handle whose segment was deleted (spool GC removed it and the segment after it while the
  handle sat idle, e.g. a long-lived ``quill.Client`` or the writer's job handle) sees the
  unlink (``fstat``'s ``st_nlink == 0``, under the lock, after the next-segment check) and
  moves to the newest segment: nothing is ever acknowledged into a file no reader can open.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Sequence
from typing import Any, NamedTuple

from quill.home import DEFAULTS
from quill.home.doorbell import ring
from quill.spool import envelope, segment_io
from quill.spool.errors import (
    InvalidOpError,
    RecordTooLargeError,
    SpoolError,
)
from quill.spool.group_commit import GroupCommit
from quill.spool.segments import (
    DOORBELL,
    FILE_MODE,
    Position,
    ensure_dir,
    fsync_dir,
    list_segments,
    record_seal,
    resolve_spool_dir,
    segment_name,
)

#: An encode buffer that grew past this (a record of many MB) is dropped after its append
#: rather than kept by the handle for its lifetime.
_KEEP_BUFFER_BYTES = 1 << 20


class Ack(NamedTuple):
    """What ``append`` returns once the record is durable: where it is and its batch id."""

    position: Position
    batch_id: str


class Spool(GroupCommit):
    """A producer handle on a spool directory. Cheap to create; one per process is typical.

    ``spool_dir`` may be the spool directory or the Quill data dir holding it (the spool
    inside is used); a directory that is neither raises ``SpoolLocationError``
    (``segments.resolve_spool_dir``), so no ack is ever given for a place nothing drains.

    Not thread-safe: give each thread its own ``Spool`` (they may share the directory).
    ``group_commit=True`` shares one ``fdatasync`` among concurrent appends (module doc);
    the default runs one per append.
    ``producer_id`` defaults to ``host:pid:random``; ``seq`` counts this handle's appends. Give
    each handle its own id: ``spool verify`` finds lost records by gaps in each id's numbers.
    ``max_record_bytes`` bounds one encoded line (``[spool] max_record_bytes``): a larger
    record is refused before anything is written (``RecordTooLargeError``), so the writer never
    meets a record it would refuse for its size.
    ``fast_codec=False`` encodes with the stdlib ``json`` instead of msgspec (``record.encode``;
    the same record format): cheaper for a process that appends once and exits.
    """

    def __init__(
        self,
        spool_dir: str | os.PathLike[str],
        *,
        producer_id: str | None = None,
        segment_bytes: int = DEFAULTS.segment_bytes,
        max_record_bytes: int = DEFAULTS.max_record_bytes,
        fsync: bool = True,
        group_commit: bool = False,
        fast_codec: bool = True,
    ):
        self.dir = resolve_spool_dir(spool_dir)
        self._group = group_commit
        self._sync_fd = -1
        self.producer_id = (
            producer_id or f"{os.uname().nodename}:{os.getpid()}:{os.urandom(4).hex()}"
        )
        self.segment_bytes = segment_bytes
        self.max_record_bytes = max_record_bytes
        self._fsync = fsync
        self._fast_codec = (
            fast_codec  # False: stdlib JSON for a process writing one record (record.encode)
        )
        self._seq = 0
        self._new_id = envelope.RandomIds()  # batch ids, many per getrandom
        # Records written to the active segment and not yet fdatasync'd (``_sync_pending``),
        # and where the last of them ends. Zero between calls: nothing is acked unsynced.
        self._unsynced = self._unsynced_end = 0
        self._segment = 0
        self._fd = -1
        self._next_path = ""
        self._buf = bytearray()  # ``_encode_buffer``
        self._doorbell = os.fspath(self.dir / DOORBELL)
        #: The last failure to ring the writer's doorbell (``OSError``), else None.
        self.ring_error: OSError | None = None
        ensure_dir(self.dir)

    @classmethod
    def for_settings(cls, cfg: Any, **kwargs: Any) -> Spool:
        """A producer on data dir ``cfg``'s spool (a ``quill.home.Settings``) with its
        configured limits (``[spool] segment_bytes``, ``max_record_bytes``): every producer a
        Quill command or worker opens is made here, so none acknowledges a record the writer
        would refuse for its size. ``kwargs``: the other ``Spool`` options. Raises what
        ``Spool`` raises."""
        return cls(
            cfg.spool_dir,
            segment_bytes=cfg.segment_bytes,
            max_record_bytes=cfg.max_record_bytes,
            **kwargs,
        )

    def append(
        self, op: str, data: dict[str, Any], *, batch_id: str | None = None, plain: bool = False
    ) -> Ack:
        """Append one op durably and return its ``Ack`` (position, batch id).

        ``op`` must be one of ``record.OP_KINDS``; ``data`` a JSON-serialisable dict. Reusing a
        ``batch_id`` is how a producer retries safely: the store applies a batch id once.
        Raises ``InvalidOpError`` (bad op/data, nesting too deep to encode), ``SpoolFullError``
        (ENOSPC; nothing partial is left) or ``SpoolError`` (other I/O failures, with the OS
        error chained).
        ``plain=True`` says the caller found ``record.plain_json(data)`` true (``precheck``
        returns it): the encoder skips that walk of ``data``. Only pass what was checked: a
        value that is not plain (NaN, a tuple, bytes) would be written as msgspec renders it.
        """
        # ``append_many`` of one op, without its lists: the producer's hot path.
        buf = self._encode_buffer()
        seq = self._seq + 1
        end, batch_id = envelope.line_into(
            buf,
            0,
            op,
            data,
            batch_id,
            producer=self.producer_id,
            seq=seq,
            fast=self._fast_codec,
            plain=plain,
            limit=self.max_record_bytes,
            new_id=self._new_id,
        )
        acks: list[Ack] = []
        with memoryview(buf) as view:  # the whole buffer: the line starts at 0 and ends it
            try:
                offset = self._write(view, seq)
                acks.append(Ack(Position(self._segment, offset), batch_id))
                self._sync_pending()
            except BaseException as exc:
                self._failed(exc, acks)
                raise
        if end > _KEEP_BUFFER_BYTES:
            self._buf = bytearray()
        self._ring()
        return acks[0]

    def append_many(
        self,
        ops: Sequence[tuple[str, dict[str, Any], str | None]],
        *,
        plain: Sequence[bool] | None = None,
    ) -> list[Ack]:
        """Append ``ops`` (``(op, data, batch_id or None)`` each, as for ``append``) in order,
        durable together: every record is written, then one ``fdatasync`` covers them all
        (one per segment when a rotation falls inside), and only then does this return their
        ``Ack``s, in order. ``plain``: ``append``'s flag per op.

        Every record is encoded and measured before any is written, so an op refused for its
        content (``InvalidOpError``, ``RecordTooLargeError``) appends nothing. An I/O failure
        after some records were written raises the ``SpoolError`` with ``acks``: the acks of
        the records made durable before it (a prefix of ``ops``, possibly empty); the rest
        are not acknowledged (a retry with the same batch ids applies each once).
        """
        flags = plain if plain is not None else (False,) * len(ops)
        if len(flags) != len(ops):
            raise InvalidOpError(f"{len(flags)} plain flags for {len(ops)} ops")
        # Every line is encoded into the handle's buffer, back to back, before any is written.
        buf = self._encode_buffer()
        spans: list[tuple[int, int, str]] = []
        end = 0
        for index, ((op, data, batch_id), is_plain) in enumerate(zip(ops, flags)):
            start = end
            end, batch_id = envelope.line_into(
                buf,
                start,
                op,
                data,
                batch_id,
                producer=self.producer_id,
                seq=self._seq + 1 + index,
                fast=self._fast_codec,
                plain=is_plain,
                limit=self.max_record_bytes,
                new_id=self._new_id,
            )
            spans.append((start, end, batch_id))
        acks: list[Ack] = []
        with memoryview(buf) as view:  # released on the way out, whatever happens
            try:
                for start, stop, batch_id in spans:
                    offset = self._write(view[start:stop], self._seq + 1)
                    acks.append(Ack(Position(self._segment, offset), batch_id))
                self._sync_pending()
            except BaseException as exc:
                self._failed(exc, acks)
                raise
        if end > _KEEP_BUFFER_BYTES:
            self._buf = bytearray()  # a huge record's buffer is not kept for the next
        self._ring()
        return acks

    def _failed(self, exc: BaseException, acks: list[Ack]) -> None:
        """After ``exc`` interrupted an append whose records so far got ``acks``: make the
        ones written before a failed write durable, set ``exc.acks`` (a ``SpoolError``) to
        the durable prefix, ring for it; the caller re-raises ``exc``."""
        if self._unsynced_end > 0:  # a write failed, not a sync: sync what came before
            try:
                self._sync_pending()
            except SpoolError:
                pass  # the failure the caller raises is the one to report
        durable = acks[: len(acks) - self._unsynced]
        self._unsynced = self._unsynced_end = 0  # never carried into another call's ack
        if isinstance(exc, SpoolError):
            exc.acks = durable
        if durable:
            self._ring()

    def _encode_buffer(self) -> bytearray:
        """The handle's encode buffer, reused by every append so that msgspec writes into its
        retained capacity (no allocation, no growth copies, pages already mapped). One a
        ``memoryview`` still holds (a traceback kept from a failed append can keep a slice
        alive) cannot be resized: a fresh buffer replaces it."""
        buf = self._buf
        try:
            buf.append(10)  # any resize of an exported bytearray raises BufferError
            del buf[-1]
        except BufferError:
            buf = self._buf = bytearray()
        return buf

    def _ring(self) -> None:
        """Durable now: wake the idle writer (a ring nobody hears costs only its poll
        interval; a failed one is kept in ``ring_error``, the ack stands)."""
        try:
            ring(self._doorbell)
        except OSError as exc:
            self.ring_error = exc

    def check_size(self, size: int) -> None:
        """Raise ``RecordTooLargeError`` when a line of ``size`` bytes exceeds the limit."""
        if size > self.max_record_bytes:
            raise RecordTooLargeError(size, self.max_record_bytes)

    def fits(self, op: str, data: dict[str, Any], batch_id: str | None = None) -> None:
        """Raise ``RecordTooLargeError`` when ``op``/``data`` would encode past the limit (the
        envelope measured at its largest): for callers that must refuse a multi-op request
        before appending any of it. Costs one encode of ``data``; raises ``InvalidOpError``
        for data that cannot be encoded."""
        envelope.line(
            op,
            data,
            batch_id,
            producer=self.producer_id,
            seq=2**63,
            fast=self._fast_codec,
            limit=self.max_record_bytes,
        )

    def close(self) -> None:
        """Close the cached descriptors. The handle may be used again afterwards."""
        if self._fd >= 0:
            os.close(self._fd)
        if self._sync_fd >= 0:
            os.close(self._sync_fd)
        self._fd, self._segment, self._sync_fd = -1, 0, -1

    def __enter__(self) -> Spool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals -----------------------------------------------------------------------

    def _seal_tail(self, fd: int, size: int) -> None:
        """Terminate a torn tail of the locked, full segment before its successor is created,
        and make the ``\n`` durable first: a sealed segment then always ends in ``\n``, so
        one that does not was cut short (``spool.integrity``), never merely torn. Its final
        size is recorded (``segments.record_seal``): one found shorter later was cut too."""
        try:
            if size > 0 and os.pread(fd, 1, size - 1) != b"\n":
                segment_io.write_all(fd, size, b"\n", self._os_error)
                size += 1
                os.fdatasync(fd)
            record_seal(self.dir, self._segment, size)
        except OSError as exc:
            raise self._os_error(exc) from exc

    def _write(self, line: bytes | memoryview, seq: int) -> int:
        while True:
            fd = self._active_fd()
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                # Only the newest, still linked segment may take a record. A later segment
                # means ours was sealed (rotation, ``spool.purge.seal``): only a terminating
                # "\n" may be written to it now. No link means it was deleted (spool GC, or a
                # purge renamed a rewrite over it): a record written there is acknowledged
                # and never read. The next segment is checked *before* the link: GC deletes
                # oldest first, so when N+1 is already gone N was unlinked before, and the
                # fstat after sees it (checked the other way round, both could pass in the
                # window between the two unlinks).
                sealed = os.access(self._next_path, os.F_OK)  # no exception when absent
                unlinked = False
                if not sealed:
                    st = os.fstat(fd)
                    unlinked = st.st_nlink == 0
                full = sealed or unlinked or st.st_size >= self.segment_bytes
                if not full:
                    offset = segment_io.write_locked(fd, st.st_size, line, self._os_error)
                    self._seq = seq  # consumed only by a line that was written
                elif not (sealed or unlinked):
                    self._seal_tail(fd, st.st_size)
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
            if full:
                # Records this handle wrote to the old segment are made durable before its
                # descriptor is given up (``append_many``: one sync per segment).
                self._sync_pending()
                self._rotate(unlinked=unlinked)
                continue
            self._unsynced += 1
            self._unsynced_end = offset + len(line)
            return offset

    def _sync_pending(self) -> None:
        """Make the records this handle wrote to its active segment since the last sync
        durable: one ``fdatasync`` (or a group commit's) covering bytes ``[0, end)``, which
        holds every one of them. Raises ``SpoolError``; the records stay pending then."""
        if not self._unsynced:
            return
        if self._fsync:
            try:
                if self._group:
                    self._group_sync(self._fd, self._unsynced_end)
                else:
                    os.fdatasync(self._fd)
            except OSError as exc:
                # Never retried: a second fdatasync after a failed one can report success for
                # pages the kernel already dropped. These records are not acknowledged.
                self._unsynced_end = -1
                raise self._os_error(exc) from exc
        self._unsynced = self._unsynced_end = 0

    def _os_error(self, exc: OSError) -> SpoolError:
        return segment_io.os_error(exc, self.dir / segment_name(self._segment))

    def _active_fd(self) -> int:
        if self._fd < 0:
            segments = list_segments(self.dir)
            self._open(segments[-1] if segments else 1, create=not segments)
        return self._fd

    def _rotate(self, *, unlinked: bool = False) -> None:
        """Move to the newest segment, creating the next one if ours is still the newest.

        ``unlinked``: our file was deleted with no later segment in sight. A file now under
        our number (re-created) is the newest segment and is opened; with none, the next
        number is created, never a lower one (the store's cursor may already be past it)."""
        newest = max(list_segments(self.dir), default=0)
        if newest > self._segment or (unlinked and newest == self._segment):
            self._open(newest, create=False)
        else:
            self._open(self._segment + 1, create=True)

    def _open(self, number: int, *, create: bool) -> None:
        self.close()
        path = self.dir / segment_name(number)
        flags = os.O_RDWR | os.O_APPEND | os.O_CLOEXEC
        try:
            if create:
                try:
                    fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, FILE_MODE)
                    os.chmod(path, FILE_MODE)  # O_CREAT's mode is filtered by the umask
                    fsync_dir(self.dir)
                except FileExistsError:
                    fd = os.open(path, flags)  # another producer created it first
            else:
                fd = os.open(path, flags)
        except OSError as exc:
            self._segment = number
            raise self._os_error(exc) from exc
        self._fd, self._segment = fd, number
        # The seal check's path (one stat per append), joined once per segment, not per append.
        self._next_path = os.fspath(self.dir / segment_name(number + 1))

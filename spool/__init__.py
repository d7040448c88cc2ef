"""Quill's durable spool: fsync'd, checksummed JSONL segments that producers append to and
the single writer drains. See ``docs/spool-format.md`` and DESIGN.md ("The spool")."""
from .errors import DamagedRecordError, InvalidOpError, SpoolError, SpoolFullError, WaitTimeoutError
from .producer import Ack, Spool
from .quarantine import Quarantine
from .reader import Entry, SpoolReader
from .record import OP_KINDS
from .segments import START, Position

__all__ = ["Ack", "DamagedRecordError", "Entry", "InvalidOpError", "OP_KINDS", "Position",
           "Quarantine", "START", "Spool", "SpoolError", "SpoolFullError", "SpoolReader",
           "WaitTimeoutError"]

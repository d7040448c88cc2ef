"""What an import of one file keeps, and how it opens each session
(``ops/transfer/import_spool.py`` has the whole procedure in its module doc).

* ``FileReport``: what importing one file did (the ``quill import`` report entry);
* ``SessionState``: one session's import state (the producer ids the store holds, the
  pending batch, its deletions) and its stable batch ids;
* ``SessionStarts``: a ``SessionStart`` event -> the session id settled (a legacy id when the
  store's session under it holds this conversation's opening), then ``session.create``, or
  only a changed title (``session.title``), or nothing for a session a pending delete will
  remove (imported whole again) or may remove (skipped and reported).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from quill.ops.importers import Problem, SessionStart
from quill.ops.transfer.ingest import stable_batch_id
from quill.ops.transfer.pending_deletes import PendingDeletes
from quill.spool import Spool
from quill.store.apply.deletes import DELETIONS_SEEN
from quill.store.apply.message_rows import cut_rows
from quill.store.apply.normalize import COMPARED_COLUMNS, ROW_COLUMNS
from quill.store.apply.sessions import clean_title
from quill.store.errors import InvalidOpError
from quill.store.read.reader import Reader

#: Opening messages compared at most when deciding on a legacy id (one bounded query).
LEGACY_COMPARED = 200


@dataclass
class SessionState:
    """Import state of one session (what the store holds, the pending batch)."""

    sid: str
    known: dict[str, str]
    has_live: bool
    counted: dict[str, dict[str, int]] = field(default_factory=dict)  # response id -> counts
    parent: str | None = None  # a delegate child's parent session
    pending: list[dict] = field(default_factory=list)
    pending_bytes: int = 0
    pending_rewound: list[str] = field(default_factory=list)
    deletions: int = 0  # times the store saw this session id deleted (``Reader.deletions``)
    versions: dict[str, list[tuple]] | None = None  # ``Reader.message_versions``, read lazily
    pending_revised: int = 0  # messages of ``pending`` that are later copies of held ones
    skipped: bool = False  # a conditional delete of it is pending: nothing of it is spooled

    def fenced(self, data: dict[str, Any]) -> dict[str, Any]:
        """``data`` (an op of this session) with ``deletions_seen``: the deletions of the
        session id this import decided on (``deletions``). A delete applied after the import
        looked makes the writer apply the op as nothing (``store.apply.deletes.stale``), so
        an import racing a prune or a purge brings back neither the session nor a revised
        message of it. Batch ids are derived without it (they already cover ``deletions``)."""
        return {**data, DELETIONS_SEEN: self.deletions}

    def batch_id(self, *parts: Any) -> str:
        """The stable batch id of an op of this session: over ``parts``, and over the number
        of deletions once there was one, so a session deleted and imported again gets batch
        ids its deleted batches do not hold (they stay in ``applied_batches``); an import
        racing another of the same store state still derives the same ids."""
        return (
            stable_batch_id(*parts, {"deletions": self.deletions})
            if self.deletions
            else stable_batch_id(*parts)
        )


@dataclass
class FileReport:
    """What importing one file did. ``messages``: messages read from the file (compaction
    summaries included); ``new``: messages spooled (those the store lacked, plus
    ``compacted_new``, the summary messages of compactions); ``stored``: messages the store
    already held, of which ``revised``: held in an older copy, spooled again (last copy wins,
    ``store.apply.revise``). ``messages`` = ``new`` + ``stored``."""

    path: str
    format: str | None
    sessions: list[str] = field(default_factory=list)
    messages: int = 0
    new: int = 0
    stored: int = 0
    revised: int = 0
    rewound: int = 0
    compactions: int = 0
    compacted_new: int = 0
    problems: list[Problem] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "format": self.format,
            "skipped": None if self.format else "format not recognised",
            "sessions": len(self.sessions),
            "session_ids": self.sessions,
            "messages": self.messages,
            "new": self.new,
            "already_stored": self.stored,
            "revised": self.revised,
            "rewound": self.rewound,
            "compactions": self.compactions,
            "new_from_compactions": self.compacted_new,
            "problems": [
                {"line": p.line, "kind": p.kind, "reason": p.reason} for p in self.problems
            ],
        }


#: Session fields a ``session.create`` fills when the stored session has them empty.
_FILLED = ("model", "cwd", "parent_id")


def _fills(row: dict[str, Any], payload: dict[str, Any]) -> bool:
    """Whether ``payload`` (a ``session.create``) would change the stored session ``row``: a
    field of ``_FILLED`` the row lacks, a ``meta`` key it lacks or holds otherwise (sent with
    ``revise``: the keys sent win), or an earlier start."""
    if any(payload.get(k) is not None and k in row and row[k] is None for k in _FILLED):
        return True
    held = row.get("meta") or {}
    if {**held, **(payload.get("meta") or {})} != held:
        return True
    new, old = payload.get("started_at"), row.get("started_at")
    return isinstance(new, (int, float)) and isinstance(old, (int, float)) and new < old


class SessionStarts:
    """The session side of one file's import: the sessions it opened (by id, and the legacy
    ids it settled on) and how a ``SessionStart`` opens one (module doc). A base class of the
    importer in ``import_spool.py``, which adds the message, compaction, rewind and usage
    events."""

    def __init__(
        self,
        spool: Spool,
        store: Reader | None,
        report: FileReport,
        pending: PendingDeletes | None = None,
    ):
        self.spool, self.store, self.report = spool, store, report
        self.pending = pending if pending is not None else PendingDeletes()
        self.sessions: dict[str, SessionState] = {}
        self.alias: dict[str, str] = {}  # event session id -> the id used (a legacy id)

    def session(self, event_sid: str) -> SessionState:
        """The import state of the session an event names."""
        return self.sessions[self.alias.get(event_sid, event_sid)]

    def _settle_id(self, ev: SessionStart) -> str:
        """``ev``'s legacy id when the store's session under it holds ``ev.opening``, else
        its own id (see module doc)."""
        sid = ev.session["session_id"]
        old = ev.legacy_id
        if not old or old == sid or not ev.opening or self.store is None:
            return sid
        if self.store.has_session(sid) or not self.store.has_session(old):
            return sid  # already stored under its own id (the common re-import), or no old session
        opening = ev.opening[:LEGACY_COMPARED]
        held = self.store.message_identities(old, [str(m["id"]) for m in opening])
        for m in opening:
            if set(m) == {"id"}:  # a globally unique producer id (a uuid): holding it is enough
                if str(m["id"]) not in held:
                    return sid
                continue
            try:  # as the writer stores it: binary payloads cut out as blob references
                row = cut_rows([m], time.time())[0][0]
            except InvalidOpError:
                return sid
            if held.get(str(m["id"])) != tuple(row[ROW_COLUMNS.index(c)] for c in COMPARED_COLUMNS):
                return sid
        return old

    def start(self, ev: SessionStart) -> None:
        sid = self._settle_id(ev)
        payload = {**ev.session, "revise": True}  # meta read again: its keys win
        if sid != payload["session_id"]:
            self.alias[payload["session_id"]] = sid
            payload = {**payload, "session_id": sid}
        if payload.get("parent_id") in self.alias:
            payload = {**payload, "parent_id": self.alias[payload["parent_id"]]}
        if sid in self.sessions:  # the same conversation again (identical content): stored once
            self.report.problems.append(
                Problem(
                    self.report.path,
                    payload.get("meta", {}).get("line"),
                    "skipped",
                    f"same conversation as an earlier one in this file ({sid}); stored once",
                )
            )
            return
        row = self.store.get_session(sid) if self.store else None
        parent = payload.get("parent_id") if payload.get("parent_kind") == "delegate" else None
        doomed = self._pending_delete(sid, row, parent)
        if isinstance(doomed, str):  # a conditional delete: only the writer knows its outcome
            self.sessions[sid] = SessionState(sid, {}, False, {}, parent, skipped=True)
            # its delegate children are skipped too
            self.pending.conditional.setdefault(sid, doomed)
            self.report.problems.append(
                Problem(
                    self.report.path,
                    None,
                    "skipped",
                    f"{sid} not imported: a conditional delete of it (reason {doomed!r}) is "
                    "still pending in the spool, and whether it applies is decided by the "
                    "writer; import this file again once the writer has applied it "
                    "(`quill run --until-idle`)",
                )
            )
            return
        self.report.sessions.append(sid)
        deletions = self.store.deletions(sid) if self.store else 0
        if doomed:  # as if the pending delete were applied: nothing of it is stored any more
            row, deletions = None, deletions + 1
            self.pending.certain.add(sid)  # its delegate children go with it
        held = self.store if row else None  # the store the row was read from, while it holds it
        known = held.message_states(sid) if held else {}
        s = self.sessions[sid] = SessionState(
            sid,
            known,
            any(s == "live" for s in known.values()),
            held.usage_responses(sid) if held else {},
            parent,
            deletions=deletions,
        )
        if row is None or _fills(row, payload):
            # a session read again once the agent wrote more (a model, a start time, a
            # parent) is created again: a create fills only what is still empty
            self.spool.append(
                "session.create", s.fenced(payload), batch_id=s.batch_id("create", payload)
            )
        if row is None or held is None:
            return
        title = clean_title(payload.get("title"))
        if not title or row.get("title") == title:
            return
        holder = held.title_holder(title)
        if holder is None:
            self.spool.append(
                "session.title",
                s.fenced({"session_id": sid, "title": title}),
                batch_id=s.batch_id("import-title", sid, title),
            )
        else:  # session.title would be refused (titles are unique): say so instead
            self.report.problems.append(
                Problem(
                    self.report.path,
                    None,
                    "skipped",
                    f"title {title!r} of {sid} not applied: session {holder} holds it",
                )
            )

    def _pending_delete(
        self, sid: str, row: dict[str, Any] | None, parent: str | None
    ) -> bool | str:
        """True when an unconditional delete pending in the spool will remove ``sid`` (named,
        or a delegate child of a session it removes that is neither pinned nor archived, as
        ``store.apply.deletes`` takes children); the delete's reason when only a conditional
        one names it (or its delegate parent); else False."""
        if row is not None and row.get("parent_kind") == "delegate" and row.get("parent_id"):
            parent = row["parent_id"]
        kept = row is not None and bool(row.get("pinned") or row.get("archived"))
        if sid in self.pending.certain or (parent in self.pending.certain and not kept):
            return True
        if sid in self.pending.conditional:
            return self.pending.conditional[sid]
        if parent in self.pending.conditional and not kept:
            return self.pending.conditional[parent]
        return False

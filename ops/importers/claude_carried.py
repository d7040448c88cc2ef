"""Claude Code messages carried inside bookkeeping record types, as message records.

Two record types that are otherwise bookkeeping carry transcript content:

* an ``attachment`` of type ``queued_command``: a prompt typed while the agent was working,
  handed to the model at the next step (``{"type": "attachment", "attachment": {"type":
  "queued_command", "prompt": str | blocks, "commandMode": "prompt" | "task-notification",
  "origin": {...}}, "uuid", "parentUuid", ...}``); it is in no ``user`` record. It becomes a
  ``user`` record with the attachment's uuid and place in the ``parentUuid`` tree;
* a ``progress`` record of ``data.type`` ``agent_progress``: one message of a subagent run
  (``data.message`` = ``{type: user|assistant, message, uuid, timestamp}``, ``data.agentId``,
  ``parentToolUseID`` = the Task call). Versions that also write
  ``<session>/subagents/agent-<id>.jsonl`` (or inline ``isSidechain`` records) carry the same
  run there; only runs found nowhere else are expanded: into sidechain records of that agent,
  chained in file order (a subagent run is linear), so they become the delegate child session
  every other subagent run becomes.

``expand(records, agents)`` wraps a record reader: it yields every record, followed by the
message record a carrier holds (``agents``: the agent ids whose ``agent_progress`` records to
expand). The carrier itself is still counted as its own type.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

#: Marks a message record made from a carrier (kept in the message's ``extra``).
CARRIED = "carried_by"
_COPIED = ("sessionId", "cwd", "gitBranch", "version", "userType", "slug")


def progress_agent(rec: Any) -> str | None:
    """The agent id of an ``agent_progress`` record that carries a message, else None."""
    data = rec.get("data") if isinstance(rec, dict) and rec.get("type") == "progress" else None
    if not isinstance(data, dict) or data.get("type") != "agent_progress":
        return None
    inner = data.get("message")
    agent = data.get("agentId")
    if not isinstance(inner, dict) or not isinstance(inner.get("message"), dict):
        return None
    return agent if isinstance(agent, str) and agent else None


def queued_prompt(rec: dict) -> dict | None:
    """The ``user`` record a ``queued_command`` attachment carries, or None."""
    att = rec.get("attachment")
    if not isinstance(att, dict) or att.get("type") != "queued_command":
        return None
    prompt = att.get("prompt")
    if not isinstance(prompt, (str, list)):
        return None
    out = {
        k: rec[k] for k in ("parentUuid", "uuid", "timestamp", "isSidechain", "agentId") if k in rec
    }
    out.update({k: rec[k] for k in _COPIED if k in rec})
    out.update(
        {
            "type": "user",
            "message": {"role": "user", "content": prompt},
            CARRIED: "attachment:queued_command",
        }
    )
    for key in ("commandMode", "origin"):
        if key in att:
            out[key] = att[key]
    return out


def expand(
    records: Iterable[tuple[int | None, Any]], agents: frozenset[str]
) -> Iterator[tuple[int | None, Any]]:
    """``records`` with the message record each carrier holds after it (see module doc)."""
    last: dict[str, str | None] = {}  # agent id -> uuid of its last carried message
    seen: set[str] = set()  # carried message uuids (a repeat is dropped: ids only, bounded)
    for line, rec in records:
        yield line, rec
        if not isinstance(rec, dict):
            continue
        if rec.get("type") == "attachment":
            carried = queued_prompt(rec)
            if carried is not None:
                yield line, carried
            continue
        agent = progress_agent(rec)
        if agent is None or agent not in agents:
            continue
        inner = rec["data"]["message"]
        uuid = inner.get("uuid")
        if not isinstance(uuid, str) or not uuid:
            uuid = f"{rec.get('uuid')}:message"
        if uuid in seen:
            continue
        seen.add(uuid)
        rtype = inner.get("type")
        if rtype not in ("user", "assistant"):
            rtype = inner["message"].get("role")
        if rtype not in ("user", "assistant"):
            continue
        out = {k: rec[k] for k in _COPIED if k in rec}
        out.update(
            {
                "type": rtype,
                "message": inner["message"],
                "uuid": uuid,
                "parentUuid": last.get(agent),
                "timestamp": inner.get("timestamp") or rec.get("timestamp"),
                "isSidechain": True,
                "agentId": agent,
                CARRIED: "progress:agent_progress",
                "progressUuid": rec.get("uuid"),
            }
        )
        if isinstance(rec.get("parentToolUseID"), str):
            out["parentToolUseID"] = rec["parentToolUseID"]
        last[agent] = uuid
        yield line, out

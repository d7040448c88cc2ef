"""OpenHands delegation: a sub-agent's run as a ``delegate`` child session.

Rules from OpenHands' controller (All-Hands-AI/OpenHands ``openhands/controller/
agent_controller.py``, ``start_delegate``/``end_delegate``; docs/importers.md says which
commit): an agent's ``AgentDelegateAction`` (``action: "delegate"``, ``args: {agent, inputs:
{task…}, thought}``) starts a delegate controller on the *same* event stream; the delegate's
events (a ``TASK: …`` user message, then its actions and observations, possibly delegating in
turn) follow in the stream until the parent emits ``AgentDelegateObservation``
(``observation: "delegate"``, ``extras.outputs``, the delegate action's
``tool_call_metadata``). So in an event list, the events strictly between a ``delegate``
action and the ``delegate`` observation that closes it (runs nest like brackets) are the
run's; the action and the observation stay in the parent. A parent's own trajectory
(``State.history``) holds the pair with nothing between: no child then. An unclosed run (the
trajectory ends inside it) keeps everything after its action.
"""

from __future__ import annotations

from typing import Any

from quill.ops.importers.jsonlines import member_object

#: The part of a delegate action kept in the child's meta.
_ARG_KEYS = ("agent", "inputs", "thought")


class Run:
    """One delegate run: the ``action`` that started it, its ``events`` (nested runs'
    events belong to those runs), the closing ``end`` observation (None when unclosed) and
    the ``parent`` run (None: the main agent)."""

    def __init__(self, action: dict, parent: Run | None):
        self.action, self.parent = action, parent
        self.events: list[dict] = []
        self.end: dict | None = None

    def session_suffix(self) -> str:
        return f":delegate:{self.action.get('id')}"

    def meta(self) -> dict[str, Any]:
        """``parent_tool_call_id`` (the delegate action's call, when it has one), the
        action's ``agent``/``inputs``/``thought`` and the closing ``outputs``."""
        args = member_object(self.action, "args")
        tcm = self.action.get("tool_call_metadata")
        meta: dict[str, Any] = {k: args[k] for k in _ARG_KEYS if args.get(k) not in (None, "")}
        meta["delegate_event"] = self.action.get("id")
        if isinstance(tcm, dict) and tcm.get("tool_call_id"):
            meta["parent_tool_call_id"] = str(tcm["tool_call_id"])
        extras = (self.end or {}).get("extras")
        if isinstance(extras, dict) and extras.get("outputs") is not None:
            meta["outputs"] = extras["outputs"]
        meta["closed"] = self.end is not None
        return meta


def split(events: list[Any]) -> tuple[list[dict], list[Run]]:
    """``(main events, runs)``: ``events`` (OpenHands events in stream order) with each
    delegate run's events moved to its ``Run`` (module doc); runs in the order they started."""
    main: list[dict] = []
    runs: list[Run] = []
    open_: list[Run] = []
    for ev in events:
        into = open_[-1].events if open_ else main
        kind = (ev.get("action"), ev.get("observation")) if isinstance(ev, dict) else (None, None)
        if kind[0] == "delegate":
            into.append(ev)
            run = Run(ev, open_[-1] if open_ else None)
            runs.append(run)
            open_.append(run)
        elif kind[1] == "delegate" and open_:
            run = open_.pop()
            run.end = ev
            (open_[-1].events if open_ else main).append(ev)
        else:
            into.append(ev)
    return main, runs

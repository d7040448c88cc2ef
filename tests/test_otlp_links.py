"""OTLP delegate links survive a restart of the server: the child agent span exported to one
process, its parent span to the next (a new ``DelegateLinks`` on the same data-dir file), still
make the child a ``delegate`` of the parent's session. Real Pydantic AI spans, a real SQLite
file."""

from __future__ import annotations

import stat

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from otlp_helpers import run_agent

from quill.home import OTLP_LINKS_DB
from quill.ops.service import otlp_map
from quill.ops.service.otlp_links import DelegateLinks


def _decoded(spans) -> list[otlp_map.Span]:
    out = otlp_map.spans_of(encode_spans(spans))
    for s in out:
        if s.genai:
            otlp_map.span_ops(s)
    return out


def _helper_and_parent(spans: list[otlp_map.Span]):
    helper = next(
        s
        for s in spans
        if s.operation == "invoke_agent" and s.attrs.get("gen_ai.agent.name") == "helper"
    )
    return helper, next(s for s in spans if s.span == helper.parent)


def test_a_parent_exported_after_a_restart_still_links_its_child(tmp_path):
    spans = _decoded(run_agent(["please delegate this"])[1])
    helper, parent = _helper_and_parent(spans)
    path = tmp_path / OTLP_LINKS_DB
    before = DelegateLinks(path)
    assert before.links([s for s in spans if s is not parent]) == []  # the parent not seen yet
    before.close()  # the server stops
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    after = DelegateLinks(path)  # the next server, same data dir
    [link] = after.links([parent])
    [(op, data, batch)] = link.ops
    assert op == "session.create" and data["session_id"] == helper.session_id
    assert data["parent_id"] == parent.session_id != helper.session_id
    assert data["parent_kind"] == "delegate"
    assert data["meta"] == {
        "agent": "helper",
        "parent_tool_call_id": parent.attrs["gen_ai.tool.call.id"],
    }
    # A retry of the parent's export offers the same op again (the same batch id: applied once).
    assert [g.ops for g in after.links([parent])] == [link.ops]
    # Exported the other way round (the parent first, then the child, across a restart).
    after.close()
    other = tmp_path / "other.db"
    DelegateLinks(other).links([parent])
    assert [g.ops for g in DelegateLinks(other).links([helper])] == [link.ops]


def test_the_file_is_bounded(tmp_path):
    spans = _decoded(run_agent(["what is x?", "and y?"])[1])
    links = DelegateLinks(tmp_path / OTLP_LINKS_DB, capacity=3)
    for s in spans:
        links.links([s])
    [[count]] = links.conn.execute("SELECT count(*) FROM spans").fetchall()
    assert len(spans) > 3 >= count

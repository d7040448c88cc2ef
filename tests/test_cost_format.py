"""Costs read the same in the CLI and on the dashboard, and a cost under a cent keeps its
significant digits (``$0.0045``, ``$0.000012``), never ``$0.0000``; ``--json`` keeps the
exact float."""

from __future__ import annotations

from quill.ops.cli import render
from quill.ops.human import usd


def test_tiny_costs_keep_their_significant_digits():
    assert usd(0.0000123) == "$0.000012"
    assert usd(0.0045) == "$0.0045"
    assert usd(0.00999) == "$0.01"
    assert usd(0.0001) == "$0.0001"
    assert usd(3.4e-7) == "$0.00000034"
    assert usd(12.345) == "$12.35" and usd(1234.5) == "$1,234.50"
    assert usd(0) == "$0" and usd(None) == "unpriced" and usd(-0.0045) == "-$0.0045"


def test_the_cli_and_the_dashboard_print_a_cost_alike():
    from quill.ops.service import formats

    usage = {"cost_usd": 0.0000123, "calls": 3, "unpriced": 1}
    assert render.cost(usage) == "$0.000012 + 1 unpriced"
    assert formats.usd is usd  # the dashboard's Jinja filter ``usd``

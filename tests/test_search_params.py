"""One definition of the search parameters (``ops.client.search.SearchParams``): the client's
two search methods take exactly them, ``quill search`` passes its options on by those names,
and ``GET /api/v1/search`` declares the same ones (``kind`` for ``kinds``)."""

from __future__ import annotations

import inspect
from dataclasses import fields

import pytest

from quill import Client
from quill.ops.cli.read import search as search_command
from quill.ops.client.search import PER_SESSION, SEARCH_PARAMS
from quill.ops.service.api_reads import SearchQuery


def test_the_client_methods_take_exactly_the_search_parameters():
    for method, per_session in ((Client.search, None), (Client.search_results, PER_SESSION)):
        sig = inspect.signature(method)
        assert tuple(sig.parameters)[2:] == SEARCH_PARAMS
        assert sig.parameters["per_session"].default == per_session


def test_an_unknown_search_parameter_is_a_type_error(tmp_path):
    client = Client(tmp_path / "home")
    with pytest.raises(TypeError, match="sesion_id"):
        client.search("x", sesion_id="s")
    with pytest.raises(TypeError, match="sesion_id"):
        client.search_results("x", sesion_id="s")


def test_the_cli_and_the_http_api_name_the_same_parameters():
    cli = {p.name for p in search_command.params} - {"query", "as_json"}
    assert cli == set(SEARCH_PARAMS) - {"context"}  # context: --json asks for it
    http = {f.name for f in fields(SearchQuery)} - {"kind"} | {"kinds"}
    assert http == set(SEARCH_PARAMS)
    assert set(SearchQuery().params()) == set(SEARCH_PARAMS)

"""The served spec describes what the server checks: message roles, finite time bounds, the
key/cwd choice. In process (ASGI) on a real temporary data dir."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from quill import home as data_dir
from quill.ops import logs
from quill.ops.service.app import create_app
from quill.ops.service.tokens import TokenStore
from quill.store.apply.normalize import ROLES


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    cfg = data_dir.load(tmp_path_factory.mktemp("spec"))
    cfg.ensure_dirs()
    secret, _row = TokenStore(cfg.tokens_db).create("spec", ["read"])
    app = create_app(cfg, logs.configure(None, "spec"), anonymous="none")
    with TestClient(
        app, base_url="http://127.0.0.1", headers={"Authorization": f"Bearer {secret}"}
    ) as client:
        yield client


def _param(spec, path, name):
    return next(p for p in spec["paths"][path]["get"]["parameters"] if p["name"] == name)


def _enum(schema):
    return next(s["enum"] for s in schema.get("anyOf", [schema]) if "enum" in s)


def test_roles_and_time_bounds_are_in_the_spec(api):
    spec = api.get("/openapi.json").json()
    assert sorted(_enum(_param(spec, "/api/v1/search", "role")["schema"])) == sorted(ROLES)
    for path in ("/api/v1/search", "/api/v1/sessions", "/api/v1/usage"):
        for bound in ("since", "until"):
            schema = _param(spec, path, bound)["schema"]
            number = next(s for s in schema.get("anyOf", [schema]) if s.get("type") == "number")
            assert "exclusiveMaximum" in number and "exclusiveMinimum" in number, (path, bound)
    item = spec["components"]["schemas"]["MessagesIn"]["properties"]["messages"]["items"]
    assert item["required"] == ["role"]
    assert sorted(item["properties"]["role"]["enum"]) == sorted(ROLES)
    for name in ("key", "cwd"):
        assert "exactly one" in _param(spec, "/api/v1/resume", name)["description"]


@pytest.mark.parametrize(
    "query",
    ["role=wizard", "since=inf", "until=nan", "since=1e300"],
)
def test_what_the_spec_refuses_the_server_refuses_with_a_shaped_422(api, query):
    r = api.get(f"/api/v1/search?q=x&{query}")
    assert r.status_code == 422, r.text
    assert r.json()["error"]["reason"] == "invalid-request"

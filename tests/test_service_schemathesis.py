"""Schemathesis against the served OpenAPI document: every operation, a bounded, seeded set
of generated requests, each response checked against the spec (status codes, content types,
body schemas, headers). The app runs in process (ASGI) on a real temporary data dir."""

from __future__ import annotations

import tempfile

import schemathesis
from hypothesis import HealthCheck, settings

from quill import home as data_dir
from quill.ops import logs
from quill.ops.service.app import create_app

_HOME = tempfile.mkdtemp(prefix="quill-schemathesis-")
_cfg = data_dir.load(_HOME)
_cfg.ensure_dirs()
APP = create_app(_cfg, logs.configure(None, "schemathesis"), anonymous="loopback")
schema = schemathesis.openapi.from_asgi("/openapi.json", APP)


@schema.parametrize()
@settings(
    max_examples=15,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_the_server_does_what_its_spec_says(case):
    case.call_and_validate()

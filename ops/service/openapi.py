"""Print the service's OpenAPI document:
``python -m quill.ops.service.openapi > docs/openapi.json``.

The checked-in ``docs/openapi.json`` must equal what ``/openapi.json`` serves (a test compares
them).
"""

from __future__ import annotations

import json
import tempfile

from quill import home as data_dir
from quill.ops import logs
from quill.ops.service.app import create_app


def document() -> dict:
    """The OpenAPI document of the app (independent of any data dir)."""
    with tempfile.TemporaryDirectory() as home:
        return create_app(data_dir.load(home), logs.configure(None, "openapi")).openapi()


if __name__ == "__main__":
    print(json.dumps(document(), indent=2, sort_keys=True))

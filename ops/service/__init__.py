"""Quill as a service: the HTTP API, ``/metrics`` and the web dashboard (``quill serve``).

``create_app(cfg, log)`` builds the ASGI app; ``server.serve`` runs it under uvicorn. See
``docs/operations.md`` for tokens, the anonymous-caller policy and alerts.
"""

from quill.ops.service.app import create_app

__all__ = ["create_app"]

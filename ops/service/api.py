"""The JSON API (``/api/v1``): the same operations as the CLI and ``quill.Client``.

``router`` gathers the routes in this order (Starlette matches the first route that fits, and
the OpenAPI document lists them so): the appends (``api_writes.py``), the reads through
``quill.Client`` (``api_reads.py``), then status and jobs (``api_jobs.py``). Every route
documents the shared error responses (``api_common.ERRORS``).
"""

from __future__ import annotations

from fastapi import APIRouter

from quill.ops.service import api_jobs, api_reads, api_writes
from quill.ops.service.api_common import ERRORS

router = APIRouter(prefix="/api/v1", responses=ERRORS)
for part in (api_writes, api_reads, api_jobs):
    router.include_router(part.router)

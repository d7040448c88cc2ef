"""What every ``/api/v1`` route shares: the error responses each documents (``ERRORS``), the
``{session_id:sid}`` path convertor, the ``quill.Client`` and read-only ``Reader`` request
dependencies, ``client_errors`` (``quill.Client``'s errors as shaped HTTP errors, also
used by the dashboard), and what every paged listing shares (``MAX_PAGE``, the
``X-Next-Cursor``/``Link`` headers: ``link_next``, ``NEXT_HEADERS``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Annotated, Literal

from fastapi import Query, Request, Response
from starlette.convertors import PathConvertor, register_url_convertor

from quill.ops.client.client import Client
from quill.ops.client.errors import (
    InvalidInputError,
    NotFoundError,
    OverloadedError,
    QuillError,
    StoreMissingError,
)
from quill.ops.client.errors import (
    SpoolFullError as QuillSpoolFull,
)
from quill.ops.client.stores import lost_store, open_reader
from quill.ops.service.errors import ERROR_SCHEMA, ApiError, overloaded
from quill.store.apply.normalize import ROLES
from quill.store.errors import CantOpenError, DescriptorsExhaustedError, StoreError
from quill.store.read.reader import Reader

#: A time bound of a read: finite epoch seconds, as ``Client`` takes them (others are refused).
EpochSeconds = Annotated[
    float | None,
    Query(allow_inf_nan=False, gt=-(2**63), lt=2**63, description="epoch seconds"),
]
#: A message role, as the store accepts them (``store.apply.normalize.ROLES``).
Role = Literal[tuple(sorted(ROLES))]  # type: ignore[valid-type]

ERRORS = {
    code: {"description": desc, "content": {"application/json": {"schema": ERROR_SCHEMA}}}
    for code, desc in (
        (401, "no or bad token"),
        (403, "token lacks the scope"),
        (422, "invalid request"),
        (429, "too many requests from this client (too-many-requests; see Retry-After)"),
        (503, "store, spool or job queue unavailable"),
    )
}


class _SessionIdConvertor(PathConvertor):
    """``{session_id:sid}``: any text, ``/`` and line breaks included. Starlette's ``path``
    convertor is ``.*``, which stops at a newline, so an id holding one would match no route (an
    undocumented 404) or, ending in one, would be cut to the text before
    it; the id rule (``session_id_problem``, 422) then judges the whole id."""

    regex = "(?s:.*)"


register_url_convertor("sid", _SessionIdConvertor())


@contextlib.contextmanager
def client_errors(what: str = "") -> Iterator[None]:
    """``quill.Client``'s public errors as shaped HTTP errors (details name no paths)."""
    try:
        yield
    except InvalidInputError as exc:
        raise ApiError(
            422, exc.reason if exc.reason != "usage" else "invalid-request", str(exc)
        ) from None
    except NotFoundError:
        raise ApiError(404, "not-found", f"no {what}" if what else "not found") from None
    except QuillSpoolFull:
        raise ApiError(
            507, "spool-full", "the spool's disk is full; retry later with the same batch ids"
        ) from None
    except OverloadedError:
        raise overloaded() from None
    except StoreMissingError as exc:  # as ``reader`` answers a lost store
        raise ApiError(503, "store-missing", f"{exc.message}; {exc.hint}") from None
    except QuillError as exc:  # busy, damaged or unreadable store
        raise ApiError(
            503, "store-unavailable", f"{type(exc).__name__}: {exc.default_hint}"
        ) from None


def reader(request: Request) -> Iterator[Reader | None]:
    """A read-only ``Reader`` for this request, or None before the store exists. A lost
    store (``stores.lost_store``) answers 503 ``store-missing``, never an empty listing."""
    try:
        r = open_reader(request.app.state.cfg)
    except CantOpenError:
        lost = lost_store(request.app.state.cfg)
        if lost is not None:
            raise ApiError(503, "store-missing", f"{lost.message}; {lost.hint}") from None
        yield None
        return
    except DescriptorsExhaustedError:
        raise overloaded("the store") from None
    except StoreError as exc:
        raise ApiError(
            503, "store-unavailable", f"the store cannot be opened ({type(exc).__name__})"
        ) from None
    try:
        yield r
    finally:
        r.close()


def client(request: Request) -> Client:
    return request.app.state.client


def link_next(request: Request, response: Response, cursor: str | None) -> None:
    """The ``X-Next-Cursor`` and ``Link: rel="next"`` headers of a page whose ``next`` is
    ``cursor`` (none on the last page)."""
    if cursor is not None:
        response.headers["X-Next-Cursor"] = cursor
        url = request.url.include_query_params(after=cursor)
        response.headers["Link"] = f'<{url.path}?{url.query}>; rel="next"'


#: Most rows of one page of any listing (``limit``'s maximum).
MAX_PAGE = 1000
NEXT_HEADERS = {
    200: {
        "headers": {
            "X-Next-Cursor": {
                "description": "present when there is a next page: pass it as `after`",
                "schema": {"type": "string"},
            },
            "Link": {
                "description": 'the next page as `<url>; rel="next"` (when there is one)',
                "schema": {"type": "string"},
            },
        }
    }
}

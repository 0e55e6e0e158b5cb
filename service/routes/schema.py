"""``GET /schema/jobspec``: the JSON Schema of a JobSpec, for editors and CI linters.

Open like ``/openapi.json`` and ``/docs``, which already publish the same schema as the
body of ``POST /jobs``: it describes the request format and holds no data, and a tool
that checks specs before submitting them should not need a token to learn their shape.
"""

from __future__ import annotations

import functools
import hashlib
import json
from typing import Any

from fastapi import APIRouter, Request, Response

from spillway.jobs.spec import JobSpec

DIALECT = "https://json-schema.org/draft/2020-12/schema"

router = APIRouter(prefix="/schema", tags=["schema"])


@functools.cache
def _document() -> tuple[bytes, str]:
    """The schema as bytes and its ETag; the model is fixed for the life of the process."""
    body = json.dumps({"$schema": DIALECT, **JobSpec.model_json_schema()}, sort_keys=True).encode()
    return body, '"' + hashlib.sha256(body).hexdigest()[:32] + '"'


@router.get(
    "/jobspec",
    response_model=dict[str, Any],
    response_description="The JSON Schema (draft 2020-12) of a JobSpec.",
    responses={304: {"description": "Not modified: the ETag sent in If-None-Match is current."}},
)
async def jobspec_schema(request: Request) -> Response:
    """The JSON Schema a job spec must satisfy (``JobSpec.model_json_schema()``).

    Whether the columns a spec names exist is checked against its sources on submit,
    which no schema can express. Cacheable: send the ETag back in ``If-None-Match``.
    """
    body, etag = _document()
    headers = {"ETag": etag, "Cache-Control": "public, max-age=3600"}
    if etag in (tag.strip() for tag in request.headers.get("if-none-match", "").split(",")):
        return Response(status_code=304, headers=headers)
    return Response(body, media_type="application/json", headers=headers)

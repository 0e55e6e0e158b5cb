"""``POST /specs:parse``: a spec's YAML or JSON text as JSON, read the way the CLI reads spec files.

The web page's submit form sends the text here (a browser has no YAML 1.2 parser, and the page
loads no libraries), then validates or submits the JSON it gets back through ``POST /jobs:validate``
and ``POST /jobs``, so its errors are those of the API. ``lines`` maps each field path to its line,
for the page to show an error's ``field`` beside the line that holds it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from pydantic import BaseModel, Field

from spillway.service.auth import Scope, require
from spillway.service.schemas import ErrorBody
from spillway.service.spec_text import SpecTextError, parse_spec_text

router = APIRouter(tags=["jobs"], dependencies=[require(Scope.READ)])

_YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml", "text/plain")
_BODY = {
    "required": True,
    "content": {
        "application/yaml": {"schema": {"type": "string"}, "example": "name: demo\nsource: {format: csv, path: data.csv}\nsink: {path: out}\n"},
        "application/json": {"schema": {"type": "string"}},
    },
}
_ERRORS = {
    401: {"model": ErrorBody, "description": "No bearer token, or an unknown one."},
    413: {"model": ErrorBody, "description": "The text is too large."},
    415: {"model": ErrorBody, "description": "Neither a YAML nor a JSON media type (`http_415`)."},
    422: {"model": ErrorBody, "description": "``invalid_document``: not YAML/JSON (the message starts ``line N, column M:``), or not a mapping."},
}


class ParsedSpec(BaseModel):
    """The mapping the text holds (not yet checked as a JobSpec) and the line of each field."""

    spec: dict[str, Any] = Field(description="The document as JSON, for POST /jobs:validate or POST /jobs.")
    lines: dict[str, int] = Field(description="1-based line of each field path, named as errors name fields: `steps[2].expr`.")


@router.post("/specs:parse", response_model=ParsedSpec, responses=_ERRORS, openapi_extra={"requestBody": _BODY})
async def parse_spec(request: Request) -> ParsedSpec:
    """Read a spec's text as YAML 1.2 (``Content-Type: application/yaml``) or JSON (``application/json``),
    as ``spillway submit`` reads a ``.yaml`` or ``.json`` file; nothing is checked against sources or stored."""
    media_type = request.headers.get("content-type", "application/yaml").split(";")[0].strip().lower()
    if media_type != "application/json" and media_type not in _YAML_TYPES:
        raise HTTPException(415, f"send the spec as application/yaml or application/json, not {media_type}")
    try:
        text = (await request.body()).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecTextError(f"the text is not UTF-8: {exc.reason} at byte {exc.start}") from exc
    parsed = await asyncio.to_thread(parse_spec_text, text, json_syntax=media_type == "application/json")
    return ParsedSpec(spec=parsed.data, lines=parsed.lines)

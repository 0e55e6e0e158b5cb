"""A JobSpec's validation errors in the API's words, shared by REST, the SDK and the CLI.

Kept free of FastAPI so the SDK and the CLI can word an invalid spec exactly as ``POST /jobs``
does without importing the server.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import Any

from spillway.jobs.spec import STEP_OPS
from spillway.jobs.status import ErrorDetail


def field_path(loc: Sequence[Any]) -> str:
    """``("body", "steps", 2, "filter", "expr")`` → ``steps[2].expr``."""
    parts: list[str] = []
    previous: Any = None
    for item in loc:
        if item == "body" and not parts:
            continue
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif isinstance(previous, int) and item in STEP_OPS:
            pass  # the discriminated union's tag, not a field
        else:
            parts.append(("." if parts else "") + str(item))
        previous = item
    return "".join(parts)


def unknown_step_message(field: str, tag: object) -> str:
    """The documented ``unknown_step`` message, with the closest step when one is near."""
    message = f"{field}: unknown step '{tag}'; known steps: {', '.join(STEP_OPS)}"
    close = difflib.get_close_matches(str(tag), STEP_OPS, n=1)
    return message + (f"; did you mean '{close[0]}'?" if close else "")


def error_detail(error: dict[str, Any]) -> ErrorDetail:
    """One pydantic error (an item of ``ValidationError.errors()``) as an :class:`ErrorDetail`.

    An unknown ``op`` is ``unknown_step`` on ``steps[i].op``; everything else is
    ``invalid_spec`` on the field pydantic names.
    """
    field = field_path(error.get("loc", ()))
    if error.get("type") == "union_tag_invalid":
        field = f"{field}.op"
        return ErrorDetail(code="unknown_step", message=unknown_step_message(field, (error.get("ctx") or {}).get("tag")), field=field)
    return ErrorDetail(code="invalid_spec", message=f"{field or 'body'}: {error.get('msg', 'invalid value')}", field=field or None)


def first_error_detail(errors: Sequence[dict[str, Any]]) -> ErrorDetail:
    """What ``POST /jobs`` answers for an invalid spec: the first problem, and how many more."""
    detail = error_detail(errors[0])
    if detail.code == "invalid_spec" and len(errors) > 1:
        more = len(errors) - 1
        detail = detail.model_copy(update={"message": f"{detail.message} (and {more} more problem{'s' if more > 1 else ''})"})
    return detail

"""Render a pipeline's JobSpec template for one data interval.

Every string in the template (paths, expressions, any value) may use Jinja:
``{{ ds }}``, ``{{ ds_nodash }}``, ``{{ logical_date }}``, ``{{ data_interval_start }}``,
``{{ data_interval_end }}`` and the pipeline's parameters, as ``{{ region }}`` or
``{{ params.region }}``. Rendering goes through a sandbox with strict undefined
names and no globals, and the variables are plain strings, so a template can reach
no Python object; an unknown name is an error, never an empty string.

Rendering is bounded, so a template cannot make saving a pipeline take seconds or memory
in hundreds of megabytes: a ``{% for %}`` inside another is refused (the loops' lengths
multiply), every value a template builds (``+`` and ``~``, a repeat, a ``{% set %}``, a
macro's output, a filter's or a method's result, the rendered string) is at most
:data:`MAX_RENDERED_CHARS` characters and no numeric argument to a filter or method may be
larger (``center(3e8)``), and a value renders within :data:`RENDER_BUDGET_S` seconds: the
sandbox (:mod:`service.pipelines.sandbox`) checks the deadline at every operation, so an
expensive template stops at its budget and frees its worker. Each refusal is a 422 naming
the field.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from datetime import datetime
from typing import Any

from jinja2 import TemplateSyntaxError, UndefinedError, nodes
from jinja2.sandbox import SecurityError
from pydantic import ValidationError

from spillway.jobs.spec import JobSpec
from spillway.service.errors import field_path
from spillway.service.pipelines.errors import TemplateError
from spillway.service.pipelines.sandbox import MAX_RENDERED_CHARS, RenderOverTime, deadline, make_environment

__all__ = ["MAX_RENDERED_CHARS", "RENDER_BUDGET_S", "ParamValue", "check_param_names", "interval_context", "render_spec"]

ParamValue = str | int | float | bool
BUILTIN_NAMES = frozenset({"ds", "ds_nodash", "logical_date", "data_interval_start", "data_interval_end", "params"})
#: Seconds one spec's rendering may take, all its values together, from when a worker starts it.
RENDER_BUDGET_S = 2.0
_RENDERER = ThreadPoolExecutor(max_workers=2, thread_name_prefix="spillway-template")
_ENV = make_environment()


def interval_context(start: datetime, end: datetime, tz: Any, params: Mapping[str, ParamValue]) -> dict[str, Any]:
    """The variables of one run: dates as strings in the pipeline's zone, and its parameters.

    ``ds`` is the date of the logical date (the start of the data interval), as in
    Airflow: the run that fires at 02:30 on the 2nd processes the 1st.
    """
    local_start, local_end = start.astimezone(tz), end.astimezone(tz)
    base: dict[str, Any] = {
        "ds": local_start.strftime("%Y-%m-%d"),
        "ds_nodash": local_start.strftime("%Y%m%d"),
        "logical_date": local_start.isoformat(),
        "data_interval_start": local_start.isoformat(),
        "data_interval_end": local_end.isoformat(),
    }
    rendered = {name: _render_param(name, value, base) for name, value in params.items()}
    return {**rendered, **base, "params": rendered}


def _render_param(name: str, value: ParamValue, base: Mapping[str, Any]) -> ParamValue:
    # Parameters may use the date variables (e.g. out: "s3://b/{{ ds }}"), not each other.
    if not isinstance(value, str):
        return value
    return _render_string(value, base, f"params.{name}")


def check_param_names(params: Mapping[str, Any]) -> None:
    """Parameter names must be identifiers that do not hide a built-in variable."""
    for name in params:
        if not name.isidentifier():
            raise TemplateError(f"parameter name '{name}' is not an identifier (letters, digits, _)", field=f"params.{name}")
        if name in BUILTIN_NAMES:
            raise TemplateError(f"parameter name '{name}' hides the built-in variable of that name; choose another", field=f"params.{name}")


def _render_string(text: str, context: Mapping[str, Any], field: str, until: float | None = None) -> str:
    if "{" not in text:  # most strings hold no template: skip compiling them
        return text
    if until is None:  # a parameter, rendered on its own: it gets a budget of its own
        until = time.monotonic() + RENDER_BUDGET_S
    try:
        return _render_bounded(text, context, field, until)
    except TemplateError:
        raise
    except RenderOverTime:
        raise TemplateError(f"{field}: rendering took more than {RENDER_BUDGET_S:g} s", field=field) from None
    except TemplateSyntaxError as exc:
        raise TemplateError(f"{field}: template syntax error on line {exc.lineno}: {exc.message}", field=field) from exc
    except UndefinedError as exc:
        known = ", ".join(sorted(k for k in context if k != "params"))
        raise TemplateError(f"{field}: {exc.message}; known variables: {known}", field=field) from exc
    except SecurityError as exc:
        raise TemplateError(f"{field}: not allowed in a template: {exc}", field=field) from exc
    except Exception as exc:  # noqa: BLE001 - e.g. 1/0 or a bad filter argument: the user's template, the user's error
        raise TemplateError(f"{field}: template failed: {type(exc).__name__}: {exc}", field=field) from exc


def _render_bounded(text: str, context: Mapping[str, Any], field: str, until: float) -> str:
    """Render ``text`` chunk by chunk, stopping at :data:`MAX_RENDERED_CHARS` or at ``until``.

    The sandbox checks ``until`` inside every operation too (raising RenderOverTime), so a
    single slow chunk (``{{ macro() }}``) stops as well.
    """
    tree = _ENV.parse(text)
    for loop in tree.find_all(nodes.For):
        if any(True for _ in loop.find_all(nodes.For)):
            raise TemplateError(f"{field}: a {{% for %}} inside another {{% for %}} is not allowed in a template (their lengths multiply)", field=field)
    with deadline(until):
        template = _ENV.from_string(tree)
        chunks: list[str] = []
        size = 0
        for chunk in template.generate(context):
            size += len(chunk)
            if size > MAX_RENDERED_CHARS:
                raise TemplateError(f"{field}: the template renders to more than {MAX_RENDERED_CHARS} characters", field=field)
            if time.monotonic() > until:
                raise RenderOverTime
            chunks.append(chunk)
    return "".join(chunks)


def _render_value(value: Any, context: Mapping[str, Any], loc: tuple[Any, ...], until: float) -> Any:
    if isinstance(value, str):
        return _render_string(value, context, field_path(loc), until)
    if isinstance(value, list):
        return [_render_value(item, context, (*loc, i), until) for i, item in enumerate(value)]
    if isinstance(value, dict):
        return {key: _render_value(item, context, (*loc, key), until) for key, item in value.items()}
    return value


def _render_from_now(template: Mapping[str, Any], context: Mapping[str, Any]) -> Any:
    # The budget starts when a worker picks the spec up: time queued behind others is not this template's.
    return _render_value(dict(template), context, ("spec",), time.monotonic() + RENDER_BUDGET_S)


def render_spec(template: Mapping[str, Any], context: Mapping[str, Any]) -> JobSpec:
    """Render every string of ``template`` and validate the result as a JobSpec.

    Raises
    ------
    TemplateError
        On a syntax error, an unknown variable, a render over its budget (nested loops, a
        value over :data:`MAX_RENDERED_CHARS`, over :data:`RENDER_BUDGET_S` seconds), or a
        rendered spec that is not a valid JobSpec; ``field`` is the templated value, e.g.
        ``spec.sink.path`` (``spec`` for the time budget).
    """
    # In a worker thread, so that the wait is bounded even by a single slow step inside Jinja (one
    # C call); the render stops itself at its deadline, inside the sandbox's operations, and so
    # frees the worker. The wait allows one budget queued behind another render, and one running.
    future = _RENDERER.submit(_render_from_now, template, context)
    try:
        rendered = future.result(timeout=max(2 * RENDER_BUDGET_S + 0.5, 0.0))
    except FutureTimeout:
        future.cancel()  # still queued: never start it; running: it stops at its own deadline
        raise TemplateError(f"spec: rendering the template took more than {RENDER_BUDGET_S:g} s", field="spec") from None
    try:
        return JobSpec.model_validate(rendered)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = field_path(("spec", *first["loc"]))
        more = f" (and {len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
        message = f"{field}: {first['msg']}{more}, rendered for ds={context.get('ds')}"
        raise TemplateError(message, field=field) from exc

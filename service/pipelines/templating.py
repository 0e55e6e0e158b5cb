"""Render a pipeline's JobSpec template for one data interval.

Every string in the template (paths, expressions, any value) may use Jinja:
``{{ ds }}``, ``{{ ds_nodash }}``, ``{{ logical_date }}``, ``{{ data_interval_start }}``,
``{{ data_interval_end }}`` and the pipeline's parameters, as ``{{ region }}`` or
``{{ params.region }}``. Rendering goes through a sandbox with strict undefined
names and no globals, and the variables are plain strings, so a template can reach
no Python object; an unknown name is an error, never an empty string.

Rendering is bounded, so a template cannot make saving a pipeline take seconds or memory
in hundreds of megabytes: a ``{% for %}`` inside another is refused (the loops' lengths
multiply), every value a template builds (a repeat, a filter's or a method's result, the
rendered string) is at most :data:`MAX_RENDERED_CHARS` characters and no numeric argument
to a filter or method may be larger (``center(3e8)``), and a spec renders in a worker thread
within :data:`RENDER_BUDGET_S` seconds. Each refusal is a 422 naming the field.
"""

from __future__ import annotations

import functools
import operator
import re
import string
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from datetime import datetime
from typing import Any

from jinja2 import StrictUndefined, TemplateSyntaxError, UndefinedError, nodes
from jinja2.sandbox import SandboxedEnvironment, SecurityError
from pydantic import ValidationError

from spillway.jobs.spec import JobSpec
from spillway.service.errors import field_path
from spillway.service.pipelines.errors import TemplateError

ParamValue = str | int | float | bool
BUILTIN_NAMES = frozenset({"ds", "ds_nodash", "logical_date", "data_interval_start", "data_interval_end", "params"})
_MAX_REPEAT = 10_000
_MAX_EXPONENT = 64
#: The longest string (or sequence) a template may build or render into, per value.
MAX_RENDERED_CHARS = 100_000
#: Seconds one spec's rendering may take, all its values together.
RENDER_BUDGET_S = 2.0
# Filters and str methods whose numeric argument is the size of what they build.
_SIZED = frozenset({"center", "indent", "wordwrap", "truncate", "batch", "slice", "ljust", "rjust", "zfill", "expandtabs"})
_RENDERER = ThreadPoolExecutor(max_workers=2, thread_name_prefix="spillway-template")


def _check_size(value: Any, what: str) -> Any:
    if isinstance(value, (str, list, tuple)) and len(value) > MAX_RENDERED_CHARS:
        raise SecurityError(f"{what} gives {len(value)} items, over {MAX_RENDERED_CHARS}")
    return value


def _check_numbers(args: tuple[Any, ...], kwargs: Mapping[str, Any], what: str) -> None:
    for value in (*args, *kwargs.values()):
        if isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) > MAX_RENDERED_CHARS:
            raise SecurityError(f"{what} was given {value}, over {MAX_RENDERED_CHARS}")


def _check_widths(pattern: Any, what: str, *, printf: bool = False) -> None:
    # A format string's widths ('{:>300000000}', '%300000000s') build their result at once.
    if isinstance(pattern, str):
        if printf:
            specs = re.findall(r"%[-+ #0]*(\d+)", pattern)
        else:
            try:
                specs = [spec or "" for _, _, spec, _ in string.Formatter().parse(pattern)]
            except ValueError:
                return  # str.format will refuse it itself
        widest = max((int(digits) for spec in specs for digits in re.findall(r"\d+", spec)), default=0)
        if widest > MAX_RENDERED_CHARS:
            raise SecurityError(f"{what} has a width of {widest}, over {MAX_RENDERED_CHARS}")


def _bounded_filter(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def bounded(*args: Any, **kwargs: Any) -> Any:
        if name in _SIZED:
            _check_numbers(args[1:], kwargs, f"the filter '{name}'")
        if name == "format" and args:
            _check_widths(args[0], "the format string", printf=True)
        return _check_size(function(*args, **kwargs), f"the filter '{name}'")

    return bounded


class _SpecTemplates(SandboxedEnvironment):
    """The sandbox, also refusing the two operators that can exhaust memory or CPU."""

    intercepted_binops = frozenset({"*", "**"})

    def call_binop(self, context: Any, operator_name: str, left: Any, right: Any) -> Any:
        if operator_name == "**":
            if isinstance(right, (int, float)) and abs(right) > _MAX_EXPONENT:
                raise SecurityError(f"exponent {right} is over {_MAX_EXPONENT}")
            return operator.pow(left, right)
        for seq, count in ((left, right), (right, left)):
            if isinstance(seq, (str, list, tuple)) and isinstance(count, int):
                if count > _MAX_REPEAT:
                    raise SecurityError(f"repeating a sequence {count} times is over {_MAX_REPEAT}")
                if len(seq) * count > MAX_RENDERED_CHARS:  # nested repeats: (ds * 10000) * 2000
                    raise SecurityError(f"repeating {len(seq)} items {count} times gives {len(seq) * count}, over {MAX_RENDERED_CHARS}")
        return operator.mul(left, right)

    def wrap_str_format(self, value: Any) -> Any:
        # str.format and format_map are wrapped where they are looked up: check their widths there.
        if getattr(value, "__name__", "") in ("format", "format_map"):
            _check_widths(getattr(value, "__self__", None), "the format string")
        return super().wrap_str_format(value)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805 - jinja's signature
        # Methods such as str.center, str.zfill, str.format('{:>300000000}') build their result at once.
        if getattr(__obj, "__name__", "") in _SIZED:
            _check_numbers(args, kwargs, f"'{__obj.__name__}'")
        return _check_size(super().call(__context, __obj, *args, **kwargs), "a call")


_ENV = _SpecTemplates(undefined=StrictUndefined, autoescape=False, keep_trailing_newline=True)
_ENV.globals.clear()  # no range(), dict(), lipsum(), ...: only the variables we pass
_ENV.filters = {name: _bounded_filter(name, function) for name, function in _ENV.filters.items()}


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


def _render_string(text: str, context: Mapping[str, Any], field: str, deadline: float | None = None) -> str:
    if "{" not in text:  # most strings hold no template: skip compiling them
        return text
    try:
        return _render_bounded(text, context, field, deadline)
    except TemplateError:
        raise
    except TemplateSyntaxError as exc:
        raise TemplateError(f"{field}: template syntax error on line {exc.lineno}: {exc.message}", field=field) from exc
    except UndefinedError as exc:
        known = ", ".join(sorted(k for k in context if k != "params"))
        raise TemplateError(f"{field}: {exc.message}; known variables: {known}", field=field) from exc
    except SecurityError as exc:
        raise TemplateError(f"{field}: not allowed in a template: {exc}", field=field) from exc
    except Exception as exc:  # noqa: BLE001 - e.g. 1/0 or a bad filter argument: the user's template, the user's error
        raise TemplateError(f"{field}: template failed: {type(exc).__name__}: {exc}", field=field) from exc


def _render_bounded(text: str, context: Mapping[str, Any], field: str, deadline: float | None) -> str:
    """Render ``text`` chunk by chunk, stopping at :data:`MAX_RENDERED_CHARS` or at ``deadline``."""
    tree = _ENV.parse(text)
    for loop in tree.find_all(nodes.For):
        if any(True for _ in loop.find_all(nodes.For)):
            raise TemplateError(f"{field}: a {{% for %}} inside another {{% for %}} is not allowed in a template (their lengths multiply)", field=field)
    template = _ENV.from_string(tree)
    chunks: list[str] = []
    size = 0
    for chunk in template.generate(context):
        size += len(chunk)
        if size > MAX_RENDERED_CHARS:
            raise TemplateError(f"{field}: the template renders to more than {MAX_RENDERED_CHARS} characters", field=field)
        if deadline is not None and time.monotonic() > deadline:
            raise TemplateError(f"{field}: rendering took more than {RENDER_BUDGET_S:g} s", field=field)
        chunks.append(chunk)
    return "".join(chunks)


def _render_value(value: Any, context: Mapping[str, Any], loc: tuple[Any, ...], deadline: float | None = None) -> Any:
    if isinstance(value, str):
        return _render_string(value, context, field_path(loc), deadline)
    if isinstance(value, list):
        return [_render_value(item, context, (*loc, i), deadline) for i, item in enumerate(value)]
    if isinstance(value, dict):
        return {key: _render_value(item, context, (*loc, key), deadline) for key, item in value.items()}
    return value


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
    # In a worker thread, so that the wait is bounded even by a single slow step inside Jinja;
    # the render also stops itself at the deadline, between its chunks.
    deadline = time.monotonic() + RENDER_BUDGET_S
    future = _RENDERER.submit(_render_value, dict(template), context, ("spec",), deadline)
    try:
        rendered = future.result(timeout=RENDER_BUDGET_S + 0.5)
    except FutureTimeout:
        raise TemplateError(f"spec: rendering the template took more than {RENDER_BUDGET_S:g} s", field="spec") from None
    try:
        return JobSpec.model_validate(rendered)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = field_path(("spec", *first["loc"]))
        more = f" (and {len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
        message = f"{field}: {first['msg']}{more}, rendered for ds={context.get('ds')}"
        raise TemplateError(message, field=field) from exc

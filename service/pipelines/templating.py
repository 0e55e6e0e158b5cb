"""Render a pipeline's JobSpec template for one data interval.

Every string in the template (paths, expressions, any value) may use Jinja:
``{{ ds }}``, ``{{ ds_nodash }}``, ``{{ logical_date }}``, ``{{ data_interval_start }}``,
``{{ data_interval_end }}`` and the pipeline's parameters, as ``{{ region }}`` or
``{{ params.region }}``. Rendering goes through a sandbox with strict undefined
names and no globals, and the variables are plain strings, so a template can reach
no Python object; an unknown name is an error, never an empty string.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from jinja2 import StrictUndefined, TemplateSyntaxError, UndefinedError
from jinja2.sandbox import SandboxedEnvironment, SecurityError
from pydantic import ValidationError

from jobs.spec import JobSpec
from service.errors import field_path
from service.pipelines.errors import TemplateError

ParamValue = str | int | float | bool
BUILTIN_NAMES = frozenset({"ds", "ds_nodash", "logical_date", "data_interval_start", "data_interval_end", "params"})
_MAX_REPEAT = 10_000
_MAX_EXPONENT = 64


class _SpecTemplates(SandboxedEnvironment):
    """The sandbox, also refusing the two operators that can exhaust memory or CPU."""

    intercepted_binops = frozenset({"*", "**"})

    def call_binop(self, context: Any, operator_name: str, left: Any, right: Any) -> Any:
        if operator_name == "**":
            if isinstance(right, (int, float)) and abs(right) > _MAX_EXPONENT:
                raise SecurityError(f"exponent {right} is over {_MAX_EXPONENT}")
            return operator.pow(left, right)
        for seq, count in ((left, right), (right, left)):
            if isinstance(seq, (str, list, tuple)) and isinstance(count, int) and count > _MAX_REPEAT:
                raise SecurityError(f"repeating a sequence {count} times is over {_MAX_REPEAT}")
        return operator.mul(left, right)


_ENV = _SpecTemplates(undefined=StrictUndefined, autoescape=False, keep_trailing_newline=True)
_ENV.globals.clear()  # no range(), dict(), lipsum(), ...: only the variables we pass


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


def _render_string(text: str, context: Mapping[str, Any], field: str) -> str:
    if "{" not in text:  # most strings hold no template: skip compiling them
        return text
    try:
        return _ENV.from_string(text).render(context)
    except TemplateSyntaxError as exc:
        raise TemplateError(f"{field}: template syntax error on line {exc.lineno}: {exc.message}", field=field) from exc
    except UndefinedError as exc:
        known = ", ".join(sorted(k for k in context if k != "params"))
        raise TemplateError(f"{field}: {exc.message}; known variables: {known}", field=field) from exc
    except SecurityError as exc:
        raise TemplateError(f"{field}: not allowed in a template: {exc}", field=field) from exc
    except Exception as exc:  # noqa: BLE001 - e.g. 1/0 or a bad filter argument: the user's template, the user's error
        raise TemplateError(f"{field}: template failed: {type(exc).__name__}: {exc}", field=field) from exc


def _render_value(value: Any, context: Mapping[str, Any], loc: tuple[Any, ...]) -> Any:
    if isinstance(value, str):
        return _render_string(value, context, field_path(loc))
    if isinstance(value, list):
        return [_render_value(item, context, (*loc, i)) for i, item in enumerate(value)]
    if isinstance(value, dict):
        return {key: _render_value(item, context, (*loc, key)) for key, item in value.items()}
    return value


def render_spec(template: Mapping[str, Any], context: Mapping[str, Any]) -> JobSpec:
    """Render every string of ``template`` and validate the result as a JobSpec.

    Raises
    ------
    TemplateError
        On a syntax error, an unknown variable, or a rendered spec that is not a
        valid JobSpec; ``field`` is the templated value, e.g. ``spec.sink.path``.
    """
    rendered = _render_value(dict(template), context, ("spec",))
    try:
        return JobSpec.model_validate(rendered)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = field_path(("spec", *first["loc"]))
        more = f" (and {len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
        message = f"{field}: {first['msg']}{more}, rendered for ds={context.get('ds')}"
        raise TemplateError(message, field=field) from exc

"""``spillway pipeline ...``: scheduled pipelines from the command line, only through the SDK.

The SDK loads inside the commands (see service/cli_common.py): importing ``service.pipelines``
brings its scheduler and SQLAlchemy along.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from enum import Enum
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer
from rich.markup import escape

from spillway.service.cli_common import DEFAULT_URL, UrlOption, console, fail, plural, unreachable

if TYPE_CHECKING:
    from spillway.service.pipelines.client import PipelineClient
    from spillway.service.pipelines.models import PipelineView, RunView

pipeline_app = typer.Typer(
    help="Scheduled pipelines: a job spec template run on a cron schedule. `spillway pipeline create FILE` to start.",
    no_args_is_help=True,
)

#: RunState's values, spelled out so that building the commands needs no pydantic.
RUN_STATES = ("QUEUED", "RUNNING", "UP_FOR_RETRY", "SUCCEEDED", "FAILED", "CANCELLED", "SKIPPED")
RunStateChoice = Enum("RunStateChoice", {state: state for state in RUN_STATES}, type=str)  # typer shows and parses the choices
ParamOption = Annotated[Optional[list[str]], typer.Option("--param", "-p", help="Override a parameter: NAME=VALUE (repeatable).")]  # noqa: UP007


def _fail(message: str, code: int = 1) -> typer.Exit:
    return fail(message, code)


@contextmanager
def _client(ctx: typer.Context, url: str) -> Iterator[PipelineClient]:
    import httpx

    from spillway.service.client import ApiError
    from spillway.service.pipelines.client import PipelineClient

    # The token may be given to `spillway --token` (the root command) or to this group.
    token = None
    context: Any = ctx
    while context is not None and token is None:
        token = context.params.get("token")
        context = context.parent
    with PipelineClient(url, token=token) as client:
        try:
            yield client
        except ApiError as exc:
            raise _fail(str(exc), 2 if exc.status == 422 else 1) from exc
        except httpx.HTTPError as exc:
            raise _fail(unreachable(exc, url)) from exc


@pipeline_app.callback()
def _options(
    token: Annotated[Optional[str], typer.Option("--token", envvar="SPILLWAY_TOKEN", help="Bearer token, when the service requires one.", show_default=False)] = None,  # noqa: UP007, ARG001 - read back through the click context
) -> None:
    """Scheduled pipelines."""


def load_pipeline(path: Path) -> dict[str, Any]:
    """Read a pipeline (name, spec, schedule, ...) from a YAML or JSON file."""
    from spillway.service.documents import DocumentError, read_mapping

    try:
        data = read_mapping(path, "name, spec, schedule")
    except DocumentError as exc:
        raise _fail(str(exc), 2) from exc
    if "name" not in data:
        raise _fail(f"{path} must hold a mapping with name, spec and schedule", 2)
    return data


def check_pipeline(path: Path, data: dict[str, Any], *, update: bool = False) -> Any:
    """``data`` as a PipelineCreate (a PipelineDefinition for ``update``), or a one-line error naming the field.

    Worded as ``spillway validate`` words an invalid job spec; exit code 2, as for a 422.
    """
    from pydantic import ValidationError

    from spillway.service.pipelines.models import PipelineCreate, PipelineDefinition
    from spillway.service.spec_errors import first_error_detail

    try:
        if update:  # the name says which pipeline; pausing is `pause`/`resume`
            return PipelineDefinition.model_validate({k: v for k, v in data.items() if k not in ("name", "paused")})
        return PipelineCreate.model_validate(data)
    except ValidationError as exc:
        detail = first_error_detail([dict(e) for e in exc.errors()])
        raise _fail(f"{path} is not a valid pipeline: {detail.message}", 2) from exc


def parse_params(pairs: list[str] | None) -> dict[str, str]:
    """``["region=north", "n=3"]`` → ``{"region": "north", "n": "3"}`` (values stay text)."""
    params: dict[str, str] = {}
    for pair in pairs or []:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise _fail(f"--param takes NAME=VALUE, not '{pair}'", 2)
        params[name.strip()] = value
    return params


def _when(value: datetime | None, zone: str = "UTC") -> str:
    """A time in the pipeline's zone, as its schedule reads (the API gives UTC)."""
    from zoneinfo import ZoneInfo

    return value.astimezone(ZoneInfo(zone)).isoformat(timespec="minutes") if value is not None else "-"


def _print_pipeline(p: PipelineView) -> None:
    state = "paused" if p.paused else "active"
    console.print(f"[bold]{p.name}[/] v{p.version} {state}  schedule={p.schedule!r} ({p.timezone})  next run {_when(p.next_run_at, p.timezone)}")
    console.print(
        f"catchup={p.catchup} max_active_runs={p.max_active_runs} retries={p.retries} backoff={p.retry_backoff_s:g}s params={json.dumps(p.params)}"
    )


def _act(ctx: typer.Context, url: str, action: Callable[[PipelineClient], PipelineView], verb: str) -> None:
    with _client(ctx, url) as client:
        pipeline = action(client)
    console.print(f"{verb} [bold]{pipeline.name}[/] (v{pipeline.version}); next run {_when(pipeline.next_run_at, pipeline.timezone)}")


@pipeline_app.command()
def create(ctx: typer.Context, pipeline_file: Annotated[Path, typer.Argument(help="Pipeline, YAML or JSON.")], url: UrlOption = DEFAULT_URL) -> None:
    """Create a pipeline. Its template is rendered for the next run first: errors show now, not at 2 a.m."""
    pipeline = check_pipeline(pipeline_file, load_pipeline(pipeline_file))
    _act(ctx, url, lambda c: c.create(pipeline), "created")


@pipeline_app.command()
def update(ctx: typer.Context, pipeline_file: Annotated[Path, typer.Argument(help="Pipeline, YAML or JSON; its name says which.")], url: UrlOption = DEFAULT_URL) -> None:
    """Replace a pipeline's definition: a new version (pausing is `pause`/`resume`)."""
    data = load_pipeline(pipeline_file)
    definition = check_pipeline(pipeline_file, data, update=True)
    _act(ctx, url, lambda c: c.update(data["name"], definition), "updated")


@pipeline_app.command("list")
def list_pipelines(ctx: typer.Context, url: UrlOption = DEFAULT_URL) -> None:
    """List pipelines."""
    with _client(ctx, url) as client:
        pipelines = client.list()
    from rich.table import Table

    table = Table(title=plural(len(pipelines), "pipeline"), title_justify="left")
    for column in ("name", "version", "schedule", "timezone", "state", "next run"):
        table.add_column(column)
    for p in pipelines:
        table.add_row(p.name, str(p.version), p.schedule, p.timezone, "paused" if p.paused else "active", _when(p.next_run_at, p.timezone))
    console.print(table)


@pipeline_app.command()
def show(ctx: typer.Context, name: str, url: UrlOption = DEFAULT_URL) -> None:
    """Show a pipeline: schedule, policies, parameters and its spec template."""
    with _client(ctx, url) as client:
        pipeline = client.get(name)
    import yaml

    _print_pipeline(pipeline)
    console.print(escape(yaml.safe_dump({"spec": pipeline.spec}, sort_keys=False)), end="")


@pipeline_app.command()
def pause(ctx: typer.Context, name: str, url: UrlOption = DEFAULT_URL) -> None:
    """Start no more runs of a pipeline."""
    _act(ctx, url, lambda c: c.pause(name), "paused")


@pipeline_app.command()
def resume(ctx: typer.Context, name: str, url: UrlOption = DEFAULT_URL) -> None:
    """Run a paused pipeline again from its next firing instant."""
    _act(ctx, url, lambda c: c.resume(name), "resumed")


@pipeline_app.command()
def delete(ctx: typer.Context, name: str, url: UrlOption = DEFAULT_URL) -> None:
    """Delete a pipeline and its run history (its jobs stay)."""
    with _client(ctx, url) as client:
        client.delete(name)
    console.print(f"deleted {name}")


@pipeline_app.command()
def trigger(
    ctx: typer.Context,
    name: str,
    date: Annotated[str, typer.Option("--date", help="Logical date, e.g. 2026-03-01 or 2026-03-01T02:30+01:00; no offset: the pipeline's zone.")],
    param: ParamOption = None,
    url: UrlOption = DEFAULT_URL,
) -> None:
    """Run a pipeline now for one logical date, optionally with other parameters."""
    with _client(ctx, url) as client:
        run = client.trigger(name, date, parse_params(param))
        zone = client.get(name).timezone
    console.print(f"queued run {run.id} of {name} for {_when(run.logical_date, zone)} (v{run.version})")


@pipeline_app.command()
def backfill(
    ctx: typer.Context,
    name: str,
    start: Annotated[str, typer.Option("--start", help="Earliest logical date (inclusive).")],
    end: Annotated[str, typer.Option("--end", help="Latest logical date (inclusive).")],
    param: ParamOption = None,
    url: UrlOption = DEFAULT_URL,
) -> None:
    """Queue runs for every interval starting in \\[start, end]; they run max_active_runs at a time."""
    with _client(ctx, url) as client:
        result = client.backfill(name, start, end, parse_params(param))
    console.print(f"queued {len(result.created)} runs; {len(result.existing)} dates already had one")
    if result.not_ended:
        console.print(f"{len(result.not_ended)} intervals have not ended yet; the schedule will run them")


@pipeline_app.command()
def runs(
    ctx: typer.Context,
    name: str,
    url: UrlOption = DEFAULT_URL,
    state: Annotated[
        Optional[RunStateChoice],  # noqa: UP007 - typer needs Optional
        typer.Option(case_sensitive=False, help="Only runs in this state.", show_default=False),
    ] = None,
    limit: Annotated[int, typer.Option(help="How many, newest logical date first.")] = 20,
) -> None:
    """A pipeline's run history: state, duration, attempts and where the result is."""
    from rich.table import Table

    from spillway.service.pipelines.models import RunState

    with _client(ctx, url) as client:
        zone = client.get(name).timezone
        page = client.runs(name, state=RunState(state.value) if state else None, limit=limit)
    table = Table(title=f"{plural(page.total, 'run')} of {name}", title_justify="left")
    for column in ("logical date", "state", "trigger", "version", "duration", "attempts", "result / reason"):
        table.add_column(column)
    for run in page.items:
        table.add_row(
            _when(run.logical_date, zone),
            run.state.value,
            run.trigger.value,
            str(run.version),
            f"{run.duration_s:.1f}s" if run.duration_s is not None else "",
            _attempts(run),
            run.result_location or run.reason or "",
        )
    console.print(table)


def _attempts(run: RunView) -> str:
    return ", ".join(f"{a.attempt}:{a.state}" + (f" ({a.job_id})" if a.job_id else "") for a in run.attempts)

"""``spillway``: run the service, submit and follow jobs. Talks to the service only through the SDK.

Only typer and rich load at start-up: the SDK (httpx, pydantic) loads in the commands that talk to
the service, FastAPI, SQLAlchemy and Dask only in ``serve``, ``demo``, ``token`` and ``db``.
"""

from __future__ import annotations

import logging
import re
import shutil
from pathlib import Path
from enum import Enum
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer
from rich.markup import escape

from spillway.service.cli_common import DEFAULT_URL, UrlOption, console, err, fail, plural, unreachable
from spillway.service.cli_db import db_app
from spillway.service.cli_delete import delete
from spillway.service.cli_pipelines import pipeline_app
from spillway.service.cli_tokens import token_app

if TYPE_CHECKING:
    from spillway.jobs.spec import JobSpec
    from spillway.jobs.status import ResultManifest
    from spillway.service.client import JobEvent, SpillwayClient
    from spillway.service.schemas import JobView
    from spillway.service.validation import ValidationReport

#: JobStatus' values, spelled out so that building the commands needs no pydantic.
JOB_STATES = ("PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED")
JobState = Enum("JobState", {state: state for state in JOB_STATES}, type=str)  # typer shows and parses the choices

app = typer.Typer(
    help=(
        "Spillway: ETL jobs on Dask (pandas on CPU, cuDF on GPUs).\n\n"
        "Start the service with `spillway serve`, then `spillway submit examples/revenue_by_region.yaml --wait`. "
        "`spillway demo` does both on generated sample data."
    ),
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

_token: str | None = None
# Case-insensitive, like Ray's and Prefect's CLIs: `--state running` is RUNNING.
_StateOption = Annotated[
    Optional[JobState],  # noqa: UP007 - typer needs Optional
    typer.Option("--state", case_sensitive=False, help="Only jobs in this state.", show_default=False),
]
SetOption = Annotated[
    Optional[list[str]],  # noqa: UP007
    typer.Option("--set", help="Override a spec field: KEY=VALUE, KEY dotted (sink.mode=overwrite), VALUE read as YAML (repeatable).", show_default=False),
]


def _print_version(asked: bool) -> None:
    if asked:
        from spillway import __version__

        console.print(f"spillway {__version__}", highlight=False)
        raise typer.Exit()


@app.callback()
def _global_options(
    token: Annotated[Optional[str], typer.Option("--token", envvar="SPILLWAY_TOKEN", help="Bearer token, when the service requires one.", show_default=False)] = None,  # noqa: UP007
    version: Annotated[bool, typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit.")] = False,
) -> None:
    global _token
    _token = token


def _client(url: str) -> SpillwayClient:
    from spillway.service.client import SpillwayClient

    return SpillwayClient(url, token=_token)


def _fail(message: str, code: int = 1) -> typer.Exit:
    return fail(message, code)


def apply_overrides(data: dict[str, Any], pairs: list[str] | None) -> dict[str, Any]:
    """``--set sink.mode=overwrite``: set a dotted key of the spec mapping; the value is read as YAML."""
    import yaml

    from spillway.service.documents import _Loader  # the CLI's one YAML 1.2 reading, for values too

    for pair in pairs or []:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise _fail(f"--set takes KEY=VALUE, not '{pair}'", 2)
        *parents, leaf = key.strip().split(".")
        node: Any = data
        for part in parents:
            child = node.get(part) if isinstance(node, dict) else None
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise _fail(f"--set {key}: '{part}' is not a mapping in the spec", 2)
            node = child
        try:
            node[leaf] = yaml.load(raw, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
        except yaml.YAMLError as exc:
            problem = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise _fail(f"--set {key}: the value '{raw}' is not YAML ({problem}); quote text that starts with [, {{ or a quote", 2) from None
    return data


def load_spec(path: Path, overrides: list[str] | None = None) -> JobSpec:
    """Read a JobSpec from a YAML or JSON file, with errors that name the file and the field,
    worded as the service words them (``unknown_step``, ``invalid_spec``)."""
    from pydantic import ValidationError

    from spillway.jobs.spec import JobSpec
    from spillway.service.client import SpecFileError, read_spec_file
    from spillway.service.spec_errors import error_detail

    try:
        data = apply_overrides(read_spec_file(path), overrides)
        return JobSpec.model_validate(data)
    except SpecFileError as exc:
        raise _fail(str(exc), 2) from exc
    except ValidationError as exc:
        lines = "\n".join(f"  {error_detail(dict(e)).message}" for e in exc.errors())
        raise _fail(f"{path} is not a valid job spec:\n{lines}", 2) from exc


def _print_manifest(manifest: ResultManifest) -> None:
    from rich.table import Table

    console.print(f"[bold]result:[/] {manifest.location}")
    table = Table()
    table.add_column("file")
    table.add_column("rows", justify="right")
    table.add_column("bytes", justify="right")
    for f in manifest.files:
        table.add_row(f.path, f"{f.rows:,}", f"{f.size_bytes:,}")
    table.add_section()
    table.add_row(plural(len(manifest.files), "file"), f"{manifest.total_rows:,}", f"{manifest.total_bytes:,}")
    console.print(table)
    console.print("schema: " + ", ".join(f"{c.name}: {shown_type(c.type)}" for c in manifest.columns))


_ARROW_LARGE = re.compile(r"\blarge_(string|binary|list)\b|\b(string)_view\b|\butf8\b")


def shown_type(arrow_type: str) -> str:
    """An Arrow type as a reader thinks of it: ``large_string`` and ``string_view`` (Polars' and
    tpchgen's offsets and layout) are ``string``; the manifest keeps the exact type."""
    return _ARROW_LARGE.sub(lambda m: m.group(1) or m.group(2) or "string", arrow_type)


def eta_text(seconds: float | None) -> str:
    """``about 40 s left``; empty when there is no estimate yet."""
    if seconds is None:
        return ""
    if seconds < 90:
        return f"about {max(1, round(seconds))} s left" if seconds > 0 else ""
    return f"about {round(seconds / 60)} min left"


def _print_job(job: JobView) -> None:
    console.print(f"[bold]{job.id}[/] {escape(job.name)}  state=[bold]{job.state.value}[/]  backend={job.backend}")
    if job.progress.engine is not None:
        engine = job.progress.engine
        console.print(f"engine: {engine.engine} on {engine.device} ({escape(engine.reason)})")
    for stage in job.progress.stages:
        console.print(f"  {escape(stage.name):<48} {stage.done:>6}/{stage.total}" + (f" {stage.unit}" if stage.unit else ""))
    if job.progress.stages:
        counted = " tasks" if job.progress.tasks_total is not None else " stages" if job.progress.counts_stages else ""
        eta = eta_text(job.progress.eta_s) if not job.state.is_terminal() else ""
        console.print(f"  {'overall':<48} {job.progress.done:>6}/{job.progress.total}{counted}" + (f"  {eta}" if eta else ""))
    if job.error:
        console.print(f"[red]error ({job.error.code}):[/] {escape(job.error.message)}")
    if job.links and job.links.dashboard:
        console.print(f"dashboard: {job.links.dashboard}")


def follow(client: SpillwayClient, job_id: str) -> JobView:
    """Show a live overall bar with an ETA, and a bar per stage, until the job ends; returns the final job.

    A cancelled or failed job's bars turn red, so they do not read as done.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

    from spillway.jobs.status import JobStatus

    bar = BarColumn()
    columns = (TextColumn("{task.description:<44}"), bar, MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("{task.fields[eta]}"))
    with Progress(*columns, console=console) as bars:
        overall = bars.add_task("overall", total=None, eta="")
        tasks: dict[str, TaskID] = {}

        def update(event: JobEvent) -> None:
            if event.state in (JobStatus.CANCELLED, JobStatus.FAILED):
                bar.complete_style = bar.finished_style = "red"
            progress = event.progress
            eta = "" if event.state.is_terminal() else eta_text(progress.eta_s)
            # A fused task counts once here, in each of its stages below; MiB and steps do not add up, so whole stages do.
            counted = " (tasks)" if progress.tasks_total is not None else " (stages)" if progress.counts_stages else ""
            bars.update(overall, description=f"overall{counted}", completed=progress.done, total=progress.total or None, eta=eta)
            for stage in event.progress.stages:
                if stage.name not in tasks:
                    label = escape(stage.name) + (f" ({stage.unit})" if stage.unit else "")  # a Polars read stage counts MiB
                    tasks[stage.name] = bars.add_task(label, total=stage.total, eta="")
                bars.update(tasks[stage.name], completed=stage.done, total=stage.total)

        return client.wait(job_id, on_event=update)


def _follow_to_end(client: SpillwayClient, job_id: str, url: str) -> None:
    """Follow a job to its end and print how it ended; Ctrl-C detaches and says how to come back."""
    try:
        job = follow(client, job_id)
    except KeyboardInterrupt:
        where = "" if url == DEFAULT_URL else f" --url {url}"
        err.print(
            f"\nstopped following {job_id}; the job keeps running on the service.\n"
            f"  reattach: spillway wait {job_id}{where}\n"
            f"  cancel:   spillway cancel {job_id}{where}"
        )
        raise typer.Exit(130) from None
    _finish(job)


def _finish(job: JobView) -> None:
    from spillway.jobs.status import JobStatus

    if job.state == JobStatus.SUCCEEDED and job.result is not None:
        _print_manifest(job.result)
        return
    _print_job(job)
    raise typer.Exit(1)


@app.command()
def submit(
    spec_file: Annotated[Path, typer.Argument(help="Job spec, YAML or JSON.", exists=False)],
    url: UrlOption = DEFAULT_URL,
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help="Follow progress and print the result manifest.")] = False,
    overrides: SetOption = None,
    idempotency_key: Annotated[str | None, typer.Option(
        "--idempotency-key", help="Sent again with the same key (after a timeout, say), the submit returns the job the first one made, "
        "never a second. Without it the client makes one per call, which covers its own retries only.",
    )] = None,
) -> None:
    """Submit a job spec. With --wait, show progress per stage and print where the result is."""
    from spillway.service.client import ApiError, BadArgument

    import uuid

    spec = load_spec(spec_file, overrides)
    key = idempotency_key if idempotency_key is not None else uuid.uuid4().hex  # made here, to be shown should the submit be cut short
    with _client(url) as client:
        try:
            accepted = client.submit(spec, idempotency_key=key)
        except (ApiError, BadArgument) as exc:  # BadArgument: a key that cannot be sent, named
            raise _fail(str(exc), 2) from exc
        except KeyboardInterrupt:
            where = "" if url == DEFAULT_URL else f" --url {url}"
            err.print(f"\nstopped before the service answered: the job may have been created all the same. Submit again with "
                      f"the same key to get that job and never a second one:\n  spillway submit {spec_file} --idempotency-key {key}{where}"
                      + (" (with the same --set options)" if overrides else ""))
            raise typer.Exit(130) from None
        except Exception as exc:  # noqa: BLE001 - connection problems, said plainly
            raise _fail(unreachable(exc, url, submitting=True)) from exc
        console.print(f"submitted [bold]{accepted.id}[/] ({spec.name})")
        if not wait:
            console.print(f"follow it: spillway wait {accepted.id}")
            return
        _follow_to_end(client, accepted.id, url)


@app.command("wait")
def wait_job(job_id: str, url: UrlOption = DEFAULT_URL) -> None:
    """Follow a job's live progress until it ends (reattach after Ctrl-C), then print its result."""
    from spillway.service.client import ApiError

    with _client(url) as client:
        try:
            _follow_to_end(client, job_id, url)
        except ApiError as exc:
            raise _fail(str(exc)) from exc


@app.command()
def status(job_id: str, url: UrlOption = DEFAULT_URL) -> None:
    """Show a job's state and progress per stage."""
    from spillway.service.client import ApiError

    with _client(url) as client:
        try:
            _print_job(client.get(job_id))
        except ApiError as exc:
            raise _fail(str(exc)) from exc


@app.command("list")
def list_jobs(
    url: UrlOption = DEFAULT_URL,
    state: _StateOption = None,
    limit: Annotated[int, typer.Option(help="How many, newest first.")] = 20,
) -> None:
    """List jobs, newest first."""
    from rich.table import Table

    from spillway.jobs.status import JobStatus

    with _client(url) as client:
        page = client.list(state=JobStatus(state.value) if state else None, limit=limit)
    table = Table(title=plural(page.total, "job"), title_justify="left")
    for column in ("id", "name", "state", "created", "duration", "progress"):
        table.add_column(column)
    for job in page.items:
        duration = f"{job.duration_s:.1f}s" if job.duration_s is not None else ""
        table.add_row(job.id, job.name, job.state.value, job.created_at.strftime("%Y-%m-%d %H:%M:%S"), duration, f"{job.progress.done}/{job.progress.total}")
    console.print(table)


@app.command()
def cancel(job_id: str, url: UrlOption = DEFAULT_URL) -> None:
    """Cancel a pending or running job; nothing it wrote is committed."""
    from spillway.service.client import ApiError

    with _client(url) as client:
        try:
            job = client.cancel(job_id)
        except ApiError as exc:
            raise _fail(str(exc)) from exc
    console.print(f"{job.id}: {job.state.value}")


@app.command()
def result(
    job_id: str,
    url: UrlOption = DEFAULT_URL,
    as_json: Annotated[bool, typer.Option("--json", help="Print the manifest as JSON.")] = False,
    head: Annotated[Optional[int], typer.Option("--head", min=1, help="Print the first N rows of the output, read through the manifest's files.", show_default=False)] = None,  # noqa: UP007
) -> None:
    """Print the result manifest of a finished job: files, rows, bytes and schema (or its first rows)."""
    from spillway.jobs.errors import SpillwayError
    from spillway.service.client import ApiError

    with _client(url) as client:
        try:
            manifest = client.result(job_id)
            rows = client.head(job_id, head) if head is not None else None
        except (ApiError, RuntimeError) as exc:
            raise _fail(str(exc)) from exc
        except SpillwayError as exc:  # a listed file replaced, a link in the sink, a file no reader takes: named, one line
            raise _fail(f"cannot show the result's rows: {exc.message}") from exc
        except OSError as exc:
            raise _fail(f"cannot read the result files from here: {exc}") from exc
    if rows is not None:
        _print_rows(rows, manifest.total_rows)
    elif as_json:
        console.print_json(manifest.model_dump_json())
    else:
        _print_manifest(manifest)


def _print_rows(rows: Any, total: int) -> None:
    from rich.table import Table

    table = Table(title=f"first {plural(rows.num_rows, 'row')} of {total:,}", title_justify="left")
    for name in rows.column_names:
        table.add_column(name)
    for record in rows.to_pylist():
        table.add_row(*("null" if v is None else escape(str(v)) for v in record.values()))
    console.print(table)


@app.command()
def logs(job_id: str, url: UrlOption = DEFAULT_URL) -> None:
    """Print a job's log: service events, the engine chosen, the worker traceback and warnings."""
    from spillway.service.client import ApiError

    with _client(url) as client:
        try:
            lines = client.logs(job_id)
        except ApiError as exc:
            raise _fail(str(exc)) from exc
    for line in lines:
        console.print(escape(line), highlight=False, soft_wrap=True)


def _check_file(spec_file: Path, url: str, overrides: list[str] | None) -> ValidationReport:
    from spillway.service.client import ApiError

    spec = load_spec(spec_file, overrides)
    with _client(url) as client:
        try:
            return client.validate(spec)
        except ApiError as exc:
            raise _fail(str(exc), 2) from exc


def _columns(columns: dict[str, str]) -> str:
    return ", ".join(f"{name}: {kind}" for name, kind in columns.items())


@app.command()
def validate(
    spec_file: Annotated[Path, typer.Argument(help="Job spec, YAML or JSON.")],
    url: UrlOption = DEFAULT_URL,
    overrides: SetOption = None,
) -> None:
    """Check a spec as `submit` would (its sources, columns, types, data roots, sink) and say which
    engine would run it and what it would write. Runs nothing."""
    report = _check_file(spec_file, url, overrides)
    console.print(f"[bold]{escape(report.name)}[/] is valid; nothing was run")
    for check in report.checks:
        console.print(f"  [green]ok[/] {escape(check)}")
    console.print(f"engine: {report.engine.engine} on the {report.engine.device} ({escape(report.engine.reason)})")
    console.print(f"output: {escape(_columns(report.columns))}")


@app.command()
def explain(
    spec_file: Annotated[Path, typer.Argument(help="Job spec, YAML or JSON.")],
    url: UrlOption = DEFAULT_URL,
    overrides: SetOption = None,
) -> None:
    """How a spec would run, after the checks of `validate`: the engine and why, what each source
    reads (files, bytes), and the columns after each step. Runs nothing."""
    report = _check_file(spec_file, url, overrides)
    console.print(f"[bold]{escape(report.name)}[/]: engine {report.engine.engine} on the {report.engine.device} ({escape(report.engine.reason)})")
    for source in report.inputs:
        console.print(f"  read  {source.field:<18} {escape(source.path)}: {plural(source.files, 'file')}, {source.bytes:,} bytes")
    for step in report.steps:
        console.print(f"  {step.field:<10} {step.op:<15} → {escape(_columns(step.columns))}")
    console.print(f"  write {escape(_columns(report.columns))}")


@app.command()
def serve(
    host: Annotated[Optional[str], typer.Option(help="Bind address (default from SPILLWAY_HOST, else 127.0.0.1).")] = None,  # noqa: UP007
    port: Annotated[Optional[int], typer.Option(help="Port (default from SPILLWAY_PORT, else 8000).")] = None,  # noqa: UP007
    scheduler_address: Annotated[Optional[str], typer.Option(help="Join an existing Dask scheduler instead of starting a local cluster.")] = None,  # noqa: UP007
) -> None:
    """Run the service (FastAPI under uvicorn) with its Dask cluster. Settings come from SPILLWAY_* variables."""
    import uvicorn
    from pydantic import ValidationError

    from spillway.service.app import create_app
    from spillway.service.config import Settings

    overrides: dict[str, Any] = {}
    if host is not None:
        overrides["host"] = host
    if port is not None:
        overrides["port"] = port
    if scheduler_address is not None:
        overrides["cluster"] = {"scheduler_address": scheduler_address}
    try:
        settings = Settings(**overrides)
    except ValidationError as exc:
        raise _fail(f"invalid settings:\n{exc}", 2) from exc
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level.lower(),
        log_config=_uvicorn_log_config(),
        loop=settings.server_loop,
        http=settings.server_http,
    )


def _uvicorn_log_config() -> dict[str, Any]:
    """uvicorn's own logging set-up, its access line formatted by :class:`service.http_metrics.AccessLine` (the same text)."""
    import copy

    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)  # uvicorn writes into the dict it is given
    config["formatters"]["access"]["()"] = "spillway.service.http_metrics.AccessLine"
    return config


def _absolute_sqlite(url: str) -> str:
    """``sqlite:///var/x.db`` → an absolute path, so a child started elsewhere finds the same file."""
    prefix = "sqlite:///"
    if url.startswith(prefix) and not url.startswith(prefix + "/"):
        return prefix + str(Path(url[len(prefix) :]).resolve())
    return url


@app.command()
def demo(
    rows: Annotated[int, typer.Option(help="Sample sales rows to generate.")] = 2_000_000,
    workdir: Annotated[Path, typer.Option(help="Where data and output go.")] = Path("var/demo"),
    spec_file: Annotated[Path, typer.Option("--spec", help="The pipeline to run.")] = Path("examples/revenue_by_region.yaml"),
    keep_serving: Annotated[bool, typer.Option(help="Leave the service running afterwards.")] = False,
) -> None:
    """Generate sample data, start the service with a local cluster and SQLite, run a pipeline, print the result.

    The job goes into the store `spillway serve` uses (SPILLWAY_DATABASE_URL), so it is listed there afterwards.
    """
    from spillway.jobs.samples import write_sample_data
    from spillway.service.config import Settings
    from spillway.service.launcher import launch_service

    spec = load_spec(spec_file)
    data = workdir / "data"
    if not (data / "sales").is_dir():
        console.print(f"generating {rows:,} sample sales rows in {data} …")
        write_sample_data(data, rows=rows)
    # The demo owns its output folder: each run writes the result anew.
    output = Path(spec.sink.path)
    if output.resolve().is_relative_to(workdir.resolve()) and output.exists():
        console.print(f"removing the previous demo output {output}")
        shutil.rmtree(output)
    console.print("starting the service with a local Dask cluster and a SQLite store …")
    try:
        server = launch_service(workdir, {"SPILLWAY_DATABASE_URL": _absolute_sqlite(Settings().database_url)})
    except RuntimeError as exc:
        raise _fail(str(exc)) from exc
    console.print(f"service: {server.url} (docs {server.url}/docs, log {server.log_path})")
    try:
        with server.client() as client:
            info = client.cluster()
            console.print(f"cluster: {info.kind}, {len(info.workers)} workers, backend {info.backend}, dashboard {info.dashboard_link}")
            accepted = client.submit(spec)
            console.print(f"submitted [bold]{accepted.id}[/] ({spec.name})")
            job = follow(client, accepted.id)
            _finish(job)
        if keep_serving:
            console.print(f"the service keeps running at {server.url} (pid {server.process.pid}); stop it with Ctrl-C")
            server.process.wait()
        else:
            console.print("next: `spillway serve`, then `spillway list` shows this job (README, \"Using it\")")
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


app.command("delete")(delete)
app.add_typer(pipeline_app, name="pipeline")
app.add_typer(token_app, name="token")
app.add_typer(db_app, name="db")


def main() -> None:
    """Console-script entry point: service errors print as one clear line, not a traceback."""
    try:
        app()
    except Exception as exc:
        # Imported only now: a command that raised one of these has loaded them already.
        import httpx

        from spillway.service.client import ApiError, BadArgument

        if isinstance(exc, (ApiError, BadArgument)):
            err.print(f"[bold red]error:[/] {escape(str(exc))}")
            raise SystemExit(1) from None
        if isinstance(exc, (httpx.TransportError, httpx.InvalidURL)):
            err.print(f"[bold red]error:[/] {escape(unreachable(exc, 'the service'))}")
            raise SystemExit(1) from None
        raise


if __name__ == "__main__":
    main()

"""``spillway``: run the service, submit and follow jobs. Talks to the service only through the SDK."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Annotated, Any, Optional

import httpx
import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from jobs.spec import JobSpec
from jobs.status import JobStatus, ResultManifest
from service.cli_pipelines import pipeline_app
from service.client import DEFAULT_URL, ApiError, JobEvent, SpillwayClient
from service.documents import DocumentError, read_mapping
from service.launcher import launch_service
from service.schemas import JobView

app = typer.Typer(
    help=(
        "Spillway: ETL jobs on Dask (pandas on CPU, cuDF on GPUs).\n\n"
        "Start the service with `spillway serve`, then `spillway submit examples/revenue_by_region.yaml --wait`. "
        "`spillway demo` does both on generated sample data."
    ),
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
console = Console()
err = Console(stderr=True)

UrlOption = Annotated[str, typer.Option("--url", envvar="SPILLWAY_URL", help="The Spillway service to talk to.")]
_token: str | None = None


@app.callback()
def _global_options(
    token: Annotated[Optional[str], typer.Option("--token", envvar="SPILLWAY_TOKEN", help="Bearer token, when the service requires one.", show_default=False)] = None,  # noqa: UP007
) -> None:
    global _token
    _token = token


def _client(url: str) -> SpillwayClient:
    return SpillwayClient(url, token=_token)


def _fail(message: str, code: int = 1) -> typer.Exit:
    err.print(f"[bold red]error:[/] {escape(message)}")
    return typer.Exit(code)


def load_spec(path: Path) -> JobSpec:
    """Read a JobSpec from a YAML or JSON file, with errors that name the file and the field."""
    try:
        data = read_mapping(path, "name, source, steps, sink")
    except DocumentError as exc:
        raise _fail(str(exc), 2) from exc
    try:
        return JobSpec.model_validate(data)
    except ValidationError as exc:
        from service.errors import field_path

        lines = [f"  {field_path(e['loc']) or '(top)'}: {e['msg']}" for e in exc.errors()]
        raise _fail(f"{path} is not a valid job spec:\n" + "\n".join(lines), 2) from exc


def _print_manifest(manifest: ResultManifest) -> None:
    console.print(f"[bold]result:[/] {manifest.location}")
    table = Table()
    table.add_column("file")
    table.add_column("rows", justify="right")
    table.add_column("bytes", justify="right")
    for f in manifest.files:
        table.add_row(f.path, f"{f.rows:,}", f"{f.size_bytes:,}")
    table.add_section()
    table.add_row(f"{len(manifest.files)} files", f"{manifest.total_rows:,}", f"{manifest.total_bytes:,}")
    console.print(table)
    console.print("schema: " + ", ".join(f"{c.name}: {c.type}" for c in manifest.columns))


def _print_job(job: JobView) -> None:
    console.print(f"[bold]{job.id}[/] {job.name}  state=[bold]{job.state.value}[/]  backend={job.backend}")
    for stage in job.progress.stages:
        console.print(f"  {stage.name:<48} {stage.done:>6}/{stage.total}")
    if job.error:
        console.print(f"[red]error ({job.error.code}):[/] {escape(job.error.message)}")
    if job.links and job.links.dashboard:
        console.print(f"dashboard: {job.links.dashboard}")


def follow(client: SpillwayClient, job_id: str) -> JobView:
    """Show a live progress bar per stage until the job ends; returns the final job."""
    with Progress(
        TextColumn("{task.description:<44}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
    ) as bars:
        tasks: dict[str, TaskID] = {}

        def update(event: JobEvent) -> None:
            for stage in event.progress.stages:
                if stage.name not in tasks:
                    tasks[stage.name] = bars.add_task(stage.name, total=stage.total)
                bars.update(tasks[stage.name], completed=stage.done, total=stage.total)

        return client.wait(job_id, on_event=update)


@app.command()
def submit(
    spec_file: Annotated[Path, typer.Argument(help="Job spec, YAML or JSON.", exists=False)],
    url: UrlOption = DEFAULT_URL,
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help="Follow progress and print the result manifest.")] = False,
) -> None:
    """Submit a job spec. With --wait, show progress per stage and print where the result is."""
    spec = load_spec(spec_file)
    with _client(url) as client:
        try:
            accepted = client.submit(spec)
        except ApiError as exc:
            raise _fail(str(exc), 2) from exc
        except Exception as exc:  # noqa: BLE001 - connection problems, said plainly
            raise _fail(f"cannot reach {url}: {exc}. Is `spillway serve` running?") from exc
        console.print(f"submitted [bold]{accepted.id}[/] ({spec.name})")
        if not wait:
            console.print(f"follow it: spillway status {accepted.id}")
            return
        job = follow(client, accepted.id)
        _finish(job)


def _finish(job: JobView) -> None:
    if job.state == JobStatus.SUCCEEDED and job.result is not None:
        _print_manifest(job.result)
        return
    _print_job(job)
    raise typer.Exit(1)


@app.command()
def status(job_id: str, url: UrlOption = DEFAULT_URL) -> None:
    """Show a job's state and progress per stage."""
    with _client(url) as client:
        try:
            _print_job(client.get(job_id))
        except ApiError as exc:
            raise _fail(str(exc)) from exc


@app.command("list")
def list_jobs(
    url: UrlOption = DEFAULT_URL,
    state: Annotated[Optional[JobStatus], typer.Option(help="Only jobs in this state.")] = None,  # noqa: UP007 - typer needs Optional
    limit: Annotated[int, typer.Option(help="How many, newest first.")] = 20,
) -> None:
    """List jobs, newest first."""
    with _client(url) as client:
        page = client.list(state=state, limit=limit)
    table = Table(title=f"{page.total} jobs", title_justify="left")
    for column in ("id", "name", "state", "created", "duration", "progress"):
        table.add_column(column)
    for job in page.items:
        duration = f"{job.duration_s:.1f}s" if job.duration_s is not None else ""
        table.add_row(job.id, job.name, job.state.value, job.created_at.strftime("%Y-%m-%d %H:%M:%S"), duration, f"{job.progress.done}/{job.progress.total}")
    console.print(table)


@app.command()
def cancel(job_id: str, url: UrlOption = DEFAULT_URL) -> None:
    """Cancel a pending or running job; nothing it wrote is committed."""
    with _client(url) as client:
        try:
            job = client.cancel(job_id)
        except ApiError as exc:
            raise _fail(str(exc)) from exc
    console.print(f"{job.id}: {job.state.value}")


@app.command()
def result(job_id: str, url: UrlOption = DEFAULT_URL, as_json: Annotated[bool, typer.Option("--json", help="Print the manifest as JSON.")] = False) -> None:
    """Print the result manifest of a finished job: files, rows, bytes and schema."""
    with _client(url) as client:
        try:
            manifest = client.result(job_id)
        except (ApiError, RuntimeError) as exc:
            raise _fail(str(exc)) from exc
    if as_json:
        console.print_json(manifest.model_dump_json())
    else:
        _print_manifest(manifest)


@app.command()
def serve(
    host: Annotated[Optional[str], typer.Option(help="Bind address (default from SPILLWAY_HOST, else 127.0.0.1).")] = None,  # noqa: UP007
    port: Annotated[Optional[int], typer.Option(help="Port (default from SPILLWAY_PORT, else 8000).")] = None,  # noqa: UP007
    scheduler_address: Annotated[Optional[str], typer.Option(help="Join an existing Dask scheduler instead of starting a local cluster.")] = None,  # noqa: UP007
) -> None:
    """Run the service (FastAPI under uvicorn) with its Dask cluster. Settings come from SPILLWAY_* variables."""
    import uvicorn

    from service.app import create_app
    from service.config import Settings

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
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level=settings.log_level.lower())


@app.command()
def demo(
    rows: Annotated[int, typer.Option(help="Sample sales rows to generate.")] = 2_000_000,
    workdir: Annotated[Path, typer.Option(help="Where data, store and output go.")] = Path("var/demo"),
    spec_file: Annotated[Path, typer.Option("--spec", help="The pipeline to run.")] = Path("examples/revenue_by_region.yaml"),
    keep_serving: Annotated[bool, typer.Option(help="Leave the service running afterwards.")] = False,
) -> None:
    """Generate sample data, start the service with a local cluster and SQLite, run a pipeline, print the result."""
    from jobs.samples import write_sample_data

    spec = load_spec(spec_file)
    data = workdir / "data"
    if not (data / "sales").is_dir():
        console.print(f"generating {rows:,} sample sales rows in {data} …")
        write_sample_data(data, rows=rows)
    # The demo owns its folder: each run starts from an empty store and no output.
    output = Path(spec.sink.path)
    if output.resolve().is_relative_to(workdir.resolve()) and output.exists():
        console.print(f"removing the previous demo output {output}")
        shutil.rmtree(output)
    for stale in workdir.glob("spillway.db*"):
        stale.unlink()
    console.print("starting the service with a local Dask cluster and a SQLite store …")
    try:
        server = launch_service(workdir, {"SPILLWAY_DATABASE_URL": f"sqlite:///{workdir / 'spillway.db'}"})
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
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


@app.command("token")
def token_create(
    action: Annotated[str, typer.Argument(help="Only 'create' for now.")],
    scope: Annotated[str, typer.Option(help="read, submit (includes read) or admin (everything).")] = "submit",
    name: Annotated[str, typer.Option(help="Who or what the token is for.")] = "cli",
) -> None:
    """Create an API token in the service's store (SPILLWAY_DATABASE_URL); it is printed once and stored hashed."""
    from service.auth import Scope, create_token
    from service.config import Settings
    from service.store import JobStore

    if action != "create":
        raise _fail(f"unknown token action '{action}'; use: spillway token create --scope submit", 2)
    try:
        chosen = Scope(scope)
    except ValueError as exc:
        raise _fail(f"--scope must be read, submit or admin, not '{scope}'", 2) from exc
    store = JobStore(Settings().database_url)
    try:
        token = create_token(store, name, chosen)
    finally:
        store.close()
    err.print(f"created a '{chosen.value}' token for {name}; it is shown only now:")
    print(token)


app.add_typer(pipeline_app, name="pipeline")


def main() -> None:
    """Console-script entry point: service errors print as one clear line, not a traceback."""
    try:
        app()
    except ApiError as exc:
        err.print(f"[bold red]error:[/] {escape(str(exc))}")
        raise SystemExit(1) from None
    except httpx.TransportError as exc:
        err.print(f"[bold red]error:[/] cannot reach the service: {escape(str(exc))}. Is `spillway serve` running (see --url)?")
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()

"""What the ``spillway`` command groups share, importing only typer and rich.

The CLI builds every command (and so reads these options) on each start, ``--help`` included;
the SDK, pydantic and httpx load only inside the commands that talk to the service, which keeps
start-up short (bench/cli_startup.py).
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from spillway.service.defaults import DEFAULT_URL as DEFAULT_URL  # re-exported for the command modules


UrlOption = Annotated[str, typer.Option("--url", envvar="SPILLWAY_URL", help="The Spillway service to talk to.")]

console = Console()
err = Console(stderr=True)


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print ``error: message`` on stderr; the caller raises the returned exit."""
    err.print(f"[bold red]error:[/] {escape(message)}")
    return typer.Exit(code)


def plural(count: int, noun: str) -> str:
    """``1 job``, ``2 jobs`` (nouns that take an s)."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def unreachable(exc: BaseException, url: str, *, submitting: bool = False) -> str:
    """What to tell the user when a request to ``url`` got no answer (an httpx transport error, passed untyped to keep httpx
    unloaded); ``submitting``: the request was a submit, which may have created its job all the same."""
    name = type(exc).__name__
    said = str(exc).rstrip(". ") or name
    if name in ("InvalidURL", "UnsupportedProtocol"):
        return f"{url} is not a service's URL ({said}); give one like http://127.0.0.1:8000 (--url or SPILLWAY_URL)"
    if name.endswith("Timeout") and name != "ConnectTimeout":  # ReadTimeout, WriteTimeout, PoolTimeout: the service is there
        if submitting:
            return (f"{url} did not answer the submit in time ({said}). It may be busy: a submit reads every source file's "
                    "footer. `spillway list` shows whether the job was created; a submit sent again with the same "
                    "--idempotency-key never makes a second one.")
        return f"{url} did not answer in time ({said}); it may be busy. Try again, or look at the service's log."
    if submitting and name in ("RemoteProtocolError", "ReadError", "WriteError"):
        return (f"{url} dropped the connection before answering the submit, three times ({said}). `spillway list` shows whether "
                "the job was created.")
    return f"cannot reach {url}: {said}. Is `spillway serve` running (see --url)?"

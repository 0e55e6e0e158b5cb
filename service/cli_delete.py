"""``spillway delete ID [--output]``: delete a finished job, only through the SDK.

Imports only typer and rich at start-up, like the other command modules (service/cli_common.py).
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from spillway.service.cli_common import DEFAULT_URL, UrlOption, console, fail, plural


def delete(
    ctx: typer.Context,
    job_id: str,
    url: UrlOption = DEFAULT_URL,
    output: Annotated[
        bool,
        typer.Option("--output", help="Also delete its committed output: the files its manifest lists, _manifest.json and _SUCCESS."),
    ] = False,
) -> None:
    """Delete a finished job's record and logs (cancel a pending or running one first).

    With --output, its committed files go too, unless a later job appended to or overwrote the same sink.
    """
    from spillway.service.client import ApiError, SpillwayClient

    # The --token option belongs to the root command (``spillway --token ... delete``).
    with SpillwayClient(url, token=ctx.find_root().params.get("token")) as client:
        try:
            deleted = client.delete(job_id, output=output)
        except ApiError as exc:
            raise fail(str(exc)) from exc
    console.print(f"{deleted.id}: deleted ({deleted.state.value})")
    if deleted.output is not None:
        if deleted.output.location:
            console.print(
                f"  output: {plural(deleted.output.files_deleted, 'file')}, {deleted.output.bytes_deleted:,} bytes removed from {escape(deleted.output.location)}",
                highlight=False,
                soft_wrap=True,
            )
        if deleted.output.note:
            console.print(f"  {escape(deleted.output.note)}", highlight=False, soft_wrap=True)

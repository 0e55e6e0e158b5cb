"""Questions to the workers' nannies, whose event loops are free while a query holds their workers' (a multi-GPU rank's).

A nanny runs beside each worker of a local cluster (and of ``dask worker``/``dask cuda worker``
by default) and knows its worker's process, directory and environment.
"""

from __future__ import annotations

import asyncio
from typing import Any

from distributed import Client

#: How long a question to the nannies may take (their event loops are free: milliseconds).
NANNY_TIMEOUT_S = 10.0


async def nanny_answers(client: Client, function: Any, workers: list[str], timeout_s: float = NANNY_TIMEOUT_S) -> dict[str, Any]:
    """``function`` run on the nannies of ``workers``: each worker's answer, by its address.

    ``function(dask_worker)`` runs on a nanny and returns ``(its worker's address, answer)``. A
    worker the scheduler no longer knows (restarting, gone), one without a nanny, and a nanny
    that fails or does not answer within ``timeout_s`` are left out: the caller's watch never hangs on one.
    """
    known = await asyncio.wait_for(client.run_on_scheduler(_known_with_nanny, workers=workers), timeout_s) if workers else []
    if not known:
        return {}
    try:
        answers = await asyncio.wait_for(client.run(function, workers=known, nanny=True, on_error="ignore"), timeout_s)
    except TimeoutError:
        return {}
    return {address: answer for address, answer in answers.values() if address in workers}


def _known_with_nanny(dask_scheduler: Any, workers: list[str]) -> list[str]:
    return [address for address in workers if (state := dask_scheduler.workers.get(address)) is not None and state.nanny]

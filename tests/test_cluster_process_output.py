"""The embedded cluster's workers may print as much as they like: the service keeps reading their stdout.

The workers inherit the cluster process's stdout, a pipe to the service. Read only up to the
handshake, it filled at 64 KiB and the next print blocked its worker for good (a multi-GPU
query stalled in cudf-polars' trace logging on the GPU machine).
"""

from __future__ import annotations

import os
import threading

from distributed import Client

from spillway.cluster.factory import LocalClusterProcess
from spillway.cluster.settings import ClusterSettings

#: Far more than a pipe holds (64 KiB on Linux).
PRINTED = 4 * 2**20


def test_workers_printing_megabytes_to_stdout_do_not_block() -> None:
    cluster = LocalClusterProcess(ClusterSettings(n_workers=1, threads_per_worker=1, dashboard_address=""), "pandas")
    cluster.start()
    try:
        with Client(cluster.scheduler_address, set_as_default=False) as client:
            outcome: dict[str, object] = {}

            def chatter() -> None:
                client.run(os.write, 1, b"\xff\xfe not UTF-8\n")  # bytes that are no text: read on, replaced
                client.run(print, "y" * PRINTED, end="", flush=True)  # megabytes without a line's end: logged in pieces
                for _ in range(2):  # twice: the pipe is read after the first megabytes too
                    outcome["printed"] = client.run(print, "x" * PRINTED, flush=True)

            caller = threading.Thread(target=chatter, daemon=True)
            caller.start()
            caller.join(60)
            assert not caller.is_alive(), "a worker's print blocked: the cluster's stdout pipe is not being read"
            assert list(outcome["printed"].values()) == [None]  # type: ignore[union-attr]
    finally:
        cluster.close()

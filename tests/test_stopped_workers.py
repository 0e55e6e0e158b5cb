"""A worker stopped by SIGSTOP is found through its nanny, whose event loop still answers.

A multi-GPU job's ranks send no heartbeat while their query runs, so the hung-worker check
spares them; their process state is what tells a stopped rank from a busy one
(cluster/hung_workers.py ``stopped_workers``). The service's use of it is in tests/test_gpu_multi.py.
"""

from __future__ import annotations

import asyncio
import os
import signal

from distributed import Client, LocalCluster

from spillway.cluster.hung_workers import stopped_workers


def test_a_stopped_worker_is_found_through_its_nanny_and_a_running_one_is_not() -> None:
    async def main() -> None:
        async with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None, asynchronous=True) as cluster, \
                Client(cluster, asynchronous=True) as client:
            pids = await client.run(os.getpid)
            workers = sorted(pids)
            assert await stopped_workers(client, workers) == []
            os.kill(pids[workers[0]], signal.SIGSTOP)
            try:
                for _ in range(50):  # the state changes as soon as the signal is delivered
                    found = await stopped_workers(client, workers)
                    if found:
                        break
                    await asyncio.sleep(0.1)
                assert found == [workers[0]]
                assert await stopped_workers(client, workers[1:]) == []  # only those asked about
                # A worker the scheduler no longer knows (restarting, gone) is left out, not an error for the others.
                assert await stopped_workers(client, [*workers, "tcp://127.0.0.1:1"]) == [workers[0]]
            finally:
                os.kill(pids[workers[0]], signal.SIGCONT)
            assert await stopped_workers(client, workers) == []
            assert await stopped_workers(client, []) == []

    asyncio.run(main())


def test_a_workers_nanny_reads_its_gpu_from_the_environment_it_starts_the_worker_with() -> None:
    """What a job across the GPU workers samples while its ranks hold their event loops (NVML only; none here)."""
    from spillway.cluster.gpu_stats import nanny_gpu_stats
    from spillway.cluster.nannies import nanny_answers

    async def main() -> dict[str, dict[str, object]]:
        async with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None, asynchronous=True,
                                env={"CUDA_VISIBLE_DEVICES": "3,0"}) as cluster, Client(cluster, asynchronous=True) as client:
            workers = sorted(await client.run(os.getpid))
            return await nanny_answers(client, nanny_gpu_stats, [*workers, "tcp://127.0.0.1:1"])

    answers = asyncio.run(main())
    assert len(answers) == 1  # the worker the scheduler does not know is left out
    (address, stats), = answers.items()
    assert address.startswith("tcp://") and stats["index"] == "3"  # the worker's first GPU, as its nanny starts it

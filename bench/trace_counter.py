"""What counting cudf-polars' trace events costs a rank: ``PlanNodeCounter.record`` per event, publishing or not.

A multi-GPU rank counts every trace event (one per chunk read or computed, one per node) and, at
most every 0.5 s, writes its counts to a file its nanny reads (jobs/gpu_trace_progress.py). This
times ``record`` alone, in process, without cudf-polars (its own logging call around it is not
counted)::

    .venv/bin/python bench/trace_counter.py --events 1000000
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spillway.jobs.gpu_trace_progress import COUNTS_FILE, PlanNodeCounter  # noqa: E402

EVENTS = ({"event": "Execute IR", "type": "Scan"}, {"event": "Read Chunk"}, {"event": "Streaming Actor"})


def per_event_ns(events: int, publish_to: Path | None) -> float:
    counter = PlanNodeCounter()
    counter.reset(publish_to=publish_to, query="bench")
    started = time.perf_counter_ns()
    for number in range(events):
        counter.record(EVENTS[number % 3])
    return (time.perf_counter_ns() - started) / events


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        results = {
            "machine": platform.node(), "python": platform.python_version(), "events": args.events,
            "counting_ns": [round(per_event_ns(args.events, None), 1) for _ in range(args.rounds)],
            "counting_and_publishing_ns": [round(per_event_ns(args.events, Path(folder) / COUNTS_FILE), 1) for _ in range(args.rounds)],
        }
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()

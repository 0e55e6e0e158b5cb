"""The job log: capped in size, worker lines only from the job's time window."""

from __future__ import annotations

from datetime import datetime, timedelta

from spillway.cluster.job_logs import MAX_LOG_BYTES, JobLog


def test_log_is_capped_and_says_so() -> None:
    log = JobLog()
    for _ in range(1000):
        log.add("x" * 1000)
    lines = log.to_list()
    assert sum(len(line) for line in lines[:-1]) <= MAX_LOG_BYTES
    assert lines[-1] == "… (log truncated)"


def test_worker_lines_inside_the_window_and_at_warning_or_above() -> None:
    start = datetime(2026, 11, 29, 12, 0, 0).astimezone()
    end = start + timedelta(seconds=10)
    fmt = "%Y-%m-%d %H:%M:%S,000"
    inside = (start + timedelta(seconds=5)).strftime(fmt)
    before = (start - timedelta(seconds=5)).strftime(fmt)
    logs = {
        "tcp://w1": [("WARNING", f"{inside} - distributed.worker - WARNING - slow"), ("INFO", f"{inside} - x - INFO - chatter")],
        "tcp://w2": [("ERROR", f"{before} - distributed.worker - ERROR - earlier job"), ("ERROR", "not a timestamp")],
    }
    log = JobLog()
    log.add_worker_lines(logs, start, end)
    assert log.to_list() == [f"[tcp://w1] {inside} - distributed.worker - WARNING - slow"]

"""The service process's garbage collector, set for many short requests on a large heap.

With the defaults (collect generation 0 every 700 net allocations) a process that imports
Dask, pandas, Polars and SQLAlchemy spent about a fifth of its time collecting under 100
concurrent status reads: the objects of requests in flight outlived two young collections,
were promoted, and each 67k of them (a quarter of the ~270k long-lived objects) set off a full
collection that walked every module, class and function imported at start-up again, about
every 2 s (bench/RESULTS.md, issue 16 item 14). After start-up :func:`tune_gc` moves what
exists then out of the collector's reach (:func:`gc.freeze`: those objects are never freed
anyway) and lets the young generation grow larger, so that a request's objects are freed by
their reference counts before a collection would promote them. Cycles are still collected.
"""

from __future__ import annotations

import gc
import logging

log = logging.getLogger("spillway")

#: Net allocations between young collections; CPython's default is 700.
YOUNG_THRESHOLD = 50_000


def tune_gc(young_threshold: int = YOUNG_THRESHOLD) -> None:
    """Freeze the objects that exist now and raise the young generation's threshold.

    Call once, after start-up has imported and built what the process keeps. The older
    generations' thresholds stay as they are.
    """
    gc.collect()  # what start-up left as garbage is freed, not frozen
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(young_threshold, middle, old)
    log.info("gc: %d objects frozen, young generation threshold %d", gc.get_freeze_count(), young_threshold)

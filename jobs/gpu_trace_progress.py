"""Live progress of a Polars job on the GPU, from cudf-polars' own traces.

With ``CUDF_POLARS_LOG_TRACES=1`` in a worker's environment (set before cudf-polars is
imported: the GPU cluster's workers inherit it, cluster/gpu.py), cudf-polars logs one
structlog event per plan node it evaluates (``Execute IR``, with the node's ``type``) and, on
the streaming executor, the query's plan first (``Query Plan``, on rank 0 only), one ``IO Task``
event per chunk a scan reads and one ``Streaming Actor`` event per node it streamed through
(seen on 26.10: bench/gpu_trace_probe.py, RESULTS.md; the file-scan names below read off its
``streaming/actor_graph`` modules). Those
events happen in the worker thread that runs the query, where the worker's event loop cannot
see them; :func:`install` routes them to one :class:`PlanNodeCounter` per worker process,
which the job's heartbeat (jobs/polars_run.py) reads twice a second. A job across the GPU
workers has no heartbeat (its ranks hold their workers' event loops): each rank writes its counts
to a file in its worker's directory instead, which the service reads through the worker's nanny.

What the counts mean: the optimized Polars plan's distinct nodes (:func:`plan_node_count`,
about one cudf-polars node each) and how many cudf-polars has evaluated so far; a scan's
node counts for its source. On the streaming executor a source's read counts chunks instead:
the plan rank 0 logs says how many chunks its scans read (a rank reads ``ceil(chunks / ranks)``
at most, rank 0 the most), and each ``IO Task`` event is one chunk read. Never 100 % before the
query ends.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import polars as pl

TRACES_ENV = "CUDF_POLARS_LOG_TRACES"
#: What cudf-polars 26.10 adds to each event unless told not to (read off its tracing module on an H200).
TRACES_MEMORY_ENV = "CUDF_POLARS_LOG_TRACES_MEMORY"
TRACES_FRAMES_ENV = "CUDF_POLARS_LOG_TRACES_DATAFRAMES"
#: What the GPU's stages count when traces are on.
NODE_UNIT = "plan nodes"
#: What a source's read counts on the streaming executor: chunks read by the slowest rank, out of rank 0's share.
CHUNK_UNIT = "chunks per rank"
#: cudf-polars' streaming scan of files: its actor's node, and the pieces whose reads are ``IO Task`` events.
STREAMING_SCAN = "StreamingScan"
IN_MEMORY_SCAN = "DataFrameScan"
#: Shown with such a job's progress.
TRACE_NOTE = (
    "cudf-polars runs all of a job's steps as one query on one GPU worker. The steps stage counts the nodes of the "
    "optimized query plan cudf-polars has evaluated so far (its trace events) out of the plan's nodes; each source's "
    "read shows 1 of 1 once every scan in the plan has run (on the streaming executor, with one source: the chunks read out of "
    "the plan's); the write completes with the query. elapsed_s counts the seconds so far."
)


def traces_enabled() -> bool:
    """Whether this process was started with cudf-polars' traces on."""
    return os.environ.get(TRACES_ENV, "0").lower() in {"1", "true", "y", "yes"}


@dataclass(frozen=True)
class NodeCounts:
    """Plan nodes cudf-polars has evaluated so far: all of them, and its scans."""

    nodes: int
    scans: int
    #: On the streaming executor: the nodes of the plan it logged, and the nodes streamed through.
    plan_nodes: int | None = None
    actors_done: int = 0
    #: Every cudf-polars event so far, counted or not (a chunk read, a node evaluated): the query is moving.
    events: int = 0
    #: On the streaming executor, from the plan (logged by rank 0): its file scans, and the chunks they read on this rank.
    plan_scans: int | None = None
    scan_chunks: int | None = None
    #: Chunks the file scans have read so far (``IO Task`` events), and the scans that have finished (their actors).
    chunks_read: int = 0
    scans_finished: int = 0


#: Where a multi-GPU rank publishes its counts, in its worker's local directory: the rank's query holds the
#: worker's event loop, so the service reads them through the worker's nanny (:func:`rank_trace_counts`).
COUNTS_FILE = "spillway-trace-counts.json"
#: How often a rank writes that file at most.
PUBLISH_EVERY_S = 0.5


class PlanNodeCounter:
    """Counts cudf-polars' trace events of the query running in this worker (one GPU query at a time)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._nodes = self._scans = self._actors = self._events = 0
        self._chunks_read = self._scans_finished = 0
        self._plan_nodes: int | None = None
        self._plan_scans: int | None = None
        self._scan_chunks: int | None = None
        self._publish_to: Path | None = None
        self._published_at = 0.0
        self._query: str | None = None

    def reset(self, publish_to: Path | None = None, query: str | None = None) -> None:
        """Start counting a new query; with ``publish_to``, also write the counts there (now, then every
        :data:`PUBLISH_EVERY_S` at most, from the query's own thread), marked with ``query`` (the job's
        id: a reader tells them from the counts of the query before)."""
        with self._lock:
            self._nodes = self._scans = self._actors = self._events = 0
            self._chunks_read = self._scans_finished = 0
            self._plan_nodes = self._plan_scans = self._scan_chunks = None
            self._publish_to, self._query = publish_to, query
            self._published_at = time.monotonic()
        if publish_to is not None:
            _write_counts(publish_to, self.counts(), query)

    def record(self, event: dict[str, Any]) -> None:
        """Count one structlog event of cudf-polars (others are ignored)."""
        name = event.get("event")
        with self._lock:
            self._events += 1
            if name == "Execute IR":
                self._nodes += 1
                self._scans += event.get("type") == "Scan"
            elif name == "IO Task":
                self._chunks_read += event.get("ir_type") != IN_MEMORY_SCAN
            elif name == "Streaming Actor":
                self._actors += 1
                # The actor's node type comes from structlog's context (cudf-polars binds it around each actor).
                self._scans_finished += event.get("actor_ir_type") == STREAMING_SCAN
            elif name == "Query Plan":
                self._plan_nodes, self._plan_scans, self._scan_chunks = _plan_figures(event.get("plan"))
            path, query, now = self._publish_to, self._query, time.monotonic()
            due = path is not None and now - self._published_at >= PUBLISH_EVERY_S
            if due:
                self._published_at = now
        if due and path is not None:
            _write_counts(path, self.counts(), query)

    def counts(self) -> NodeCounts:
        with self._lock:
            return NodeCounts(self._nodes, self._scans, self._plan_nodes, self._actors, self._events,
                              self._plan_scans, self._scan_chunks, self._chunks_read, self._scans_finished)


def _plan_figures(plan: Any) -> tuple[int | None, int | None, int | None]:
    """From the plan cudf-polars logs (``SerializablePlan`` as a dict): its nodes, its file scans and their chunks."""
    nodes = plan.get("nodes") if isinstance(plan, dict) else None
    if not isinstance(nodes, dict):
        return None, None, None
    scans = [node for node in nodes.values() if isinstance(node, dict) and node.get("type") == STREAMING_SCAN]
    counts = [(scan.get("properties") or {}).get("scan_count") for scan in scans]
    chunks = sum(counts) if all(isinstance(count, int) for count in counts) else None
    return len(nodes), len(scans), chunks


def _write_counts(path: Path, counts: NodeCounts, query: str | None) -> None:
    """Replace ``path`` with ``counts`` at once (a reader never sees half a file); a failed write is skipped.

    The partial file is this thread's own: two threads writing at once never share one."""
    partial = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    try:
        partial.write_text(json.dumps({**asdict(counts), "query": query}))
        os.replace(partial, path)
    except OSError:  # progress is a report: the query goes on
        with contextlib.suppress(OSError):
            partial.unlink()


def rank_trace_counts(dask_worker: Any) -> tuple[str | None, dict[str, Any] | None]:
    """On a nanny: its worker's address and the counts its rank last published, with their ``query`` (None: none, or unreadable)."""
    folder = dask_worker.worker_dir
    try:
        return dask_worker.worker_address, json.loads((Path(folder) / COUNTS_FILE).read_text()) if folder else None
    except (OSError, ValueError):
        return dask_worker.worker_address, None


def slowest_rank(readings: list[dict[str, Any]]) -> NodeCounts:
    """One count for a query across ranks: each figure at its lowest over the ranks (the query ends with the last),
    the events summed; the plan's figures from the rank that logged it (rank 0 only does)."""
    fields = NodeCounts.__dataclass_fields__
    counts = [NodeCounts(**{key: value for key, value in reading.items() if key in fields}) for reading in readings]
    plans = {(c.plan_nodes, c.plan_scans, c.scan_chunks) for c in counts if c.plan_nodes is not None}
    # Ranks that logged different plans: count nodes as the in-memory executor does.
    plan_nodes, plan_scans, scan_chunks = plans.pop() if len(plans) == 1 else (None, None, None)
    return NodeCounts(
        nodes=min(c.nodes for c in counts), scans=min(c.scans for c in counts), plan_nodes=plan_nodes,
        actors_done=min(c.actors_done for c in counts), events=sum(c.events for c in counts),
        plan_scans=plan_scans, scan_chunks=scan_chunks,
        chunks_read=min(c.chunks_read for c in counts), scans_finished=min(c.scans_finished for c in counts),
    )


COUNTER = PlanNodeCounter()
_installed = False
_install_lock = threading.Lock()


def install() -> bool:
    """Route cudf-polars' structlog events in this process to :data:`COUNTER`; whether traces are on.

    Idempotent. The events are counted and dropped: nothing is printed or kept per event.
    """
    global _installed
    if not traces_enabled():
        return False
    with _install_lock:
        if not _installed:
            import structlog

            def count(_logger: Any, _method: str, event: dict[str, Any]) -> dict[str, Any]:
                COUNTER.record(event)
                raise structlog.DropEvent

            # merge_contextvars: the actor's node type, which cudf-polars binds around each streaming actor.
            structlog.configure(processors=[structlog.contextvars.merge_contextvars, count], logger_factory=structlog.ReturnLoggerFactory(), cache_logger_on_first_use=True)
            _installed = True
    return True


def installed() -> bool:
    """Whether this process counts and drops cudf-polars' trace events (:func:`install` ran with traces on)."""
    return _installed


@dataclass(frozen=True)
class PlanShape:
    """The optimized plan's distinct nodes, and of those its scans (what the counts are out of)."""

    nodes: int
    scans: int


def plan_shape(frame: pl.LazyFrame) -> PlanShape:
    """Count the distinct nodes of ``frame``'s optimized plan (a node shared by two branches once, as it runs once)."""
    traverser = frame._ldf.visit()
    seen: set[int] = set()
    scans = 0
    pending = [traverser.get_node()]
    while pending:
        node = pending.pop()
        if node in seen:
            continue
        seen.add(node)
        traverser.set_node(node)
        scans += type(traverser.view_current_node()).__name__ == "Scan"
        pending.extend(traverser.get_inputs())
    return PlanShape(nodes=len(seen), scans=scans)


def stage_rows(plans: list[tuple[str, int | None]], shape: PlanShape, counts: NodeCounts, finished: bool) -> list[tuple[str, int, int, str | None]]:
    """Each stage's (name, done, total, unit) from the node counts.

    ``plans`` are the job's stages in order, each with its read total (None for a stage that is
    not a source's read). Read stages complete once every scan node has been evaluated (on the
    streaming executor: once every scan's actor has finished, and a job's only source counts
    its chunks read); the last non-write stage (the steps, or the last source's when there are
    none) counts the plan's nodes; the write completes with the query. Nothing shows done
    before the end.
    """
    streaming = counts.plan_scans is not None and counts.plan_scans > 0
    if streaming:
        reads_done = finished or counts.scans_finished >= (counts.plan_scans or 0)
    else:
        reads_done = finished or (shape.scans > 0 and counts.scans >= shape.scans)
    read_stages = sum(read_total is not None for _, read_total in plans)
    # Chunks only where they are the source's own: one read stage and one file scan in the plan.
    chunks = counts.scan_chunks if counts.plan_scans == 1 and read_stages == 1 and counts.scan_chunks else None
    rows: list[tuple[str, int, int, str | None]] = []
    compute = _compute_stage(plans)
    for index, (name, read_total) in enumerate(plans):
        if read_total is not None and chunks is not None:
            # The slowest rank's chunks against rank 0's share, the largest: full only once every scan has finished.
            rows.append((name, chunks if reads_done else min(counts.chunks_read, chunks - 1), chunks, CHUNK_UNIT))
        elif index == compute:
            total = max(counts.plan_nodes or shape.nodes, 1)
            done = counts.actors_done if counts.plan_nodes else counts.nodes
            rows.append((name, total if finished else min(done, total - 1), total, NODE_UNIT))
        elif finished:
            rows.append((name, 1, 1, None))
        elif read_total is not None:
            rows.append((name, int(reads_done), 1, None))
        else:
            rows.append((name, 0, 1, None))
    return rows


def _compute_stage(plans: list[tuple[str, int | None]]) -> int:
    """The stage that counts the plan's nodes: the last before the write (the write is always last)."""
    return max(len(plans) - 2, 0)


__all__ = ["CHUNK_UNIT", "COUNTER", "COUNTS_FILE", "NODE_UNIT", "TRACES_ENV", "TRACES_FRAMES_ENV", "TRACES_MEMORY_ENV", "TRACE_NOTE", "NodeCounts", "PlanNodeCounter", "PlanShape", "install", "installed", "plan_shape", "rank_trace_counts", "slowest_rank", "stage_rows", "traces_enabled"]

"""The spec's sources, steps and sink as the stages of a Dask-engine graph.

Dask's optimizer renames, splits and fuses the expressions a job builds (a groupby step
becomes ``decomposablegroupbyaggregation-tree`` tasks, a read fuses with the filter after
it), and it ignores ``dask.annotate`` under query planning. So the stages are traced
through the optimizer instead: while a job's frame is built, every expression a source or
a step adds is labelled with that stage (:class:`LabelledFrames`; a run of assign steps,
built as one assign by jobs/assign_run.py, with all of its steps); while the optimizer runs,
an expression it creates from a labelled one takes that one's label, and a fused expression
takes the labels of all it fuses (:func:`recording`: dask-expr's rewrite entry points,
``simplify_once``, ``rewrite``, ``lower_once`` and ``_substitute``, are wrapped once per
process and record only in the thread planning a job; dask's own logic is untouched).

A task then counts towards every stage whose work it does: a task that reads a file, filters
it and starts a groupby counts for ``read source``, ``steps[0] filter`` and ``steps[1]
groupby``. A step the optimizer folds away lives on in what replaced it: a sort under a limit
becomes a top-k, whose tasks count for both; a select pushed into the read counts the read's
tasks (only where the step has no task of its own). Tasks nothing labelled (the CSV writer's
delayed writes) are the sink's.
tests/test_progress_names.py checks this on the 22 TPC-H graphs, so a dask upgrade that
changes the optimizer's entry points shows there.
"""

from __future__ import annotations

import functools
import itertools
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import dask.dataframe as dd
from dask._expr import Expr
from dask.base import tokenize
from dask.dataframe.dask_expr._expr import Fused
from dask.typing import Key

from spillway.jobs.logical import LogicalPlan
from spillway.jobs.pipeline import NamedFrames
from spillway.jobs.read_progress import read_stage_name
from spillway.jobs.spec import JobSpec, SourceSpec, Step

#: What the stage counts mean, shown with a Dask-engine job's progress.
DASK_NOTE = (
    "Each stage counts the partitions (tasks) doing that source's, step's or sink's work. Dask fuses "
    "consecutive steps into one task, which then counts in each of their stages, and once in the overall "
    "count; a step Dask folds into another (a sort into the limit after it, a select into the read) counts "
    "the tasks of the one it was folded into. The estimate of the time left assumes the tasks left take as "
    "long as those done."
)

_NEAR = 64  # expressions searched for one of the same kind as a rebuilt one
_FOLD_NEAR = 8  # expressions just below a rewritten one where a folded step's would sit
_MERGED = "\0"  # marks a stage that vanished into an expression, rather than one folded into new work

_recorder = threading.local()  # the labels of the graph this thread is planning, if any


class StageLabels:
    """The stage of each expression (by name) of one job's graph, in the order stages appear."""

    def __init__(self) -> None:
        self.of: dict[str, str] = {}
        self.fused: dict[str, frozenset[str]] = {}
        self.order: list[str] = []
        self._signature_of: dict[str, str] = {}
        self._leaves_of: dict[str, tuple[Expr, ...]] = {}
        self._near_of: dict[str, dict[str, str]] = {}
        #: Stages an expression also does: those of steps the optimizer folded into it (a sort into a top-k).
        self.also: dict[str, frozenset[str]] = {}

    def mark(self, expr: Expr, stage: str, also: Iterable[str] = ()) -> None:
        """Label ``stage`` on every expression under ``expr`` that has no label yet, and ``also`` as
        stages they also do (the steps of a run of assigns after its first)."""
        for name in (stage, *also):
            if name not in self.order:
                self.order.append(name)
        labelled = self.of.get(expr._name)
        if labelled is not None and labelled != stage:
            # An earlier step built this very expression (two derived sources filtering the same read
            # alike): its tasks do this step's work too.
            self.also[expr._name] = self.also.get(expr._name, frozenset()) | {stage, *also}
            return
        self._spread(expr, stage, folded=frozenset(also) - {stage})

    def mark_sink(self, write: Any, stage: str) -> Any:
        """Label the writer's own expressions (a dataframe write; a CSV's delayed writes have none) and return ``write``."""
        if stage not in self.order:
            self.order.append(stage)
        if isinstance(getattr(write, "expr", None), Expr):
            self._spread(write.expr, stage)
        return write

    def _spread(self, expr: Expr, stage: str, origin: Expr | None = None, folded: frozenset[str] = frozenset()) -> list[str]:
        """Label the unlabelled expressions under ``expr``, which the optimizer made from ``origin``.

        Rewriting one expression rebuilds others below it (a projection pushed through a join
        rebuilds the join and its inputs): a rebuilt one is labelled as the expression of the
        same kind and parameters under ``origin``, the nearest first; a read made anew (a
        projection pushed into it) as the one source ``origin`` reads; the rest as ``origin``.
        """
        like: dict[str, str] | None = None
        seen: set[str] = set()
        new_work: list[str] = []  # labelled as ``origin``'s own: what the rewrite added
        stack = [expr]
        while stack:
            node = stack.pop()
            if node._name in self.of or node._name in seen:
                continue
            seen.add(node._name)
            dependencies = node.dependencies()
            found: str | None = None
            also = folded
            if origin is not None and not dependencies:
                found = self._leaf_stage(node, origin)
            elif origin is not None:
                like = self._signatures(origin) if like is None else like
                twin = like.get(self._signature(node))  # what this rebuilt expression was
                if twin is not None:
                    found, also = self.of[twin], self.also.get(twin, frozenset())
            if not isinstance(node, Fused):  # a fusion's stages are those of what it fuses
                self.of[node._name] = found or stage
                if also:
                    self.also[node._name] = also
                if found is None:
                    new_work.append(node._name)
            stack.extend(dependencies)
        return new_work

    def _leaf_stage(self, leaf: Expr, origin: Expr) -> str | None:
        """The read a new leaf (a read with other columns) stands for: the one ``origin`` reads, or
        of those, the one of the same kind over the same files."""
        leaves = [node for node in self._leaves_under(origin) if node._name in self.of]
        for candidates in (leaves, [n for n in leaves if _read_signature(n) == _read_signature(leaf)]):
            stages = {self.of[node._name] for node in candidates}
            if len(stages) == 1:
                return stages.pop()
        return None

    def _leaves_under(self, expr: Expr) -> tuple[Expr, ...]:
        # Memoised per expression: a job has few reads, and subtrees are shared.
        if expr._name not in self._leaves_of:
            dependencies = expr.dependencies()
            found = {leaf._name: leaf for dependency in dependencies for leaf in self._leaves_under(dependency)}
            self._leaves_of[expr._name] = tuple(found.values()) if dependencies else (expr,)
        return self._leaves_of[expr._name]

    def _signatures(self, origin: Expr) -> dict[str, str]:
        """Labelled expressions near below ``origin``, by signature: the name of the nearest of each."""
        if origin._name not in self._near_of:
            found: dict[str, str] = {}
            # Breadth first, the nearest of a kind winning; a rebuilt expression mirrors one close
            # below, so the search stops after a bounded number (a rewrite at the root would walk all).
            for node in itertools.islice(_walk(origin), _NEAR):
                if node._name in self.of:
                    found.setdefault(self._signature(node), node._name)
            self._near_of[origin._name] = found
        return self._near_of[origin._name]

    def _signature(self, node: Expr) -> str:
        if node._name not in self._signature_of:
            # What an expression does, apart from its inputs: its kind and its other parameters.
            parameters = [operand for operand in node.operands if not isinstance(operand, Expr)]
            self._signature_of[node._name] = f"{type(node).__name__}-{tokenize(*parameters)}"
        return self._signature_of[node._name]

    def derived(self, old: Expr, new: Any) -> None:
        """``new`` was made from ``old`` by the optimizer: what it adds does ``old``'s work, and that
        of any stage whose expressions just below ``old`` are gone from just below ``new``."""
        if isinstance(new, Expr) and new is not old and old._name in self.of:
            stage, carried = self.of[old._name], self.also.get(old._name, frozenset())
            added = self._spread(new, stage, origin=old, folded=carried)
            gone = self._folded(old, new)
            if added and gone:
                for name in added:
                    self.also[name] = self.also.get(name, frozenset()) | gone
            elif not added and not isinstance(new, Fused) and stage not in self._near_stages(new):
                # ``old`` (and what it had folded) vanished into what was below it (a select pushed into
                # the read), which does that work now; counted there only if the stage has no task of
                # its own (see stages_of_keys).
                merged = {_MERGED + s for s in {stage, *gone}}
                self.also[new._name] = self.also.get(new._name, frozenset()) | carried | merged

    def _near_stages(self, expr: Expr) -> set[str | None]:
        return {self.of.get(node._name) for node in itertools.islice(_walk(expr), _FOLD_NEAR)}

    def _folded(self, old: Expr, new: Expr) -> frozenset[str]:
        # Head(Sort(x)) becoming NFirst(x): the stage of an input of ``old`` that is gone from just
        # below ``new`` (not rebuilt there) lives on only in what the rewrite added.
        gone = {self.of.get(dependency._name) for dependency in old.dependencies()} - self._near_stages(new) - {None, self.of[old._name]}
        return frozenset(stage for stage in gone if stage is not None and not stage.startswith("read "))

    def substituted(self, old: Expr, new: Any, *, replaced: bool) -> None:
        """``new`` took ``old``'s place: as a replacement (its new parts do ``old``'s work), or as
        ``old`` rebuilt over replaced inputs (the same work: one label, nothing below to walk)."""
        if replaced:
            self.derived(old, new)
        elif isinstance(new, Expr) and not isinstance(new, Fused) and old._name in self.of and new._name not in self.of:
            self.of[new._name] = self.of[old._name]
            if old._name in self.also:
                self.also[new._name] = self.also[old._name]

    def fusing(self, expr: Any) -> None:
        """``expr`` may be a fusion of expressions (new, or rebuilt over another): it does the work of all their stages."""
        if isinstance(expr, Fused):
            self._stages_in(expr)

    def _stages_in(self, expr: Expr) -> frozenset[str]:
        if isinstance(expr, Fused):
            if expr._name not in self.fused:  # a fusion may hold one of an earlier pass
                self.fused[expr._name] = frozenset().union(*(self._stages_in(inner) for inner in expr.exprs))
            return self.fused[expr._name]
        if expr._name not in self.of:
            return frozenset()
        return frozenset({self.of[expr._name]}) | self.also.get(expr._name, frozenset())

    def traced(self, key: Key) -> frozenset[str]:
        """The stages traced to the task ``key`` (merged ones marked), from its expression's name."""
        name = key[0] if isinstance(key, tuple) else key
        return self._by_token.get(str(name).rsplit("-", 1)[-1], frozenset())

    @functools.cached_property
    def _by_token(self) -> dict[str, frozenset[str]]:
        # Keys derived from an expression (a shuffle's split- and group- keys) share its token.
        by_token: dict[str, frozenset[str]] = {
            name.rsplit("-", 1)[-1]: frozenset({stage}) | self.also.get(name, frozenset()) for name, stage in self.of.items()
        }
        by_token.update({name.rsplit("-", 1)[-1]: stages for name, stages in self.fused.items() if stages})
        return by_token


# Parameters the optimizer changes in a read (the columns and filters pushed into it); the rest
# (its files, its options) say which source it reads.
_PUSHED_INTO_READS = frozenset({"columns", "filters", "_series", "_dataset_info_cache", "_partitions", "_expr", "operation"})


def _read_signature(leaf: Expr) -> str:
    kept = [operand for name, operand in zip(leaf._parameters, leaf.operands) if name not in _PUSHED_INTO_READS]
    return f"{type(leaf).__name__}-{tokenize(*kept)}"


def _walk(expr: Expr) -> Iterator[Expr]:
    """``expr`` and every expression under it, once each, breadth first."""
    seen = {expr._name}
    queue = deque([expr])
    while queue:
        node = queue.popleft()
        yield node
        for dependency in node.dependencies():
            if dependency._name not in seen:
                seen.add(dependency._name)
                queue.append(dependency)


def _traced(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def rewrite(self: Expr, *args: Any, **kwargs: Any) -> Any:
        out = method(self, *args, **kwargs)
        labels: StageLabels | None = getattr(_recorder, "labels", None)
        if labels is not None:
            labels.derived(self, out)
        return out

    return rewrite


#: Per thread: the expressions rebuilt by the substitution in progress, by (its ``_seen`` set, expression name).
_substitutions = threading.local()


def _memoised_substitute(method: Callable[..., Any]) -> Callable[..., Any]:
    """``Expr.substitute`` with a memo of the expressions it rebuilt, for :func:`_traced_substitute`.

    dask's ``_substitute`` skips only expressions it left unchanged (``_seen``): one it rebuilds is
    rebuilt (and tokenized) again on every path that reaches it, so a graph whose expressions share
    inputs (a derived source used twice, a sort's partitioning column beside its frame) costs time
    exponential in its depth (dask/dask-expr#835). q11's blockwise fusion made 644k calls over 82
    expressions: 15-30 s of planning. Each expression is rebuilt once here, as the same expression.
    """

    @functools.wraps(method)
    def substitute(self: Expr, old: Any, new: Any) -> Any:
        outer = getattr(_substitutions, "done", None)
        _substitutions.done = {}
        try:
            return method(self, old, new)
        finally:
            _substitutions.done = outer

    return substitute


def _traced_substitute(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def substitute(self: Expr, old: Any, new: Any, _seen: set[str]) -> Any:
        done: dict[tuple[int, str], Any] | None = getattr(_substitutions, "done", None)
        if done is not None:
            key = (id(_seen), self._name)
            if key in done:
                return done[key]  # rebuilt (and labelled) already, on another path
        out = method(self, old, new, _seen)
        if done is not None:
            done[key] = out
        labels: StageLabels | None = getattr(_recorder, "labels", None)
        if labels is not None:
            labels.fusing(out)  # the fusion itself, or one rebuilt over another
            labels.substituted(self, out, replaced=out is new)
        return out

    return substitute


_INSTALL = threading.Lock()
_installed = False


def _install() -> None:
    """Wrap the optimizer's rewrite entry points once per process; they record only for a thread that plans."""
    global _installed
    with _INSTALL:
        if _installed:
            return
        for name in ("simplify_once", "lower_once", "rewrite"):
            setattr(Expr, name, _traced(getattr(Expr, name)))
        Expr._substitute = _traced_substitute(Expr._substitute)  # type: ignore[method-assign]
        Expr.substitute = _memoised_substitute(Expr.substitute)  # type: ignore[method-assign]
        _installed = True


@contextmanager
def recording(labels: StageLabels) -> Iterator[StageLabels]:
    """Trace ``labels`` through every optimization this thread runs inside the block."""
    _install()
    _recorder.labels = labels
    try:
        yield labels
    finally:
        _recorder.labels = None


def step_stage_name(field: str, step: Step) -> str:
    """The progress stage of the step at ``field``: ``steps[2] groupby``."""
    return f"{field} {step.op}"


def sink_stage_name(spec: JobSpec) -> str:
    """The sink's stage, as the Polars engine names it: ``write parquet``."""
    return f"write {spec.sink.format}"


class LabelledFrames(NamedFrames):
    """The job's frames, each source's and step's expressions labelled with its stage."""

    def __init__(self, spec: JobSpec, plan: LogicalPlan | None, labels: StageLabels) -> None:
        super().__init__(spec, plan)
        self.labels = labels

    def read(self, source: SourceSpec, field: str) -> dd.DataFrame:
        frame = super().read(source, field)
        self.labels.mark(frame.expr, read_stage_name(field))
        return frame

    def applied(self, frame: dd.DataFrame, steps: list[tuple[str, Step]]) -> None:
        # A run of assigns is one assign (jobs.assign_run): its expressions, which the optimizer may
        # merge with the next assign's, do the work of every step of the run.
        first, *rest = (step_stage_name(field, step) for field, step in steps)
        self.labels.mark(frame.expr, first, rest)


def stage_order(labels: StageLabels, sink: str) -> list[str]:
    """Reads first (as the Polars engine lists them), then steps in data-flow order, the sink last."""
    reads = [stage for stage in labels.order if stage.startswith("read ")]
    return [*reads, *(stage for stage in labels.order if stage not in reads and stage != sink), sink]


def stages_of_keys(keys: Iterable[Key], labels: StageLabels, sink: str) -> dict[Key, tuple[str, ...]]:
    """Each task key of a job's graph mapped to the stages it does work for, in stage order; the sink's if none.

    A step that vanished into the expression below it (a select pushed into a read) counts with that
    expression's tasks only if none of its own is left, so that it shows without taking on tasks
    that are mostly another stage's.
    """
    traced = {key: labels.traced(key) for key in keys}
    own = {stage for stages in traced.values() for stage in stages if not stage.startswith(_MERGED)}
    merged_in = {stage for stage in labels.order if stage not in own}
    return {
        key: tuple(s for s in labels.order if s in stages or (s in merged_in and _MERGED + s in stages)) or (sink,)
        for key, stages in traced.items()
    }

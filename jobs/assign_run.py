"""Consecutive ``assign`` steps on the Dask engine as one dask ``assign`` of all their columns.

A chain of N ``frame.assign(c=...)`` calls is N dask expressions, each over the one before. Dask's
optimizer merges such a chain back into one ``Assign`` and pushes projections through it, and every
expression it rebuilds on the way computes its metadata again (a pandas ``assign`` of every column
so far): planning grew with the square of the chain, 200 steps of ``amount + 1`` took 16-36 s to
plan on 2 cores (bench/RESULTS.md, "Control plane under load").

So a run of assign steps is built as one ``assign``: each step's expression is evaluated, in the
spec's order, over the columns as the steps before it left them (:class:`AssignRun` stands in for
the frame: a column the run has set is that step's value, any other the frame's), which is what
evaluating it over the frame after those steps reads, partition by partition. The values are the
same dask operations as before, so pandas and cuDF partitions compute the same answers, checked
operations (overflow, ``divide``, ``strptime``) fail as before naming their step, and a later
projection still drops unused columns and reaches the read.

The one thing the frame gives that a value does not is a column from a constant: a step that reads
a column an earlier step of the run set to a constant (``c = 1`` then ``d = c + x``) starts a new
run over the frame so far, where ``c`` is a column like any other.
"""

from __future__ import annotations

from typing import Any

import dask.dataframe as dd

from spillway.jobs.expr import Expression
from spillway.jobs.spec import AssignStep


class AssignRun:
    """Assign steps over ``frame``, in order, to be applied as one ``assign``.

    It reads like a frame where an expression looks (``columns`` and ``run[name]``), so that
    :meth:`jobs.expr.Expression.evaluate` takes it in place of the frame after the steps so far.

    Parameters
    ----------
    frame
        The dask dataframe before the run's first step.
    """

    def __init__(self, frame: dd.DataFrame) -> None:
        self.frame = frame
        self.values: dict[str, Any] = {}  # column → its latest value: a dask Series or a constant
        self.steps: list[tuple[str, AssignStep]] = []

    @property
    def columns(self) -> list[str]:
        """The columns after the steps so far, in the order the frame would have them."""
        own = list(self.frame.columns)
        known = set(own)
        return own + [column for column in self.values if column not in known]

    def __getitem__(self, name: str) -> Any:
        if name not in self.values:
            return self.frame[name]
        # The column a frame would give: the same values under the column's name.
        return self.values[name].rename(name)

    def can_evaluate(self, expression: Expression) -> bool:
        """Whether ``expression`` can read this run in place of the frame: it reads no column the run set to a constant."""
        return all(isinstance(self.values[column], dd.Series) for column in expression.columns if column in self.values)

    def add(self, field: str, step: AssignStep, value: Any) -> None:
        """Record that the step at ``field`` sets ``step.column`` to ``value`` (its expression's, over this run)."""
        # A column set again keeps its place, as in a frame: dict assignment keeps the first insertion's.
        self.values[step.column] = value
        self.steps.append((field, step))

    def frame_after(self) -> dd.DataFrame:
        """The frame after every step of the run: one ``assign`` of the columns they set."""
        return self.frame.assign(**self.values) if self.values else self.frame

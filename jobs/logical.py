"""The logical plan of a job: its spec with every expression parsed and every schema known.

Built once by :func:`jobs.validate.plan_spec`, which checks the spec against its sources'
real schemas; both engines read it (``plan.expression(field)``), so neither parses user
text again, and what an engine is given is what validation passed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from spillway.jobs.expr import Expression, parse_expression
from spillway.jobs.sources import Schema
from spillway.jobs.spec import JobSpec

if TYPE_CHECKING:
    from spillway.jobs.sql_source import SqlPlan


@dataclass
class LogicalPlan:
    """A checked job: expressions by field, and the schema at each source and after each step.

    Fields are the spec's own locations: ``steps[2].expr``, ``sources.late.steps[0].aggs.n.expr``;
    schemas are keyed by the source's field (``source``, ``sources.orders``,
    ``steps[1].right``) and by each step's (``steps[3]``: the columns after step 3); ``inputs``
    holds the columns going into each step; ``joined`` the columns of the joined row that a
    join's ``where`` reads, by the join's field (a semi or anti join outputs only the left's);
    ``queries`` the checked SQL of each SQL source, by its field (``sources.q``).
    """

    spec: JobSpec | None
    expressions: dict[str, Expression] = field(default_factory=dict)
    schemas: dict[str, Schema] = field(default_factory=dict)
    inputs: dict[str, Schema] = field(default_factory=dict)
    joined: dict[str, Schema] = field(default_factory=dict)
    output: Schema = field(default_factory=dict)
    queries: dict[str, SqlPlan] = field(default_factory=dict)

    @classmethod
    def unchecked(cls) -> LogicalPlan:
        """A plan with nothing recorded, whose expressions are parsed as they are asked for."""
        return cls(None)

    def expression(self, field: str, text: str) -> Expression:
        """The parsed expression at ``field`` (``text`` is parsed only for a plan built by hand)."""
        found = self.expressions.get(field)
        if found is None or found.text != text:
            found = self.expressions[field] = parse_expression(text, field=field)
        return found

    def columns_after(self, field: str) -> list[str]:
        """The column names after the step (or source) at ``field``, in order."""
        return list(self.schemas[field])

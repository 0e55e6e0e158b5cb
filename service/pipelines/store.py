"""Pipelines in the database: create, read, update (a new version), pause, delete.

Every method is one short transaction; call them from a thread in async code.
Methods that take an ``owner`` act only on that owner's pipeline: another owner's is
not found, exactly as a missing one; None acts on any (auth off, an admin, the scheduler).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import delete, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.sql import Select, Update

from spillway.service.pipelines.errors import PipelineExists, PipelineNotFound
from spillway.service.pipelines.models import PipelineCreate, PipelineDefinition, PipelineView
from spillway.service.pipelines.runs import RunStore
from spillway.service.pipelines.tables import attempts_table, aware, pipelines_table, runs_table, utc
from spillway.service.store import make_engine, utc_now

Clock = Callable[[], datetime]
Query = TypeVar("Query", Select[Any], Update)


@dataclass(frozen=True)
class PipelineRecord:
    """A stored pipeline, with the scheduler's bookkeeping."""

    id: int
    name: str
    version: int
    definition: PipelineDefinition
    paused: bool
    scheduled_through: datetime
    created_at: datetime
    updated_at: datetime
    owner: str | None = None

    def view(self, next_run_at: datetime | None = None) -> PipelineView:
        """The API form of this pipeline."""
        return PipelineView(
            name=self.name,
            paused=self.paused,
            version=self.version,
            created_at=self.created_at,
            updated_at=self.updated_at,
            next_run_at=next_run_at,
            owner=self.owner,
            **self.definition.model_dump(),
        )


class PipelineStore:
    """Reads and writes pipelines; its :attr:`runs` reads and writes their runs.

    Parameters
    ----------
    database
        A SQLAlchemy URL (the service's ``database_url``) or an engine to share.
    clock
        Returns the current aware time, stamped on created and updated pipelines.
    migrate
        Bring the database to the newest schema first (service/migrations); without,
        one that is not at it is refused with ``SchemaNotCurrent``.
    """

    def __init__(self, database: str | Engine, *, clock: Clock = utc_now, migrate: bool = True) -> None:
        from spillway.service.migrations import ensure_schema

        self._owns_engine = isinstance(database, str)
        self.engine = make_engine(database) if isinstance(database, str) else database
        self.clock = clock
        ensure_schema(self.engine, migrate=migrate)
        self.runs = RunStore(self.engine)

    def close(self) -> None:
        """Release the engine's connections, if this store made the engine."""
        if self._owns_engine:
            self.engine.dispose()

    def create(self, body: PipelineCreate, *, owner: str | None = None) -> PipelineRecord:
        """Persist a new pipeline at version 1, owned by ``owner``; its schedule starts now
        (no catch-up before creation).

        Raises
        ------
        PipelineExists
            If the name is taken (names are one namespace, whoever owns them).
        """
        now = utc(self.clock())
        definition = body.definition()
        try:
            with self.engine.begin() as conn:
                conn.execute(
                    pipelines_table.insert().values(
                        name=body.name,
                        version=1,
                        definition=definition.model_dump(mode="json"),
                        paused=body.paused,
                        scheduled_through=now,
                        claim_seq=0,
                        created_at=now,
                        updated_at=now,
                        owner=owner,
                    )
                )
        except IntegrityError as exc:
            raise PipelineExists(f"a pipeline named '{body.name}' exists; update it with PUT /pipelines/{body.name}", field="name") from exc
        return self.get(body.name)

    def get(self, name: str, *, owner: str | None = None) -> PipelineRecord:
        """One pipeline by name. Raises :class:`PipelineNotFound`."""
        with self.engine.connect() as conn:
            row = conn.execute(_owned(select(pipelines_table).where(pipelines_table.c.name == name), owner)).mappings().first()
        if row is None:
            raise PipelineNotFound(f"no pipeline named '{name}'", field="name")
        return _record(row)

    def list(self, *, owner: str | None = None) -> list[PipelineRecord]:
        """Every pipeline (of ``owner``, when given), by name."""
        with self.engine.connect() as conn:
            rows = conn.execute(_owned(select(pipelines_table), owner).order_by(pipelines_table.c.name)).mappings().all()
        return [_record(r) for r in rows]

    def update(self, name: str, definition: PipelineDefinition, *, owner: str | None = None) -> PipelineRecord:
        """Replace the definition and bump the version; runs already created keep theirs.
        The owner stays: an admin's edit does not take the pipeline over."""
        with self.engine.begin() as conn:
            result = conn.execute(
                _owned(update(pipelines_table).where(pipelines_table.c.name == name), owner)
                .values(
                    definition=definition.definition().model_dump(mode="json"),
                    version=pipelines_table.c.version + 1,  # in SQL: two concurrent updates make two versions
                    updated_at=utc(self.clock()),
                )
            )
        if result.rowcount != 1:
            raise PipelineNotFound(f"no pipeline named '{name}'", field="name")
        return self.get(name)

    def set_paused(self, name: str, paused: bool, *, owner: str | None = None) -> PipelineRecord:
        """Pause or resume. Resuming restarts the schedule from now: a pause is deliberate,
        so the intervals it covered are not caught up (trigger or backfill them if wanted)."""
        now = utc(self.clock())
        values: dict[str, Any] = {"paused": paused, "updated_at": now}
        with self.engine.begin() as conn:
            query = _owned(update(pipelines_table).where(pipelines_table.c.name == name), owner)
            if not paused:
                conn.execute(query.where(pipelines_table.c.paused.is_(True)).values(scheduled_through=now))
            result = conn.execute(query.values(**values))
        if result.rowcount != 1:
            raise PipelineNotFound(f"no pipeline named '{name}'", field="name")
        return self.get(name)

    def delete(self, name: str, *, owner: str | None = None) -> None:
        """Delete a pipeline and its run history; jobs it started stay in the job store."""
        record = self.get(name, owner=owner)
        run_ids = select(runs_table.c.id).where(runs_table.c.pipeline_id == record.id)
        with self.engine.begin() as conn:
            conn.execute(delete(attempts_table).where(attempts_table.c.run_id.in_(run_ids)))
            conn.execute(delete(runs_table).where(runs_table.c.pipeline_id == record.id))
            conn.execute(delete(pipelines_table).where(pipelines_table.c.id == record.id))


def _owned(query: Query, owner: str | None) -> Query:
    """``query`` narrowed to ``owner``'s pipelines; all of them for None."""
    return query if owner is None else query.where(pipelines_table.c.owner == owner)


def _record(row: Any) -> PipelineRecord:
    return PipelineRecord(
        id=row["id"],
        name=row["name"],
        version=row["version"],
        definition=PipelineDefinition.model_validate(row["definition"]),
        paused=bool(row["paused"]),
        scheduled_through=aware(row["scheduled_through"]),  # type: ignore[arg-type]
        created_at=aware(row["created_at"]),  # type: ignore[arg-type]
        updated_at=aware(row["updated_at"]),  # type: ignore[arg-type]
        owner=row["owner"],
    )

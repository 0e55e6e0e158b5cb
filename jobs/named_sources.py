"""The rows of each source a job names, built once per job, for either engine."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Generic, TypeVar

from spillway.jobs.errors import SpecError
from spillway.jobs.spec import DerivedSource, JobSpec, SourceSpec, SqlSource, Step

Frame = TypeVar("Frame")


class NamedSources(ABC, Generic[Frame]):
    """Resolves sources to frames (a dask dataframe, a Polars LazyFrame), each name once.

    Every use of a name gets the same object, so the engine's plan holds its part once
    and computes it once however many steps read it.
    """

    def __init__(self, spec: JobSpec) -> None:
        self.spec = spec
        self._built: dict[str, Frame] = {}

    @abstractmethod
    def read(self, source: SourceSpec, field: str) -> Frame:
        """A frame over a source's files (defined at ``field``)."""

    @abstractmethod
    def apply_steps(self, frame: Frame, steps: list[Step], at: str) -> Frame:
        """``steps`` (found at ``at``, e.g. ``sources.late.steps``) applied to ``frame``."""

    def query(self, name: str, field: str) -> Frame:
        """The rows of the SQL source ``name`` (defined at ``field``); only the Polars engine runs SQL."""
        raise SpecError(f"source '{name}' is SQL, which only the Polars engine runs: use engine: polars or auto", field=f"{field}.sql")

    def frame_of(self, ref: SourceSpec | str, field: str) -> Frame:
        """The rows ``ref`` stands for: an inline source (at ``field``) or a named one."""
        if isinstance(ref, str) and ref in self._built:
            return self._built[ref]
        source, defined_at = self.spec.resolve(ref, field)
        if isinstance(source, DerivedSource):  # JobSpec refuses cycles, so this recursion ends
            start = self.frame_of(source.from_, f"{defined_at}.from")
            frame = self.apply_steps(start, source.steps, f"{defined_at}.steps")
        elif isinstance(source, SqlSource):
            frame = self.query(str(ref), defined_at)
        else:
            frame = self.read(source, defined_at)
        if isinstance(ref, str):
            self._built[ref] = frame
        return frame

    def output(self) -> Frame:
        """The job's output: its source through its steps."""
        return self.apply_steps(self.frame_of(self.spec.source, "source"), self.spec.steps, "steps")

"""The pipelines part of the SDK: ``/pipelines`` over HTTP (httpx), with the server's own models."""

from __future__ import annotations

from datetime import datetime
from typing import Any


from spillway.service.client import SpillwayClient, path_segment
from spillway.service.pipelines.models import (
    BackfillResult,
    PipelineCreate,
    PipelineDefinition,
    PipelineList,
    PipelineView,
    RunPage,
    RunState,
    RunView,
)
from spillway.service.pipelines.templating import ParamValue


class PipelineClient(SpillwayClient):
    """The SDK's client with the pipeline calls (same constructor as :class:`SpillwayClient`)."""

    def create(self, pipeline: PipelineCreate | dict[str, Any]) -> PipelineView:
        """Create a pipeline. Raises :class:`ApiError` (422 names the bad template field)."""
        body = PipelineCreate.model_validate(pipeline).model_dump(mode="json")
        return PipelineView.model_validate(self._request("POST", "/pipelines", json=body))

    def update(self, name: str, definition: PipelineDefinition | dict[str, Any]) -> PipelineView:
        """Replace a pipeline's definition (a new version). ``name`` and ``paused`` in a dict are ignored."""
        if isinstance(definition, dict):
            definition = PipelineDefinition.model_validate({k: v for k, v in definition.items() if k not in ("name", "paused")})
        body = definition.definition().model_dump(mode="json")
        return PipelineView.model_validate(self._request("PUT", f"/pipelines/{path_segment(name, 'the pipeline name')}", json=body))

    def list(self) -> list[PipelineView]:
        return PipelineList.model_validate(self._request("GET", "/pipelines")).items

    def get(self, name: str) -> PipelineView:
        return PipelineView.model_validate(self._request("GET", f"/pipelines/{path_segment(name, 'the pipeline name')}"))

    def delete(self, name: str) -> None:
        self._request("DELETE", f"/pipelines/{path_segment(name, 'the pipeline name')}")

    def pause(self, name: str) -> PipelineView:
        return PipelineView.model_validate(self._request("POST", f"/pipelines/{path_segment(name, 'the pipeline name')}/pause"))

    def resume(self, name: str) -> PipelineView:
        return PipelineView.model_validate(self._request("POST", f"/pipelines/{path_segment(name, 'the pipeline name')}/resume"))

    def trigger(self, name: str, logical_date: datetime | str, params: dict[str, ParamValue] | None = None) -> RunView:
        """A manual run; a date without an offset is read in the pipeline's time zone."""
        value = logical_date.isoformat() if isinstance(logical_date, datetime) else logical_date
        body = {"logical_date": value, "params": params or {}}
        return RunView.model_validate(self._request("POST", f"/pipelines/{path_segment(name, 'the pipeline name')}/runs", json=body))

    def backfill(self, name: str, start: datetime | str, end: datetime | str, params: dict[str, ParamValue] | None = None) -> BackfillResult:
        """Queue runs for every ended interval starting in ``[start, end]``."""
        body = {
            "start": start.isoformat() if isinstance(start, datetime) else start,
            "end": end.isoformat() if isinstance(end, datetime) else end,
            "params": params or {},
        }
        return BackfillResult.model_validate(self._request("POST", f"/pipelines/{path_segment(name, 'the pipeline name')}/backfill", json=body))

    def runs(self, name: str, *, state: RunState | None = None, limit: int = 50, offset: int = 0) -> RunPage:
        """Run history, newest logical date first."""
        query: dict[str, Any] = {"limit": limit, "offset": offset}
        if state is not None:
            query["state"] = state.value
        return RunPage.model_validate(self._request("GET", f"/pipelines/{path_segment(name, 'the pipeline name')}/runs", params=query))

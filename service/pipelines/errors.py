"""Pipeline errors, typed so the app's one error map turns them into HTTP answers.

Each subclasses the existing domain error whose HTTP status it shares (404, 409,
422), so no second mapping is needed in :mod:`service.errors`; the ``code`` says
precisely what happened.
"""

from __future__ import annotations

from spillway.jobs.errors import InvalidTransition, JobNotFound, SpecError


class PipelineNotFound(JobNotFound):
    """No pipeline has the given name (a 404)."""

    code = "pipeline_not_found"


class PipelineExists(InvalidTransition):
    """A pipeline with this name already exists (a 409)."""

    code = "pipeline_exists"


class RunExists(InvalidTransition):
    """The pipeline already has a run for this logical date (a 409): one run per key, ever."""

    code = "run_exists"


class InvalidSchedule(SpecError):
    """A cron expression or time zone that cannot be evaluated (a 422)."""

    code = "invalid_schedule"


class TemplateError(SpecError):
    """A spec template that does not render into a valid JobSpec (a 422).

    ``field`` names the templated value, e.g. ``spec.sink.path``.
    """

    code = "invalid_template"

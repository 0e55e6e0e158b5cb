"""Errors of the dashboard proxy (service/routes/dashboard.py), mapped to HTTP in service/errors.py."""

from __future__ import annotations

from spillway.jobs.errors import SpillwayError


class DashboardOff(SpillwayError):
    """The cluster runs no dashboard, the proxy is turned off, or no such dashboard page."""

    code = "dashboard_off"


class DashboardUnavailable(SpillwayError):
    """The dashboard's own server did not answer."""

    code = "dashboard_unavailable"

"""Cron instants across DST changes: what croniter does, what we keep, and when runs fire."""

from __future__ import annotations

from datetime import datetime, timedelta
from itertools import pairwise
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter

from spillway.service.pipelines.errors import InvalidSchedule
from spillway.service.pipelines.models import RunState
from spillway.service.pipelines.schedule import CronSchedule
from tests.test_pipelines_fakes import UTC, FakeClock, FakeJobs, SchedulerFactory, pipeline, runs_of, tick

pytest_plugins = ["tests.test_pipelines_fakes"]  # the database and scheduler fixtures

BERLIN = ZoneInfo("Europe/Berlin")


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def test_what_croniter_does_with_berlin_dst() -> None:
    """croniter 7 (the behaviour CronSchedule builds on, pinned here so an upgrade that changes it fails loudly).

    Spring forward, 2026-03-29: 02:00 CET jumps to 03:00 CEST, so 02:30 does not exist;
    croniter fires at 03:00 CEST, the first instant after the gap.
    Fall back, 2026-10-25: 03:00 CEST goes back to 02:00 CET, so 02:30 happens twice;
    croniter fires at both, 02:30 CEST (00:30 UTC) and 02:30 CET (01:30 UTC).
    """
    spring = croniter("30 2 * * *", datetime(2026, 3, 28, 12, tzinfo=BERLIN))
    assert [spring.get_next(datetime).astimezone(UTC) for _ in range(2)] == [utc(2026, 3, 29, 1, 0), utc(2026, 3, 30, 0, 30)]
    fall = croniter("30 2 * * *", datetime(2026, 10, 24, 12, tzinfo=BERLIN))
    assert [fall.get_next(datetime).astimezone(UTC) for _ in range(3)] == [utc(2026, 10, 25, 0, 30), utc(2026, 10, 25, 1, 30), utc(2026, 10, 26, 1, 30)]


def test_fixed_hour_schedule_fires_once_per_day_across_both_changes() -> None:
    schedule = CronSchedule("30 2 * * *", "Europe/Berlin")
    spring = schedule.fires(utc(2026, 3, 27, 12), utc(2026, 3, 31, 12))
    assert [f.astimezone(UTC) for f in spring] == [
        utc(2026, 3, 28, 1, 30),  # 02:30 CET
        utc(2026, 3, 29, 1, 0),  # 02:30 does not exist: 03:00 CEST, as croniter does
        utc(2026, 3, 30, 0, 30),  # 02:30 CEST
        utc(2026, 3, 31, 0, 30),
    ]
    fall = schedule.fires(utc(2026, 10, 23, 12), utc(2026, 10, 27, 12))
    assert [f.astimezone(UTC) for f in fall] == [
        utc(2026, 10, 24, 0, 30),  # 02:30 CEST
        utc(2026, 10, 25, 0, 30),  # the first 02:30 (CEST); croniter's second one (CET) is dropped
        utc(2026, 10, 26, 1, 30),  # 02:30 CET
        utc(2026, 10, 27, 1, 30),
    ]
    assert [f.strftime("%Y-%m-%d %H:%M") for f in fall] == ["2026-10-24 02:30", "2026-10-25 02:30", "2026-10-26 02:30", "2026-10-27 02:30"]


def test_wildcard_hour_schedule_keeps_the_repeated_hour() -> None:
    # Hourly: the two 02:30s of the fall-back night are two real hours, an hour apart.
    fall = CronSchedule("30 * * * *", "Europe/Berlin").fires(utc(2026, 10, 24, 23), utc(2026, 10, 25, 3))
    assert [f.astimezone(UTC) for f in fall] == [utc(2026, 10, 24, 23, 30), utc(2026, 10, 25, 0, 30), utc(2026, 10, 25, 1, 30), utc(2026, 10, 25, 2, 30)]
    spring = CronSchedule("30 * * * *", "Europe/Berlin").fires(utc(2026, 3, 28, 23), utc(2026, 3, 29, 2))
    assert [f.astimezone(UTC) for f in spring] == [utc(2026, 3, 28, 23, 30), utc(2026, 3, 29, 0, 30), utc(2026, 3, 29, 1, 30)]


def test_previous_agrees_with_next_around_the_changes() -> None:
    schedule = CronSchedule("30 2 * * *", "Europe/Berlin")
    for fires in (schedule.fires(utc(2026, 3, 26), utc(2026, 4, 2)), schedule.fires(utc(2026, 10, 22), utc(2026, 10, 29))):
        for earlier, later in pairwise(fires):
            assert schedule.previous_before(later) == earlier
            assert schedule.next_after(earlier) == later


def test_intervals_start_on_firing_instants() -> None:
    schedule = CronSchedule("@daily", "Europe/Berlin")
    intervals = schedule.intervals(datetime(2026, 3, 28, tzinfo=BERLIN), datetime(2026, 3, 30, tzinfo=BERLIN))
    assert [(s.isoformat(), e.isoformat()) for s, e in intervals] == [
        ("2026-03-28T00:00:00+01:00", "2026-03-29T00:00:00+01:00"),
        ("2026-03-29T00:00:00+01:00", "2026-03-30T00:00:00+02:00"),  # a 23-hour day
        ("2026-03-30T00:00:00+02:00", "2026-03-31T00:00:00+02:00"),
    ]


@pytest.mark.parametrize(
    ("expression", "zone", "field"),
    [("30 2 * *", "UTC", "schedule"), ("61 * * * *", "UTC", "schedule"), ("* * * * * *", "UTC", "schedule"), ("@daily", "Mars/Olympus", "timezone")],
)
def test_bad_schedules_name_their_field(expression: str, zone: str, field: str) -> None:
    with pytest.raises(InvalidSchedule) as caught:
        CronSchedule(expression, zone)
    assert caught.value.field == field


@pytest.mark.parametrize(
    ("created", "fires"),
    [
        (utc(2026, 3, 27, 12), [utc(2026, 3, 28, 1, 30), utc(2026, 3, 29, 1, 0), utc(2026, 3, 30, 0, 30)]),
        (utc(2026, 10, 23, 12), [utc(2026, 10, 24, 0, 30), utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30)]),
    ],
    ids=["spring-forward", "fall-back"],
)

def test_scheduler_fires_at_those_instants(new_sqlite_scheduler: SchedulerFactory, created: datetime, fires: list[datetime]) -> None:
    clock, jobs = FakeClock(created), FakeJobs()
    scheduler = new_sqlite_scheduler(clock, jobs)
    scheduler.store.create(pipeline(schedule="30 2 * * *", timezone="Europe/Berlin", max_active_runs=5))
    for fire in fires:
        clock.set(fire - timedelta(seconds=1))
        tick(scheduler)
        before = len(runs_of(scheduler))
        clock.set(fire + timedelta(seconds=5))
        tick(scheduler)
        runs = runs_of(scheduler)
        assert len(runs) == before + 1, f"no run fired at {fire}"
        newest = runs[-1]
        assert newest.data_interval_end == fire and newest.state == RunState.RUNNING
    # Each run processes the local day before its firing: ds is the interval's start date.
    days = [r.logical_date.astimezone(BERLIN).strftime("%Y%m%d") for r in runs_of(scheduler)]
    assert [j.spec.sink.path for j in jobs.jobs.values()] == [f"out/north/{d}" for d in days]
    # No other run: in particular none for the repeated 02:30 of the fall-back night.
    assert len(runs_of(scheduler)) == len(fires)

"""Cron schedules evaluated in an IANA time zone, with an explicit rule for DST changes."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, CroniterError, croniter

from spillway.service.pipelines.errors import InvalidSchedule

_ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


#: Names the time-zone database holds that name no place's clock.
_NOT_A_PLACE = {
    "localtime": "it is this host's own setting, so the schedule would change with the machine it runs on",
    "Factory": "it is tzdata's placeholder for a zone not yet set",
}


def zone(name: str) -> ZoneInfo:
    """The time zone ``name`` (e.g. ``Europe/Berlin``).

    Raises
    ------
    InvalidSchedule
        If the name is not in the IANA database.
    """
    shown = name if len(name) <= 80 else f"{name[:80]}..."
    if name in _NOT_A_PLACE:
        raise InvalidSchedule(f"time zone '{name}' is not a place's: {_NOT_A_PLACE[name]}; use an IANA name such as 'Europe/Berlin' "
                              "or 'UTC'", field="timezone")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:  # OSError: a name longer than a file name may be
        raise InvalidSchedule(f"unknown time zone '{shown}'; use an IANA name such as 'Europe/Berlin' or 'UTC'", field="timezone") from exc


class CronSchedule:
    """A five-field cron expression (or an alias such as ``@daily``) in a time zone.

    Instants come from croniter, which on a DST change (checked for croniter 7.0):

    - fires a wall time that does not exist at the first instant after the gap: in
      Europe/Berlin ``30 2 * * *`` fires at 03:00 CEST on 2026-03-29;
    - fires a wall time that happens twice once per UTC offset: 02:30 CEST *and*
      02:30 CET on 2026-10-25.

    Like Vixie cron, a schedule with a fixed hour keeps only the first of a repeated
    wall time, so a daily job runs once that day (two runs would share one ``ds`` and
    one sink path); a schedule whose hour field is a wildcard (``*``, ``*/2``) keeps
    both, since they are two different real hours.

    Parameters
    ----------
    expression
        Minute, hour, day of month, month, day of week; or ``@hourly``, ``@daily``,
        ``@weekly``, ``@monthly``, ``@yearly``.
    timezone
        An IANA time zone name the expression is read in.

    Raises
    ------
    InvalidSchedule
        If the expression or the time zone is not valid.
    """

    def __init__(self, expression: str, timezone: str = "UTC") -> None:
        self.expression = expression.strip()
        self.tz = zone(timezone)
        fields = _ALIASES.get(self.expression, self.expression)
        if len(fields.split()) != 5 or not croniter.is_valid(fields):
            raise InvalidSchedule(
                f"'{expression}' is not a cron schedule: give five fields (minute hour day month weekday), e.g. '30 2 * * *', or @daily",
                field="schedule",
            )
        self._fields = fields
        self._wildcard_hour = fields.split()[1].startswith("*")
        self._check_fires()

    def _check_fires(self) -> None:
        # croniter.is_valid accepts dates no month has ('0 0 30 2 *'); get_next then raises.
        # Every valid schedule fires within 8 years (29 February, on a weekday), so probe once.
        try:
            self.next_after(datetime(2000, 1, 1, tzinfo=timezone.utc))
        except CroniterBadDateError as exc:
            raise InvalidSchedule(
                f"'{self.expression}' never fires: no month has that day (e.g. 30 February, 31 April); give a date that exists",
                field="schedule",
            ) from exc

    def _iter(self, start: datetime) -> croniter:
        try:
            return croniter(self._fields, start.astimezone(self.tz))
        except CroniterError as exc:  # pragma: no cover - is_valid accepted it
            raise InvalidSchedule(str(exc), field="schedule") from exc

    def _repeated(self, instant: datetime) -> bool:
        # The second occurrence of a wall time that the clocks pass twice.
        return not self._wildcard_hour and instant.fold == 1 and instant.replace(fold=0).utcoffset() != instant.utcoffset()

    def next_after(self, after: datetime) -> datetime:
        """The first firing instant strictly after ``after`` (aware, in the schedule's zone)."""
        it = self._iter(after)
        while True:
            instant = it.get_next(datetime)
            if not self._repeated(instant):
                return instant

    def previous_before(self, before: datetime) -> datetime:
        """The last firing instant strictly before ``before``."""
        it = self._iter(before)
        while True:
            instant = it.get_prev(datetime)
            if not self._repeated(instant):
                return instant

    def fires(self, after: datetime, until: datetime, *, limit: int = 1000) -> list[datetime]:
        """Firing instants in ``(after, until]``, oldest first, at most ``limit`` of them."""
        out: list[datetime] = []
        it = self._iter(after)
        while len(out) < limit:
            instant = it.get_next(datetime)
            if instant > until:
                break
            if not self._repeated(instant):
                out.append(instant)
        return out

    def intervals(self, start: datetime, end: datetime, *, limit: int = 10_000) -> list[tuple[datetime, datetime]]:
        """Data intervals ``(start, end)`` whose start is a firing instant in ``[start, end]``.

        Raises
        ------
        InvalidSchedule
            If the range holds more than ``limit`` intervals.
        """
        # Arithmetic in UTC: on an aware local time it would be wall-clock arithmetic.
        starts = self.fires(start.astimezone(timezone.utc) - timedelta(microseconds=1), end, limit=limit + 1)
        if len(starts) > limit:
            raise InvalidSchedule(f"the range holds more than {limit} intervals; split it", field="end")
        return [(s, self.next_after(s)) for s in starts]

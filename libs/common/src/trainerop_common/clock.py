"""Time as a dependency: controllers never call datetime.now() directly (DESIGN §4)."""

from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime: ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


class FixedClock:
    """A clock for tests: stands still until advanced."""

    def __init__(self, start: datetime) -> None:
        self._now = start

    def now(self) -> datetime:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += timedelta(seconds=seconds)


def rfc3339(moment: datetime) -> str:
    """The timestamp format Kubernetes uses (second precision, Z suffix)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

"""Time as a dependency: controllers never call datetime.now() directly (docs/design/work-queue.md)."""

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


def rfc3339_micro(moment: datetime) -> str:
    """Microsecond precision, as in the API server's audit events."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: str) -> datetime:
    """An RFC 3339 timestamp as Kubernetes writes it (``Z`` or an offset, any precision)."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def whole_seconds(text: str) -> str:
    """An RFC 3339 timestamp of any precision (a Lease's MicroTime) as Kubernetes writes a Time."""
    return rfc3339(parse_time(text))

"""Time as a dependency: controllers never call datetime.now() directly (docs/design/work-queue.md)."""

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol


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


def age_seconds(obj: Mapping[str, Any], now: datetime) -> float | None:
    """Seconds since an object's ``creationTimestamp`` (None without one). The API server writes it
    in whole seconds, so the age may read up to a second more than it is."""
    created = (obj.get("metadata") or {}).get("creationTimestamp")
    return (now - parse_time(created)).total_seconds() if created else None

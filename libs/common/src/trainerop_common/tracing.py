"""OpenTelemetry spans (DESIGN §8) through the OpenTelemetry API only: they go to whatever SDK and
exporter the process configures, and cost nothing when none is (the API's no-op tracer)."""

from collections.abc import Mapping
from datetime import datetime

from opentelemetry import trace

TRACER_NAME = "trainer-operator"
AttributeValue = str | int | float | bool


def record_span(name: str, start: datetime, end: datetime, attributes: Mapping[str, AttributeValue]) -> None:
    """A span for something that already happened between ``start`` and ``end`` (for example a
    quota renegotiation, from the reclaim notice to the new admission)."""
    tracer = trace.get_tracer(TRACER_NAME)
    span = tracer.start_span(name, start_time=_nanos(start), attributes=dict(attributes))
    span.end(end_time=_nanos(max(start, end)))


def _nanos(moment: datetime) -> int:
    return int(moment.timestamp() * 1_000_000_000)

"""OpenTelemetry spans (docs/tracing.md): recorded through the OpenTelemetry API, which costs nothing
while no SDK is configured (the default); ``setup`` configures the SDK with an OTLP/HTTP exporter
when an endpoint is given (docs/tracing.md). The SDK and the exporter are imported only then: with
what they import (protobuf, requests) they held about 3 MiB of every controller that traces nothing."""

import os
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from opentelemetry import trace

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

TRACER_NAME = "trainer-operator"
AttributeValue = str | int | float | bool


def record_span(
    name: str,
    start: datetime,
    end: datetime,
    attributes: Mapping[str, AttributeValue],
    events: Mapping[str, datetime] | None = None,
) -> None:
    """A span for something that already happened between ``start`` and ``end`` (for example a
    quota renegotiation, from the reclaim notice to the new admission), with named moments in it."""
    tracer = trace.get_tracer(TRACER_NAME)
    span = tracer.start_span(name, start_time=_nanos(start), attributes=dict(attributes))
    for event, moment in (events or {}).items():
        span.add_event(event, timestamp=_nanos(moment))
    span.end(end_time=_nanos(max(start, end)))


def _nanos(moment: datetime) -> int:
    return int(moment.timestamp() * 1_000_000_000)


def reconcile_span(controller: str, body: Mapping[str, Any]) -> trace.Span:
    """The span of one reconcile of one Trainer (ended by the caller, with its result)."""
    meta = body.get("metadata") or {}
    return trace.get_tracer(TRACER_NAME).start_span(
        "reconcile",
        attributes={
            "trainer_operator.controller": controller,
            "k8s.namespace.name": str(meta.get("namespace", "")),
            "trainer_operator.trainer": str(meta.get("name", "")),
            "trainer_operator.generation": int(meta.get("generation", 0)),
        },
    )


def setup(service: str, instance: str, endpoint: str, sample_ratio: float) -> "TracerProvider | None":
    """Export spans over OTLP/HTTP in a background thread when ``endpoint`` (a base URL) or the
    standard OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT variable says where; None (off) otherwise.
    The caller shuts the provider down on exit, which sends what is still batched."""
    standard = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    if not endpoint and not standard:
        return None
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    exporter = OTLPSpanExporter(endpoint=f"{endpoint.rstrip('/')}/v1/traces") if endpoint else OTLPSpanExporter()
    provider = TracerProvider(
        resource=Resource.create({"service.name": service, "service.instance.id": instance}),
        sampler=ParentBased(TraceIdRatioBased(sample_ratio)),
    )
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return provider

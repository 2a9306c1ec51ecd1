"""Spans reach the configured OpenTelemetry SDK with their real start and end."""

from datetime import UTC, datetime

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.factories import trainer_body
from trainerop_common.conditions import Desired
from trainerop_quota.decide import Decision
from trainerop_quota.metrics import record_renegotiation

EXPORTER = InMemorySpanExporter()


@pytest.fixture
def spans() -> InMemorySpanExporter:
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
        trace.set_tracer_provider(provider)  # once per process, as the API allows
    EXPORTER.clear()
    return EXPORTER


def test_a_renegotiation_span_covers_the_reclaim_to_the_decision(spans: InMemorySpanExporter) -> None:
    now = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
    verdict = Decision(
        {"capacityType": "on-demand", "workers": 2},
        Desired.true("QuotaAdmitted", "Renegotiated", "moved"),
        renegotiation_seconds=42.5,
    )
    record_renegotiation(trainer_body("llm", "team-a"), verdict, now)
    (span,) = spans.get_finished_spans()
    assert span.name == "quota.renegotiation"
    assert span.start_time is not None
    assert span.end_time is not None
    assert span.end_time - span.start_time == 42_500_000_000
    assert span.end_time == int(now.timestamp() * 1e9)
    assert dict(span.attributes or {}) == {
        "k8s.namespace.name": "team-a",
        "trainer.name": "llm",
        "quota.outcome": "Renegotiated",
        "quota.capacity_type": "on-demand",
        "quota.workers": 2,
    }

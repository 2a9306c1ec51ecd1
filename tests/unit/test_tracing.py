"""Spans reach the configured OpenTelemetry SDK with their real start and end."""

from datetime import UTC, datetime, timedelta

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.factories import trainer_body
from trainerop_common.clock import FixedClock, rfc3339
from trainerop_common.conditions import Desired
from trainerop_quota.decide import Decision
from trainerop_quota.metrics import record_renegotiation
from trainerop_trainer.spawn import SpawnRecorder

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


def running_pod(name: str, created: datetime, started: datetime) -> dict[str, object]:
    return {
        "metadata": {"name": name, "namespace": "team-a", "uid": name, "creationTimestamp": rfc3339(created)},
        "status": {"containerStatuses": [{"name": "trainer", "state": {"running": {"startedAt": rfc3339(started)}}}]},
    }


@pytest.mark.parametrize(
    ("started_after_the_recorder", "recorded"),
    [
        (0.3, True),  # in the recorder's first second: the API writes it as that second's start
        (5.0, True),
        (-1.0, False),  # started before this process: the process that saw it start recorded it
        (-200.0, False),
    ],
)
def test_a_pod_spawn_is_recorded_once_by_the_process_that_saw_it_start(
    spans: InMemorySpanExporter, started_after_the_recorder: float, recorded: bool
) -> None:
    clock = FixedClock(datetime(2026, 11, 30, 22, 20, 14, 600_000, tzinfo=UTC))
    recorder = SpawnRecorder(clock)
    started = clock.now() + timedelta(seconds=started_after_the_recorder)
    clock.advance(max(0.0, started_after_the_recorder) + 0.1)
    pod = running_pod("p-0", started - timedelta(seconds=0.2), started)
    recorder.observe(pod, "trainer")
    recorder.observe(pod, "trainer")
    assert [s.name for s in spans.get_finished_spans()] == (["pod.spawn"] if recorded else [])

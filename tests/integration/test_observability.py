"""Observability on the real cluster: each controller's /metrics exposes the metrics
docs/metrics.md lists for it; spans reach an OTLP/HTTP receiver when an endpoint is configured;
notifications of a failed run reach an HTTP receiver with the right payload, after retries, with
no secret in them."""

import json
import re
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from testbed import localdev
from testbed.logforward import Received, Receiver
from tests.factories import trainer_manifest
from tests.harness import REPO, Cluster, eventually, exposed_names, metric_families

CANARY = f"canary-{uuid.uuid4().hex}"


def documented() -> dict[str, set[str]]:
    """Controller -> the metrics docs/metrics.md lists for it."""
    rows = re.findall(
        r"^\| `([a-z_]+)` \| (?:counter|gauge|histogram) \| [^|]* \| ([^|]*) \|",
        (REPO / "docs" / "metrics.md").read_text(),
        re.M,
    )
    by_controller: dict[str, set[str]] = {c: set() for c in localdev.CONTROLLERS}
    for name, owners in rows:
        for c in localdev.CONTROLLERS if owners.strip() == "all" else [o.strip() for o in owners.split(",")]:
            by_controller[c].add(name)
    return by_controller


@pytest.mark.parametrize("controller", localdev.CONTROLLERS)
def test_the_metrics_endpoint_exposes_the_documented_names(cluster: Cluster, controller: str) -> None:
    exposed = exposed_names(metric_families(cluster.metrics_ports[controller], timeout=30))
    wanted = documented()[controller]
    assert wanted, controller
    assert wanted <= exposed, f"{controller} does not expose {sorted(wanted - exposed)}"


@contextmanager
def restarted(controller: str, env: dict[str, str]) -> Iterator[None]:
    localdev.restart(controller, env)
    try:
        yield
    finally:
        localdev.restart(controller)


def failing_trainer(name: str) -> dict[str, Any]:
    fail = {"metadata": {"annotations": {"sim.trainer.operator.kubeflow.org/fail-after": "200ms"}}}
    return trainer_manifest(
        name,
        env=[{"name": "API_TOKEN", "value": CANARY}],
        topology={"workers": 1},
        runPolicy={"backoffLimit": 0},
        podTemplateOverrides={"worker": fail},
    )


def test_a_failed_run_is_notified_with_retries_and_no_secret(cluster: Cluster, namespace: str, tmp_path: Path) -> None:
    # The run's first attempt is answered "unavailable": retried. (Only this run's: the restarted
    # controller may notify another test's recent failure first, whose namespace may be gone.)
    receiver = Receiver(statuses=[503], answers=lambda body: b"doomed" in body)
    url_file = tmp_path / "notify-url"
    url_file.write_text(f"http://127.0.0.1:{receiver.port}/hooks/T000/B000/XXXX\n")
    env = {"TRAINEROP_NOTIFY_URL_FILE": str(url_file), "TRAINEROP_NOTIFY_FORMAT": "slack"}
    with receiver, restarted("audit", env):
        cluster.apply(failing_trainer("doomed"), namespace)

        def delivered() -> list[Received]:
            return [r for r in receiver.requests if b"doomed" in r.body and r.status == 200]

        (request,) = eventually(delivered, timeout=120, what="the Failed notification delivered")
        # Its first request was answered 503 and retried with the same payload.
        first = next(r for r in receiver.requests if b"doomed" in r.body)
        assert first.status == 503
        assert any(r.status == 200 and r.body == first.body for r in receiver.requests[1:])
        # ... and said so once, in a Warning Event on that Trainer.
        said = cluster.kubectl(
            "get", "events", "-A", "--field-selector", "reason=NotificationFailed", "-o", "jsonpath={.items[*].message}"
        )
        assert "notification was not delivered (" in said, said
        assert "tried again with backoff" in said, said
        assert request.path == "/hooks/T000/B000/XXXX"
        assert request.headers["Content-Type"] == "application/json"
        message = json.loads(request.body)
        assert message["text"].startswith(f"Trainer {namespace}/doomed failed: ")
        assert message["blocks"][0]["text"]["text"] == f"Trainer {namespace}/doomed failed"
        assert "*Reason:* BackoffLimitExceeded" in message["blocks"][2]["text"]["text"]
        assert all(CANARY.encode() not in r.body for r in receiver.requests)
        obj = eventually(
            lambda: (
                (o := cluster.get("trainer", "doomed", namespace))["status"]
                .get("audit", {})
                .get("notified", {})
                .get("conditions", {})
                .get("Failed")
                and o
            ),
            what="the notification recorded in status.audit.notified",
        )
        failed = next(c for c in obj["status"]["conditions"] if c["type"] == "Failed")
        assert obj["status"]["audit"]["notified"]["conditions"]["Failed"] == failed["lastTransitionTime"]
        sent = {"event": "Failed", "outcome": "sent"}
        assert cluster.metric("audit", "audit_notifications_total", sent) >= 1
        # a later reconcile (here: after a label) sends nothing again
        cluster.kubectl("label", "trainer", "doomed", "-n", namespace, "seen=yes")
        eventually(
            lambda: cluster.get("trainer", "doomed", namespace)["metadata"]["labels"].get("seen"), what="the label"
        )
        assert len(delivered()) == 1


def spans_in(requests: list[Received]) -> list[Any]:
    spans: list[Any] = []
    for request in requests:
        assert request.path == "/v1/traces"
        export = ExportTraceServiceRequest()
        export.ParseFromString(request.body)
        for resource in export.resource_spans:
            for scope in resource.scope_spans:
                spans.extend((resource, span) for span in scope.spans)
    return spans


def attribute(span: Any, key: str) -> str | None:
    return next((a.value.string_value for a in span.attributes if a.key == key), None)


def test_spans_reach_an_otlp_receiver_when_configured(cluster: Cluster, namespace: str) -> None:
    with (
        Receiver() as receiver,
        restarted(
            "trainer",
            {"TRAINEROP_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver.port}", "OTEL_BSP_SCHEDULE_DELAY": "200"},
        ),
    ):
        name = f"traced-{uuid.uuid4().hex[:4]}"
        cluster.apply(trainer_manifest(name), namespace)

        def named(span_name: str) -> Callable[[], list[Any] | None]:
            def found() -> list[Any] | None:
                spans = [
                    (r, s)
                    for r, s in spans_in(receiver.requests)
                    if s.name == span_name and attribute(s, "trainer_operator.trainer") == name
                ]
                return spans or None

            return found

        (resource, reconcile), *_ = eventually(named("reconcile"), what="a reconcile span")
        service = next(a.value.string_value for a in resource.resource.attributes if a.key == "service.name")
        assert service == "trainer-operator-trainer"
        assert attribute(reconcile, "k8s.namespace.name") == namespace
        assert attribute(reconcile, "trainer_operator.result") == "ok"
        (_, spawn), *_ = eventually(named("pod.spawn"), timeout=90, what="the pod spawn span")
        assert attribute(spawn, "k8s.pod.name") == f"{name}-worker-0"
        assert spawn.end_time_unix_nano >= spawn.start_time_unix_nano

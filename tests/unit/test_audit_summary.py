"""The audit controller holds status.audit for --summary-delay-seconds and, meanwhile, decides from
what it holds: a write that fails keeps it held, a body older than its last write changes nothing,
and the status saying it ends the hold (decide.summary_hold is the pure rule; this is the adapter)."""

from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any, cast

from trainerop_audit.config import AuditConfig
from trainerop_audit.controller import HELD, AuditController, observed
from trainerop_common.clock import FixedClock
from trainerop_common.config import WebhookConfig
from trainerop_common.runtime import Runtime

WANTED = {"records": 2, "recorded": {"created": True, "restarts": 0, "conditions": {"Running": "t1"}}}


class Writer:
    def __init__(self) -> None:
        self.stale_below = 0

    def is_stale(self, body: dict[str, Any]) -> bool:
        return int(body["metadata"]["resourceVersion"]) < self.stale_below


def controller() -> tuple[AuditController, FixedClock, Writer]:
    clock, writer = FixedClock(datetime(2026, 1, 1, tzinfo=UTC)), Writer()
    trainers: dict[tuple[str, str], Any] = {("ns", "t"): {}}
    config = SimpleNamespace(webhook=WebhookConfig())
    runtime = SimpleNamespace(kube=None, clock=clock, writer=writer, trainers=trainers, config=config)
    return AuditController(cast(Runtime, runtime), AuditConfig(summary_delay_seconds=30.0)), clock, writer


def body(version: int, audit: dict[str, Any] | None = None) -> dict[str, Any]:
    status = {"audit": audit} if audit is not None else {}
    meta = {"name": "t", "namespace": "ns", "uid": "u", "resourceVersion": str(version)}
    return {"metadata": {**meta, "creationTimestamp": "2026-01-01T00:00:00Z"}, "status": status}


def held_gauge() -> float:
    (family,) = HELD.collect()
    return float(family.samples[0].value)


def test_a_held_summary_is_what_the_controller_decides_from_until_the_status_says_it() -> None:
    audit, clock, writer = controller()
    assert audit.summary_wait(body(1), WANTED) == 30.0  # held
    assert held_gauge() == 1
    facts = audit.with_held(body(1), observed(body(1), clock.now()))
    assert facts.recorded.conditions == {"Running": "t1"}  # what it holds, not the empty status
    clock.advance(31)
    assert audit.summary_wait(body(2), WANTED) == 0.0  # due: written now ...
    assert audit.with_held(body(2), observed(body(2), clock.now())).recorded.created  # ... still held if it fails
    writer.stale_below = 5
    assert audit.summary_wait(body(3), WANTED) == 0.0  # older than the write: nothing changes
    assert ("ns", "t") in audit._held
    assert audit.summary_wait(body(6, WANTED), WANTED) == 0.0  # the status says it: the hold ends
    assert audit._held == {}
    assert held_gauge() == 0


def test_a_deleted_trainers_hold_is_dropped() -> None:
    audit, _, _ = controller()
    assert audit.summary_wait(body(1), WANTED) == 30.0
    trainers = cast(dict[Any, Any], audit.rt.trainers)
    trainers.clear()  # deleted while held
    trainers[("ns", "o")] = {}
    other = {**body(2), "metadata": {**body(2)["metadata"], "name": "o"}}
    audit.summary_wait(other, WANTED)
    assert list(audit._held) == [("ns", "o")]

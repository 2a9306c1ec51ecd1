"""The quota controller's metrics and spans (docs/metrics.md, docs/tracing.md)."""

from collections.abc import Mapping
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

from trainerop_common.api.trainer import QuotaStatus
from trainerop_common.tracing import record_span

from .model import Decision, Observed, Plan

ADMITTED = Gauge("quota_admitted_trainers", "Trainers holding a quota admission, by capacity type.", ["capacity_type"])
PENDING = Gauge("quota_pending_trainers", "Trainers under a QuotaPolicy waiting for an admission.")
RENEGOTIATION_SECONDS = Histogram(
    "quota_renegotiation_seconds",
    "From a spot reclaim under an admitted run (notice taint, lost node) to its new admission or revocation.",
    buckets=(0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800),
)
PLAN_SECONDS = Histogram(
    "quota_plan_seconds",
    "Time one admission plan over every Trainer took.",
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)
PROACTIVE_PREDICTIONS = Counter(
    "quota_proactive_predictions_total",
    "Nodes predicted to degrade (proactive mode), by the signal that was hot (temperature, memoryCopy, power, "
    "memoryPressure, xid, ecc).",
    ["signal"],
)
PROACTIVE_PREDICTED = Gauge("quota_proactive_predicted_nodes", "Nodes tainted as predicted to degrade now.")
PROACTIVE_SCRAPE_FAILURES = Counter(
    "quota_proactive_scrape_failures_total", "Node scrapes (proactive mode) where none of its exporters answered."
)
COST_PER_HOUR = Gauge(
    "quota_cost_per_hour",
    "Estimated cost per hour of the admitted runs at the policy's prices (basis=admitted), and of the "
    "same resources all on-demand (basis=on_demand).",
    ["namespace", "basis"],
)


def record_renegotiation(body: Mapping[str, Any], decision: Decision, now: datetime) -> None:
    """The span ``quota.renegotiation``: from the reclaim notice (or the loss) to this decision."""
    seconds = decision.renegotiation_seconds or 0.0
    quota = decision.quota
    record_span(
        "quota.renegotiation",
        now - timedelta(seconds=seconds),
        now,
        {
            "k8s.namespace.name": body["metadata"]["namespace"],
            "trainer.name": body["metadata"]["name"],
            "quota.outcome": decision.condition.reason,
            "quota.capacity_type": str(quota.get("capacityType") or ""),
            "quota.workers": int(quota.get("workers") or 0),
        },
    )


def export(obs: Observed, result: Plan) -> None:
    """The gauges of admitted and pending runs and of their cost, from a plan."""
    admitted = {"spot": 0, "on-demand": 0}
    pending = 0
    cost: dict[tuple[str, str], Decimal] = {}
    for t in obs.trainers:
        decision = result.decisions.get(t.uid)
        if decision is None or decision.condition.reason in ("NoQuotaPolicy", "Released", "Suspended"):
            continue
        quota = QuotaStatus.model_validate(decision.quota)
        if quota.contribution is not None and quota.contribution.grant is not None and quota.capacity_type:
            admitted[quota.capacity_type] += 1
            if quota.cost is not None:
                for basis, value in (
                    ("admitted", quota.cost.per_hour),
                    ("on_demand", quota.cost.on_demand_per_hour),
                ):
                    cost[(t.namespace, basis)] = cost.get((t.namespace, basis), Decimal(0)) + Decimal(value)
        else:
            pending += 1
    for kind, n in admitted.items():
        ADMITTED.labels(kind).set(n)
    PENDING.set(pending)
    COST_PER_HOUR.clear()
    for (namespace, basis), amount in cost.items():
        COST_PER_HOUR.labels(namespace, basis).set(float(amount))

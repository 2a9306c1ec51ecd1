"""The quota controller's decision core: pure, table-tested, no I/O.

For now a Trainer is admitted when no QuotaPolicy covers its namespace, or when the whole run
(every replica's requests) fits each policy's ``hard`` limits on its own. Accounting for the
other Trainers' usage and spot capacity builds on this.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from trainerop_common.api.quota import QuotaPolicySpec
from trainerop_common.api.trainer import TrainerSpec
from trainerop_common.conditions import Desired
from trainerop_common.quantity import format_quantity, parse_quantity

CONDITION = "QuotaAdmitted"
OWNED_FIELDS = ("quota",)


@dataclass(frozen=True)
class Decision:
    status: dict[str, Any]
    conditions: tuple[Desired, ...]
    problem: Desired | None = None


def replicas(spec: TrainerSpec) -> int:
    return spec.topology.workers + spec.topology.parameter_servers


def requested(spec: TrainerSpec) -> dict[str, Decimal]:
    """Total resources of the run: per-pod requests (limits where no request) times replicas."""
    per_pod: dict[str, Decimal] = {}
    if spec.resources is not None:
        for name, value in (spec.resources.limits or {}).items():
            per_pod[name] = parse_quantity(value)
        for name, value in (spec.resources.requests or {}).items():
            per_pod[name] = parse_quantity(value)
    n = replicas(spec)
    return {name: amount * n for name, amount in per_pod.items()}


def selects(policy: QuotaPolicySpec, namespace_labels: Mapping[str, str]) -> bool:
    wanted = policy.namespace_selector.match_labels if policy.namespace_selector else None
    return all(namespace_labels.get(k) == v for k, v in (wanted or {}).items())


def decide(
    spec: TrainerSpec, policies: Sequence[tuple[str, QuotaPolicySpec]], namespace_labels: Mapping[str, str]
) -> Decision:
    covering = sorted((name, p) for name, p in policies if selects(p, namespace_labels))
    if not covering:
        return Decision(
            status={}, conditions=(Desired.true(CONDITION, "NoQuotaPolicy", "no QuotaPolicy covers this namespace"),)
        )
    total = requested(spec)
    for name, policy in covering:
        for resource, limit in sorted(policy.hard.items()):
            want, allowed = total.get(resource, Decimal(0)), parse_quantity(limit)
            if want > allowed:
                problem = Desired.false(
                    CONDITION,
                    "ExceedsQuota",
                    f"the run requests {format_quantity(want)} {resource} ({replicas(spec)} replicas) but "
                    f"QuotaPolicy {name!r} allows {format_quantity(allowed)}; lower topology.workers or "
                    f"spec.resources, or ask an admin to raise the policy",
                )
                return Decision(status={"quota": {"policy": name}}, conditions=(problem,), problem=problem)
    names = ", ".join(name for name, _ in covering)
    return Decision(
        status={"quota": {"policy": covering[0][0]}},
        conditions=(Desired.true(CONDITION, "FitsQuota", f"fits QuotaPolicy {names}"),),
    )

"""Admission of the runs that wait (pure): the first capacity type in the run's preference order
where the namespace's budget and the nodes hold its whole minimum gang — the most workers within
the elastic bounds, at full size before lowered resources; otherwise it waits, with no pod started
(all-or-nothing), and the condition says why. Also the runs that reserve nothing: finished,
suspended or deleted, ungoverned, or unsizable."""

from collections.abc import Sequence
from typing import Any

from trainerop_common.api.quota import CapacityType
from trainerop_common.conditions import find
from trainerop_common.topology import worker_bounds

from .cost import cost_section, describe
from .ledger import Shape, budget, options, shape
from .model import CONDITION, Decision, PolicyInfo, TrainerInfo, condition, preference, priority
from .planner import Places, Planner


def admit(p: Planner, t: TrainerInfo, policy: PolicyInfo) -> None:
    prio = priority(policy, t.spec)
    if prio is None:
        names = ", ".join(c.name for c in policy.spec.priority_classes or ()) or "none"
        asked = t.spec.scheduling.priority_class_name if t.spec.scheduling else ""
        message = (
            f"spec.scheduling.priorityClassName {asked!r} is not defined by QuotaPolicy {policy.name} "
            f"(it defines: {names})"
        )
        p.summary(policy)["pending"] += 1
        p.decisions[t.uid] = Decision(
            p.pending_status(t, policy, None), condition("False", "PriorityClassNotFound", message)
        )
        return
    kinds = preference(policy, t.spec)
    suggestion = p.suggestion(t)
    hints = suggestion.nodes if suggestion is not None else {}  # tried first, each where it fits
    for option in options(t, policy, kinds):
        # Pods that run from before any admission (a policy came later) keep their place.
        bound = p.bound(t, None, option.kind)
        if p.try_option(t, policy, option, Places(bound, hints)):
            n = t.quota.renegotiations
            where = p.reserve(t, policy, option, Places(bound, hints))
            s = shape(t, option.workers, option.resources)
            status = p.admitted(t, policy, prio, option, f"{option.kind}-{n}", where, n, None)
            message = p.admitted_message(policy, option, s)
            fallback = f" ({kinds[0]} has no room for it)" if option.kind != kinds[0] else ""
            p.decisions[t.uid] = Decision(
                status,
                condition("True", "Admitted", message),
                (("Normal", "Admitted", message + fallback + p.lowered(option)),),
            )
            return
    p.summary(policy)["pending"] += 1
    p.decisions[t.uid] = waits(p, t, policy, prio, kinds)


def why_waiting(p: Planner, t: TrainerInfo, policy: PolicyInfo, kinds: Sequence[CapacityType]) -> tuple[str, str]:
    """(reason, message) of a run no capacity type holds now: its minimum exceeds every budget, or
    the budget is in use, or the nodes are full."""
    lo, _ = worker_bounds(t.spec)
    smallest = shape(t, lo, None)
    if not kinds:
        return "ExceedsQuota", f"QuotaPolicy {policy.name} allows neither capacity type for the run's preference"
    reasons, too_big = [], True
    for kind in kinds:
        limits = budget(policy, kind)
        over = {n: a for n, a in smallest.reserved.items() if n in limits and a > limits[n]}
        if over:
            reasons.append(f"{kind}: more than the budget ({describe({n: limits[n] for n in over})})")
            continue
        too_big = False
        in_budget = p.ledger.within_budget(policy, t.namespace, kind, smallest.reserved)
        reasons.append(
            f"{kind}: " + (nodes_short(p, kind, smallest) if in_budget else "the namespace's budget is in use")
        )
    need = f"{sum(smallest.counts.values())} pods ({describe(smallest.reserved)})"
    if too_big:
        return "ExceedsQuota", (
            f"the run needs {need} but QuotaPolicy {policy.name} allows less per namespace ("
            + "; ".join(reasons)
            + "); lower topology.workers or spec.resources, or ask an admin to raise the budget"
        )
    return "WaitingForCapacity", f"waiting for capacity for {need} — " + "; ".join(reasons)


def nodes_short(p: Planner, kind: CapacityType, s: Shape) -> str:
    """Why the nodes do not hold the run: no node takes some role's pods at all, its required
    level, or room."""
    closed = p.ledger.closed_roles(kind, s)
    if closed:
        return (
            f"no node takes its {', '.join(closed)} pods (their nodeSelector, or node taints they do not "
            "tolerate: add tolerations through a profile or podTemplateOverrides)"
        )
    if s.packing is not None and s.packing.mode == "Required":
        return f"no single {s.packing.level} holds the run (spec.scheduling.packing, else its profile's packing)"
    return "not enough free nodes"


def waits(p: Planner, t: TrainerInfo, policy: PolicyInfo, prio: int, kinds: Sequence[CapacityType]) -> Decision:
    """The decision for a run that waits, and an Event when why it waits is new."""
    reason, message = why_waiting(p, t, policy, kinds)
    before = find(t.conditions, CONDITION)
    if (
        reason == "WaitingForCapacity"
        and before is not None
        and (before.reason, before.observed_generation) == ("CapacityLost", t.generation)
    ):
        reason, message = before.reason, before.message  # still why it waits
    events: tuple[tuple[str, str, str], ...] = ()
    if before is None or before.reason != reason or before.observed_generation != t.generation:
        events = (("Warning" if reason == "ExceedsQuota" else "Normal", reason, message),)
    return Decision(p.pending_status(t, policy, prio), condition("False", reason, message), events)


def released(p: Planner, t: TrainerInfo, policy: PolicyInfo | None) -> Decision:
    """Finished, suspended or being deleted: nothing reserved any more."""
    if t.finished or t.deleting:
        out = t.quota.model_copy(update={"capacity_type": None, "workers": None, "contribution": None}).to_k8s()
        if t.quota.cost is not None and policy is not None:
            cost = cost_section(t, policy, None, None, t.finished or p.now)
            if cost is not None:
                out["cost"] = cost
        return Decision(out, condition("True", "Released", "the run is over; nothing is reserved for it"))
    pending = p.pending_status(t, policy, t.quota.priority) if policy else {}
    return Decision(pending, condition("False", "Suspended", "the run is suspended; it queues again when resumed"))


def ungoverned(p: Planner, t: TrainerInfo) -> Decision:
    # A run admitted before its policy went away keeps its admission (its pods stay).
    # Its placement goes: nothing keeps the nodes free for it any more (nor re-places it).
    keep: dict[str, Any] = {}
    if t.grant is not None and t.quota.contribution is not None:
        contribution = t.quota.contribution.model_copy(update={"grant": t.grant.model_copy(update={"placement": None})})
        keep = t.quota.model_copy(update={"policy": None, "cost": None, "contribution": contribution}).to_k8s()
    return Decision(keep, condition("True", "NoQuotaPolicy", "no QuotaPolicy covers this namespace"))

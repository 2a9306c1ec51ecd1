"""The quota controller's decision core: pure, table-tested, no I/O.

``plan(world)`` decides for every Trainer at once, because admission is a shared resource:

1. Trainers already admitted keep their admission (no preemption) and their reservation is
   counted first. One whose pods sit on a lost or reclaimed spot node is re-checked: if its
   pods still fit on its capacity type it stays; otherwise it is renegotiated — at once when its
   pods are gone, after a checkpoint commits (or the policy's grace runs out) when they still run.
2. Renegotiations, then waiting Trainers by priority then age (best-effort FIFO: a smaller run
   behind a big one may start first), get the first capacity type in their preference order
   where the namespace's budget and the nodes hold the whole minimum gang: the most workers
   within the elastic bounds, at full size before lowered resources. Nothing fits: they wait,
   with no pod started (all-or-nothing).

Node fit is simulated pod by pod (best fit) on the free capacity the pods already on each node
leave; an admitted run's pods that are not yet on a node are placed first.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from trainerop_common.api import Contribution, Grant
from trainerop_common.api.base import Condition, ConditionStatus, PodContribution, ResourceRequirements
from trainerop_common.api.quota import CapacityType, Preference, QuotaPolicySpec
from trainerop_common.api.trainer import CostStatus, QuotaStatus, RenegotiationStatus, TrainerSpec
from trainerop_common.clock import parse_time, rfc3339
from trainerop_common.conditions import Desired, find
from trainerop_common.contracts import ADMISSION_ANNOTATION
from trainerop_common.quantity import format_quantity, parse_quantity

from .capacity import (
    ROLES,
    NodeInfo,
    PodInfo,
    Resources,
    Role,
    adjusted,
    fits,
    node_usage,
    placement,
    role_counts,
    role_requests,
    subtract,
    total,
    worker_bounds,
)

CONDITION = "QuotaAdmitted"
OWNED_FIELDS = ("quota",)
ORDER: dict[Preference, tuple[CapacityType, ...]] = {
    "SpotFirst": ("spot", "on-demand"),
    "OnDemandFirst": ("on-demand", "spot"),
    "SpotOnly": ("spot",),
    "OnDemandOnly": ("on-demand",),
}
GIB = Decimal(2**30)
PER_GIB = ("memory", "ephemeral-storage")


@dataclass(frozen=True)
class PolicyInfo:
    name: str
    spec: QuotaPolicySpec


@dataclass(frozen=True)
class TrainerInfo:
    uid: str
    namespace: str
    name: str
    generation: int
    created: str
    spec: TrainerSpec
    quota: QuotaStatus = field(default_factory=QuotaStatus)
    conditions: Sequence[Condition] = ()
    profile: PodContribution | None = None
    finished: str | None = None  # completion time of a Succeeded or Failed run
    deleting: bool = False
    last_commit: str | None = None  # status.checkpoint.lastCommitTime

    @property
    def grant(self) -> Grant | None:
        c = self.quota.contribution
        return c.grant if c is not None else None


@dataclass(frozen=True)
class World:
    now: datetime
    trainers: Sequence[TrainerInfo]
    policies: Sequence[PolicyInfo]
    namespace_labels: Mapping[str, Mapping[str, str]]
    nodes: Sequence[NodeInfo]
    pods: Sequence[PodInfo]


@dataclass(frozen=True)
class Verdict:
    quota: dict[str, Any]  # the whole status.quota section ({} removes it)
    condition: Desired
    events: tuple[tuple[str, str, str], ...] = ()
    renegotiation_seconds: float | None = None  # from the reclaim to this decision
    requeue_after: float | None = None


@dataclass(frozen=True)
class PolicySummary:
    admitted: int = 0
    pending: int = 0
    used: Mapping[CapacityType, Resources] = field(default_factory=dict)


@dataclass(frozen=True)
class Plan:
    verdicts: Mapping[str, Verdict]  # by Trainer uid
    policies: Mapping[str, PolicySummary]


@dataclass(frozen=True)
class Option:
    kind: CapacityType
    workers: int
    resources: ResourceRequirements | None
    percent: int


def policy_for(policies: Sequence[PolicyInfo], labels: Mapping[str, str]) -> PolicyInfo | None:
    """The covering policy with the most specific selector (then by name)."""

    def wanted(p: PolicyInfo) -> dict[str, str]:
        return (p.spec.namespace_selector.match_labels if p.spec.namespace_selector else None) or {}

    covering = [p for p in policies if all(labels.get(k) == v for k, v in wanted(p).items())]
    return min(covering, key=lambda p: (-len(wanted(p)), p.name), default=None)


def priority(policy: PolicyInfo, spec: TrainerSpec) -> int | None:
    """The Trainer's priority value; None when it names a class the policy does not define."""
    name = spec.scheduling.priority_class_name if spec.scheduling else None
    if name is None:
        return 0
    return next((c.value for c in policy.spec.priority_classes or () if c.name == name), None)


def preference(policy: PolicyInfo, spec: TrainerSpec) -> tuple[CapacityType, ...]:
    own = spec.scheduling.preference if spec.scheduling else None
    budgets = policy.spec.budgets
    allowed = {"spot": budgets.spot is not None, "on-demand": budgets.on_demand is not None}
    return tuple(k for k in ORDER[own or policy.spec.preference] if allowed[k])


def budget(policy: PolicyInfo, kind: CapacityType) -> Resources:
    raw = policy.spec.budgets.spot if kind == "spot" else policy.spec.budgets.on_demand
    return {name: parse_quantity(v) for name, v in (raw or {}).items()}


def describe(resources: Mapping[str, Decimal]) -> str:
    def show(name: str, amount: Decimal) -> str:
        return f"{format_quantity(amount / GIB)}Gi {name}" if name in PER_GIB else f"{format_quantity(amount)} {name}"

    return ", ".join(show(n, a) for n, a in sorted(resources.items()) if a > 0 and n != "pods")


def money(amount: Decimal) -> str:
    return str(amount.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP))


def hourly(policy: PolicyInfo, kind: CapacityType, reserved: Mapping[str, Decimal]) -> Decimal | None:
    prices = policy.spec.prices
    table = (prices.spot if kind == "spot" else prices.on_demand) if prices else None
    if not table:
        return None
    cost = Decimal(0)
    for name, amount in reserved.items():
        if name in table:
            cost += (amount / GIB if name in PER_GIB else amount) * Decimal(table[name])
    return cost


Slot = tuple[Role, int]  # a replica: role and index
Want = tuple[Slot, Resources, Mapping[str, str], str | None]  # its requests, nodeSelector, node hint


class Ledger:
    """Free capacity while the plan is made: per node, per namespace budget, per capacity type."""

    def __init__(self, world: World) -> None:
        self.nodes = {n.name: n for n in world.nodes}
        used = node_usage(world.pods)
        self.free: dict[str, Resources] = {}
        for node in world.nodes:
            free = dict(node.allocatable)
            subtract(free, used.get(node.name, {}))
            self.free[node.name] = free
        self.debt: dict[CapacityType, Resources] = {}  # admitted pods the simulation could not place
        self.spent: dict[tuple[str, CapacityType], Resources] = {}  # (namespace, type) -> reserved

    def place(
        self,
        kind: CapacityType,
        wants: Sequence[Want],
        commit: bool,
        released: Sequence[tuple[str, Resources]] = (),
    ) -> tuple[bool, dict[Slot, str]]:
        """Place each replica on a usable node of ``kind``: its hint when that still fits, else the
        fullest node that holds it (best fit); the largest pods first, then by role and index.
        ``released`` are pods about to be removed (a shrink): their room counts as free. Returns
        whether all fit and where each went."""
        free = {name: dict(f) for name, f in self.free.items()}
        for node, requests in released:
            if node in free:
                subtract(free[node], {k: -v for k, v in requests.items()})  # given back
        left: list[Resources] = []
        where: dict[Slot, str] = {}
        biggest_first = sorted(wants, key=lambda w: w[0])
        biggest_first.sort(key=lambda w: sorted(w[1].items()), reverse=True)  # stable: index order kept
        for slot, requests, selector, hint in biggest_first:
            candidates = [
                n
                for n in self.nodes.values()
                if n.kind == kind
                and n.schedulable
                and all(n.labels.get(k) == v for k, v in selector.items())
                and fits(free[n.name], requests)
            ]
            if not candidates:
                left.append(requests)
                continue
            best = next((n for n in candidates if n.name == hint), None) or min(
                candidates,
                key=lambda n: (*(free[n.name].get(r, Decimal(0)) for r in ("nvidia.com/gpu", "cpu", "memory")), n.name),
            )
            subtract(free[best.name], requests)
            where[slot] = best.name
        pool = total(
            (f, 1) for name, f in free.items() if self.nodes[name].kind == kind and self.nodes[name].schedulable
        )
        debt = total([(d, 1) for d in left] + [(self.debt.get(kind, {}), 1)])
        ok = not left and fits(pool, debt)
        if commit:
            self.free = free
            self.debt[kind] = debt
        return ok, where

    def take(self, node: str, kind: CapacityType, requests: Resources, selector: Mapping[str, str]) -> bool:
        """Reserve room for one pod on ``node`` if it is a usable node of ``kind`` and has it."""
        n = self.nodes.get(node)
        if n is None or n.kind != kind or not n.schedulable or not fits(self.free[node], requests):
            return False
        if any(n.labels.get(k) != v for k, v in selector.items()):
            return False
        subtract(self.free[node], requests)
        return True

    def owe(self, kind: CapacityType, requests: Resources) -> None:
        """An admitted pod no node has room for now: later admissions must leave room for it."""
        self.debt[kind] = total([(self.debt.get(kind, {}), 1), (requests, 1)])

    def credit(self, node: str, requests: Resources) -> None:
        if node in self.free:
            subtract(self.free[node], {k: -v for k, v in requests.items()})

    def within_budget(self, policy: PolicyInfo, namespace: str, kind: CapacityType, want: Resources) -> bool:
        limits = budget(policy, kind)
        spent = self.spent.get((namespace, kind), {})
        return all(spent.get(n, Decimal(0)) + want.get(n, Decimal(0)) <= limit for n, limit in limits.items())

    def spend(self, namespace: str, kind: CapacityType, reserved: Resources) -> None:
        into = self.spent.setdefault((namespace, kind), {})
        for name, amount in reserved.items():
            into[name] = into.get(name, Decimal(0)) + amount


@dataclass(frozen=True)
class Shape:
    """A Trainer's pods under one option: what each role's pod asks and where it may go."""

    counts: Mapping[Role, int]
    requests: Mapping[Role, Resources]
    selectors: Mapping[Role, Mapping[str, str]]

    @property
    def reserved(self) -> Resources:
        return total((self.requests[r], n) for r, n in self.counts.items())

    def slots(self) -> list[Slot]:
        return [(r, i) for r, n in self.counts.items() for i in range(n)]

    def wants(self, bound: Mapping[Slot, str], hints: Mapping[Slot, str]) -> list[Want]:
        """The replicas without a pod on a node yet."""
        return [(s, self.requests[s[0]], self.selectors[s[0]], hints.get(s)) for s in self.slots() if s not in bound]


@dataclass
class Held:
    """What an admitted run holds during a plan (pass 1), and what pass 2 changes."""

    option: Option
    shape: Shape
    bound: dict[Slot, str]  # replicas with a pod on a healthy node
    hints: dict[Slot, str]  # the admitted placement
    placed: dict[Slot, str]  # where each replica is or will be
    missing: list[Slot] = field(default_factory=list)  # replicas without a place now
    credits: list[tuple[str, Resources]] = field(default_factory=list)  # taken from the ledger for them


def shape(t: TrainerInfo, workers: int, resources: ResourceRequirements | None) -> Shape:
    counts = role_counts(t.spec, workers)
    overrides = t.spec.pod_template_overrides

    def selector(role: Role) -> dict[str, str]:
        own = getattr(overrides, "parameter_server" if role == "ps" else role, None) if overrides else None
        return {
            **((t.profile.node_selector if t.profile else None) or {}),
            **(((own or {}).get("spec") or {}).get("nodeSelector") or {}),
        }

    roles = [r for r, n in counts.items() if n]
    return Shape(
        counts={r: counts[r] for r in roles},
        requests={r: role_requests(t.spec, r, t.profile, resources) for r in roles},
        selectors={r: selector(r) for r in roles},
    )


def options(t: TrainerInfo, policy: PolicyInfo, kinds: Sequence[CapacityType]) -> list[Option]:
    """Every admissible option, best first: capacity order, then full-size pods, then most workers."""
    lo, hi = worker_bounds(t.spec)
    adjust = policy.spec.adjustment
    percents = [100] + (
        sorted({p for p in (75, 50, 25, adjust.min_percent) if p >= adjust.min_percent}, reverse=True) if adjust else []
    )
    out = []
    for kind in kinds:
        for percent in percents:
            resources = adjusted(t.spec, t.profile, adjust.resources, percent) if adjust else None
            if percent < 100 and resources is None:
                continue  # nothing to lower
            for workers in range(hi, lo - 1, -1):
                out.append(Option(kind, workers, resources, percent))
    return out


def hints_of(grant: Grant | None) -> dict[Slot, str]:
    out: dict[Slot, str] = {}
    placed = (grant.placement if grant else None) or {}
    for role in ROLES:
        for i, node in enumerate(placed.get(role, ())):
            if node:
                out[(role, i)] = node
    return out


def _condition(status: ConditionStatus, reason: str, message: str) -> Desired:
    return Desired(CONDITION, status, reason, message)


MAX_NODES_NAMED = 64  # status.quota.renegotiation.nodes


class Planner:
    def __init__(self, world: World) -> None:
        self.world = world
        self.ledger = Ledger(world)
        self.now = rfc3339(world.now)
        self.verdicts: dict[str, Verdict] = {}
        self.summaries: dict[str, dict[str, Any]] = {}
        self.pods: dict[str, list[PodInfo]] = {}
        for pod in world.pods:
            if pod.trainer_uid:
                self.pods.setdefault(pod.trainer_uid, []).append(pod)
        self.nodes = {n.name: n for n in world.nodes}
        self.requests: dict[tuple[str, str, int], Resources] = {}  # (uid, role, index) -> its pod's requests
        self.lost = {n.name: n.lost for n in world.nodes if n.lost}
        self.reclaimed = {n.name: n.reclaimed for n in world.nodes if n.reclaimed and not n.lost}
        for pod in world.pods:
            if pod.node and pod.node not in self.nodes:
                self.lost[pod.node] = f"node {pod.node} no longer exists"

    # -- helpers ------------------------------------------------------------------------------
    def summary(self, policy: PolicyInfo) -> dict[str, Any]:
        return self.summaries.setdefault(policy.name, {"admitted": 0, "pending": 0, "used": {}})

    def bound(self, t: TrainerInfo, admission: str | None, kind: CapacityType | None = None) -> dict[Slot, str]:
        """Replicas of the run with a pod on a healthy node (of ``kind``), created under
        ``admission`` or before any: they keep their place. A pod being deleted keeps it for its
        replacement (it still holds the node until it is gone); a replica whose pod succeeded
        needs no place ("")."""
        out: dict[Slot, str] = {}
        ordered = sorted(self.pods.get(t.uid, ()), key=lambda p: (not p.succeeded, not p.deleting))
        for pod in ordered:  # the live pod of a replica decides, then one being deleted, then a finished one
            if pod.role not in ROLES or pod.admission not in (admission, None):
                continue
            slot: Slot = (pod.role, pod.index)
            if pod.succeeded:
                out[slot] = ""
                continue
            self.requests[(t.uid, pod.role, pod.index)] = pod.requests
            node = self.nodes.get(pod.node)
            if (
                node is not None
                and pod.node not in self.lost
                and pod.node not in self.reclaimed
                and (kind is None or node.kind == kind)
            ):
                out[slot] = pod.node
        return out

    def alive(self, t: TrainerInfo, slot: Slot) -> bool:
        """Whether the replica has an unfinished pod on a node that still exists."""
        return any(
            (p.role, p.index) == slot
            and not p.deleting
            and not p.succeeded
            and p.node in self.nodes
            and p.node not in self.lost
            for p in self.pods.get(t.uid, ())
        )

    def endangered(self, t: TrainerInfo) -> tuple[list[str], list[str]]:
        """Nodes under the run's live pods that are lost, and that are being reclaimed."""
        lost, reclaimed = set(), set()
        for pod in self.pods.get(t.uid, ()):
            if pod.deleting or pod.succeeded:
                continue
            if pod.node in self.lost:
                lost.add(pod.node)
            elif pod.node in self.reclaimed:
                reclaimed.add(pod.node)
        return sorted(lost), sorted(reclaimed)

    def surplus(self, t: TrainerInfo, s: Shape, bound: Mapping[Slot, str]) -> list[tuple[str, Resources]]:
        """Pods of the run on nodes that the option has no replica for (the trainer removes them)."""
        slots = set(s.slots())
        return [(node, self.requests.get((t.uid, *slot), {})) for slot, node in bound.items() if slot not in slots]

    def try_option(
        self, t: TrainerInfo, policy: PolicyInfo, option: Option, bound: Mapping[Slot, str], hints: Mapping[Slot, str]
    ) -> bool:
        s = shape(t, option.workers, option.resources)
        if not self.ledger.within_budget(policy, t.namespace, option.kind, s.reserved):
            return False
        ok, _ = self.ledger.place(option.kind, s.wants(bound, hints), False, self.surplus(t, s, bound))
        return ok

    def reserve(
        self,
        t: TrainerInfo,
        policy: PolicyInfo,
        option: Option,
        bound: Mapping[Slot, str],
        hints: Mapping[Slot, str],
    ) -> dict[str, list[str]]:
        """Take the run's resources from the ledger; returns where each replica goes (its node, or
        its earlier place / "" when it does not fit now)."""
        s = shape(t, option.workers, option.resources)
        _, where = self.ledger.place(option.kind, s.wants(bound, hints), True, self.surplus(t, s, bound))
        self.count(t, policy, option.kind, s.reserved, +1)
        nodes = {**hints, **where, **bound}
        return {role: [nodes.get((role, i), "") for i in range(n)] for role, n in s.counts.items()}

    def cost(
        self, t: TrainerInfo, policy: PolicyInfo, kind: CapacityType | None, s: Shape | None, at: str | None = None
    ) -> dict[str, Any] | None:
        """The cost section: what ran so far accrued at the old rate, the new rate from ``at`` (now)."""
        old = t.quota.cost
        at = at or self.now
        accrued, on_demand_accrued = Decimal(0), Decimal(0)
        if old is not None:
            hours = max(Decimal((parse_time(at) - parse_time(old.accrued_at)).total_seconds()) / 3600, Decimal(0))
            accrued = Decimal(old.accrued) + Decimal(old.per_hour) * hours
            on_demand_accrued = Decimal(old.on_demand_accrued) + Decimal(old.on_demand_per_hour) * hours
        rate = hourly(policy, kind, s.reserved) if kind and s else Decimal(0)
        on_demand = hourly(policy, "on-demand", s.reserved) if s else Decimal(0)
        if rate is None or on_demand is None:
            return None
        savings = (100 * (1 - rate / on_demand)).quantize(Decimal(1)) if on_demand > 0 else Decimal(0)
        new = CostStatus(
            per_hour=money(rate),
            on_demand_per_hour=money(on_demand),
            savings_percent=int(min(max(savings, Decimal(0)), Decimal(100))),  # spot dearer than on-demand: 0
            accrued=money(accrued),
            on_demand_accrued=money(on_demand_accrued),
            accrued_at=at,
        )
        if old is not None and (old.per_hour, old.on_demand_per_hour) == (new.per_hour, new.on_demand_per_hour):
            return old.to_k8s()  # same rate: nothing to write
        return new.to_k8s()

    def admitted(
        self,
        t: TrainerInfo,
        policy: PolicyInfo,
        prio: int,
        option: Option,
        grant_id: str,
        where: dict[str, list[str]],
        renegotiations: int,
        renegotiation: RenegotiationStatus | None,
    ) -> dict[str, Any]:
        s = shape(t, option.workers, option.resources)
        pod = placement(option.kind).model_copy(update={"annotations": {ADMISSION_ANNOTATION: grant_id}})
        status = QuotaStatus(
            policy=policy.name,
            capacity_type=option.kind,
            workers=option.workers,
            priority=prio,
            admitted_time=t.quota.admitted_time if t.grant and t.grant.id == grant_id else self.now,
            renegotiations=renegotiations,
            renegotiation=renegotiation,
            contribution=Contribution(
                generation=t.generation,
                pod=pod,
                grant=Grant(id=grant_id, workers=option.workers, resources=option.resources, placement=where),
            ),
        ).to_k8s()
        if (cost := self.cost(t, policy, option.kind, s)) is not None:
            status["cost"] = cost
        return status

    def pending_status(self, t: TrainerInfo, policy: PolicyInfo, prio: int | None) -> dict[str, Any]:
        status = QuotaStatus(policy=policy.name, priority=prio, renegotiations=t.quota.renegotiations).to_k8s()
        if t.quota.cost is not None and (cost := self.cost(t, policy, None, None)) is not None:
            status["cost"] = cost  # what the run cost until it lost its admission
        return status

    # -- the plan -----------------------------------------------------------------------------
    def run(self) -> Plan:
        world = self.world
        governed: list[tuple[TrainerInfo, PolicyInfo]] = []
        for t in world.trainers:
            if t.namespace not in world.namespace_labels:
                continue  # its namespace is not seen yet: no decision without its labels
            policy = policy_for(world.policies, world.namespace_labels[t.namespace])
            if t.deleting or t.finished or t.spec.run_policy.suspend:
                self.verdicts[t.uid] = self.released(t, policy)
            elif policy is None:
                self.verdicts[t.uid] = self.ungoverned(t)
            elif (problem := self.invalid(t)) is not None:
                self.summary(policy)["pending"] += 1
                self.verdicts[t.uid] = Verdict(
                    self.pending_status(t, policy, t.quota.priority), _condition("False", "InvalidResources", problem)
                )
            else:
                governed.append((t, policy))

        admitted = sorted(
            ((t, p) for t, p in governed if t.grant is not None and t.quota.capacity_type is not None),
            key=lambda tp: (tp[0].quota.admitted_time or "", tp[0].namespace, tp[0].name),
        )
        held = {t.uid: self.hold_current(t, policy) for t, policy in admitted}
        renegotiate: list[tuple[TrainerInfo, PolicyInfo, RenegotiationStatus]] = []
        for t, policy in admitted:
            moving = self.keep(t, policy, held[t.uid])
            if moving is not None:
                renegotiate.append((t, policy, moving))

        waiting = [(t, p) for t, p in governed if t.grant is None or t.quota.capacity_type is None]
        for t, policy, why in renegotiate:
            self.move(t, policy, why)
        waiting.sort(key=lambda tp: (-(priority(tp[1], tp[0].spec) or 0), tp[0].created, tp[0].namespace, tp[0].name))
        for t, policy in waiting:
            self.admit(t, policy)

        return Plan(
            self.verdicts,
            {name: PolicySummary(s["admitted"], s["pending"], s["used"]) for name, s in sorted(self.summaries.items())},
        )

    @staticmethod
    def invalid(t: TrainerInfo) -> str | None:
        """Why the run's pods cannot be sized (a malformed quantity in an override), if so."""
        try:
            shape(t, worker_bounds(t.spec)[1], None)
        except ValueError as err:
            return f"cannot size the run's pods: {err}; fix spec.resources or spec.podTemplateOverrides"
        return None

    def released(self, t: TrainerInfo, policy: PolicyInfo | None) -> Verdict:
        """Finished, suspended or being deleted: nothing reserved any more."""
        if t.finished or t.deleting:
            out = t.quota.model_copy(update={"capacity_type": None, "workers": None, "contribution": None}).to_k8s()
            if t.quota.cost is not None and policy is not None:
                cost = self.cost(t, policy, None, None, at=t.finished)
                if cost is not None:
                    out["cost"] = cost
            return Verdict(out, _condition("True", "Released", "the run is over; nothing is reserved for it"))
        pending = self.pending_status(t, policy, t.quota.priority) if policy else {}
        return Verdict(pending, _condition("False", "Suspended", "the run is suspended; it queues again when resumed"))

    def ungoverned(self, t: TrainerInfo) -> Verdict:
        # A run admitted before its policy went away keeps its admission (its pods stay).
        # Its placement goes: nothing keeps the nodes free for it any more (nor re-places it).
        keep: dict[str, Any] = {}
        if t.grant is not None and t.quota.contribution is not None:
            contribution = t.quota.contribution.model_copy(
                update={"grant": t.grant.model_copy(update={"placement": None})}
            )
            keep = t.quota.model_copy(update={"policy": None, "cost": None, "contribution": contribution}).to_k8s()
        return Verdict(keep, _condition("True", "NoQuotaPolicy", "no QuotaPolicy covers this namespace"))

    def hold_current(self, t: TrainerInfo, policy: PolicyInfo) -> Held:
        """Pass 1 for an admitted run: what it holds now — its pods on healthy nodes, and its admitted
        nodes that still have room for its other replicas — taken from the ledger before any run
        grows, moves or is admitted."""
        grant, kind = t.grant, t.quota.capacity_type
        assert grant is not None
        assert kind is not None
        option = Option(kind, grant.workers, grant.resources, 100 if grant.resources is None else 0)
        s = shape(t, option.workers, option.resources)
        bound = self.bound(t, grant.id)
        hints = hints_of(grant)
        slots = set(s.slots())
        held = Held(option, s, bound, hints, {k: v for k, v in bound.items() if k in slots})
        for slot in s.slots():
            if slot in held.placed:
                continue
            role = slot[0]
            hint = hints.get(slot)
            if hint and self.ledger.take(hint, kind, s.requests[role], s.selectors[role]):
                held.placed[slot] = hint
                held.credits.append((hint, s.requests[role]))
            else:
                held.missing.append(slot)
        self.count(t, policy, kind, s.reserved, +1)
        return held

    def count(self, t: TrainerInfo, policy: PolicyInfo, kind: CapacityType, reserved: Resources, sign: int) -> None:
        """Add (or take back) a run's reservation to its namespace budget and its policy's summary."""
        self.ledger.spend(t.namespace, kind, {n: a * sign for n, a in reserved.items()})
        used = self.summary(policy)["used"].setdefault(kind, {})
        for name, amount in reserved.items():
            used[name] = used.get(name, Decimal(0)) + amount * sign
        self.summary(policy)["admitted"] += sign

    def unhold(self, t: TrainerInfo, policy: PolicyInfo, held: Held) -> None:
        for node, requests in held.credits:
            self.ledger.credit(node, requests)
        self.count(t, policy, held.option.kind, held.shape.reserved, -1)

    def keep(self, t: TrainerInfo, policy: PolicyInfo, held: Held) -> RenegotiationStatus | None:
        """Pass 2 for an admitted run: new places for replicas that lost theirs, growth, a scale;
        returns why it must be renegotiated (after taking its reservation back), else records it."""
        grant = t.grant
        assert grant is not None
        kind, s = held.option.kind, held.shape
        prio = priority(policy, t.spec) or 0
        lost, reclaimed = self.endangered(t)
        # A replica with no pod left anywhere whose admitted node is gone (its pod went with the
        # node, or never started) needs a new place as much as a pod on a lost node.
        gone = {
            held.hints[slot]
            for slot in held.missing
            if slot in held.hints
            and not self.alive(t, slot)
            and (held.hints[slot] not in self.nodes or held.hints[slot] in self.lost)
        }
        lost = sorted(set(lost) | gone)
        if held.missing:  # another node of the same capacity, if one has room
            wants = [(slot, s.requests[slot[0]], s.selectors[slot[0]], None) for slot in held.missing]
            ok, where = self.ledger.place(kind, wants, commit=False)
            if ok:
                self.ledger.place(kind, wants, commit=True)
                held.placed.update(where)
                held.credits.extend((where[slot], s.requests[slot[0]]) for slot in held.missing)
                held.missing.clear()

        if held.missing and (lost or reclaimed):
            before = t.quota.renegotiation
            since = before.since if before is not None else self.now
            nodes = sorted(set(lost) | set(reclaimed))
            why = "; ".join(
                [self.lost.get(n) or f"node {n} no longer exists" for n in lost]
                + [self.reclaimed[n] for n in reclaimed]
            )
            grace = policy.spec.reclaim.checkpoint_grace_seconds
            left = (parse_time(since) + timedelta(seconds=grace) - self.world.now).total_seconds()
            committed = t.last_commit is not None and t.last_commit >= since
            if not lost and t.spec.checkpoint is not None and not committed and left > 0:
                status = RenegotiationStatus(
                    reason="SpotReclaimed",
                    message=f"{why}; waiting up to {grace}s for a checkpoint to commit before the run moves",
                    since=since,
                    nodes=nodes[:MAX_NODES_NAMED],
                    waiting_for_checkpoint=True,
                )
                self.record(t, policy, prio, held, status, "ReclaimPending", requeue=left)
                return None
            detail = (
                "its pods there are gone"
                if lost
                else "a checkpoint committed since"
                if committed and t.spec.checkpoint is not None
                else "the checkpoint grace period ran out"
                if t.spec.checkpoint is not None
                else "the run has no checkpoints to wait for"
            )
            self.unhold(t, policy, held)
            return RenegotiationStatus(
                reason="NodeLost" if lost else "SpotReclaimed",
                message=f"{why}; {detail}",
                since=since,
                nodes=nodes[:MAX_NODES_NAMED],
            )

        for slot in held.missing:  # waiting for room (a foreign pod took its node): still owed
            self.ledger.owe(kind, s.requests[slot[0]])
        lo, hi = worker_bounds(t.spec)
        if held.option.workers > hi:  # scaled down: the smaller run always fits where it was
            self.unhold(t, policy, held)
            smaller = replace(held.option, workers=hi)
            placement = self.reserve(t, policy, smaller, held.bound, held.hints)
            self.verdicts[t.uid] = self.admitted_verdict(t, policy, prio, smaller, placement, None, "Admitted")
            return None
        for workers in range(hi, held.option.workers, -1):  # grow (a scale, or elastic room)
            if self.grow(t, policy, held, workers):
                break
        reason = "WaitingForCapacity" if held.option.workers < lo else "Admitted"
        self.record(t, policy, prio, held, None, reason)
        return None

    def grow(self, t: TrainerInfo, policy: PolicyInfo, held: Held, workers: int) -> bool:
        """Add workers to an admitted run in place (same capacity, pod size and admission)."""
        bigger = shape(t, workers, held.option.resources)
        extra = {n: a - held.shape.reserved.get(n, Decimal(0)) for n, a in bigger.reserved.items()}
        if not self.ledger.within_budget(policy, t.namespace, held.option.kind, extra):
            return False
        wants = bigger.wants({**held.placed, **dict.fromkeys(held.missing, "")}, {})
        ok, where = self.ledger.place(held.option.kind, wants, commit=False)
        if not ok:
            return False
        self.ledger.place(held.option.kind, wants, commit=True)
        self.count(t, policy, held.option.kind, extra, +1)
        self.summary(policy)["admitted"] -= 1  # the same run, grown
        held.placed.update(where)
        held.credits.extend((where[w[0]], w[1]) for w in wants)
        held.option, held.shape = replace(held.option, workers=workers), bigger
        return True

    def record(
        self,
        t: TrainerInfo,
        policy: PolicyInfo,
        prio: int,
        held: Held,
        renegotiation: RenegotiationStatus | None,
        reason: str,
        requeue: float | None = None,
    ) -> None:
        where: dict[str, list[str]] = {
            role: [held.placed.get((role, i)) or held.hints.get((role, i)) or "" for i in range(n)]
            for role, n in held.shape.counts.items()
        }
        self.verdicts[t.uid] = self.admitted_verdict(
            t, policy, prio, held.option, where, renegotiation, reason, requeue
        )

    def admitted_verdict(
        self,
        t: TrainerInfo,
        policy: PolicyInfo,
        prio: int,
        option: Option,
        where: dict[str, list[str]],
        renegotiation: RenegotiationStatus | None,
        reason: str,
        requeue: float | None = None,
    ) -> Verdict:
        """The verdict for a run that keeps its admission (same id)."""
        assert t.grant is not None
        s = shape(t, option.workers, option.resources)
        status = self.admitted(t, policy, prio, option, t.grant.id, where, t.quota.renegotiations, renegotiation)
        if reason == "WaitingForCapacity":
            message = (
                f"the run keeps its admission ({option.workers} workers on {option.kind}) until its new size, "
                f"{t.spec.topology.workers} workers, fits {option.kind} capacity"
            )
            return Verdict(status, _condition("False", reason, message))
        message = self.admitted_message(policy, option, s)
        if renegotiation is not None:
            message = f"{renegotiation.message}; still {message}"
        before = find(t.conditions, CONDITION)
        if (
            reason == "Admitted"
            and before is not None
            and (before.status, before.reason, before.observed_generation) == ("True", "Renegotiated", t.generation)
            and t.grant.workers == option.workers
        ):
            reason, message = before.reason, before.message  # the move stays on record until the next change
        events: tuple[tuple[str, str, str], ...] = ()
        if renegotiation is not None and t.quota.renegotiation is None:
            events = (("Warning", "SpotReclaimed", renegotiation.message),)
        return Verdict(status, _condition("True", reason, message), events, requeue_after=requeue)

    @staticmethod
    def admitted_message(policy: PolicyInfo, option: Option, s: Shape) -> str:
        pods = sum(s.counts.values())
        return (
            f"admitted on {option.kind}: {option.workers} workers, {pods} pods ({describe(s.reserved)}) "
            f"under QuotaPolicy {policy.name}"
        )

    @staticmethod
    def lowered(option: Option) -> str:
        if option.resources is None or option.percent >= 100:
            return ""
        names = ", ".join(option.resources.requests or option.resources.limits or {})
        return f" (per-pod {names} lowered to {option.percent}%)"

    def move(self, t: TrainerInfo, policy: PolicyInfo, why: RenegotiationStatus) -> None:
        """Shrink within the elastic bounds on the same capacity, else move, else revoke."""
        grant, kind = t.grant, t.quota.capacity_type
        assert grant is not None
        assert kind is not None
        prio = priority(policy, t.spec) or 0
        kinds = (kind, *(k for k in preference(policy, t.spec) if k != kind))
        seconds = (self.world.now - parse_time(why.since)).total_seconds()
        for option in options(t, policy, kinds):
            same = option.kind == kind and option.resources == grant.resources
            bound = self.bound(t, grant.id) if same else {}
            hints = hints_of(grant) if same else {}
            if not self.try_option(t, policy, option, bound, hints):
                continue
            grant_id = grant.id if same else f"{option.kind}-{t.quota.renegotiations + 1}"
            where = self.reserve(t, policy, option, bound, hints)
            s = shape(t, option.workers, option.resources)
            status = self.admitted(t, policy, prio, option, grant_id, where, t.quota.renegotiations + 1, None)
            what = (
                f"shrunk to {option.workers} workers on {kind}"
                if same
                else f"moved to {option.kind} with {option.workers} workers"
            )
            message = f"{why.message}: {what}; {self.admitted_message(policy, option, s)}"
            self.verdicts[t.uid] = Verdict(
                status,
                _condition("True", "Renegotiated", message),
                (("Normal", "Renegotiated", f"{why.message}: {what}{self.lowered(option)}"),),
                renegotiation_seconds=seconds,
            )
            return
        status = self.pending_status(t, policy, prio)
        status["renegotiations"] = t.quota.renegotiations + 1
        message = (
            f"{why.message}; no capacity holds the run's minimum any more: its pods are stopped and it queues again"
        )
        self.summary(policy)["pending"] += 1
        self.verdicts[t.uid] = Verdict(
            status,
            _condition("False", "CapacityLost", message),
            (("Warning", "CapacityLost", message),),
            renegotiation_seconds=seconds,
        )

    def admit(self, t: TrainerInfo, policy: PolicyInfo) -> None:
        prio = priority(policy, t.spec)
        if prio is None:
            names = ", ".join(c.name for c in policy.spec.priority_classes or ()) or "none"
            asked = t.spec.scheduling.priority_class_name if t.spec.scheduling else ""
            message = (
                f"spec.scheduling.priorityClassName {asked!r} is not defined by QuotaPolicy {policy.name} "
                f"(it defines: {names})"
            )
            self.summary(policy)["pending"] += 1
            self.verdicts[t.uid] = Verdict(
                self.pending_status(t, policy, None), _condition("False", "PriorityClassNotFound", message)
            )
            return
        kinds = preference(policy, t.spec)
        for option in options(t, policy, kinds):
            # Pods that run from before any admission (a policy came later) keep their place.
            bound = self.bound(t, None, option.kind)
            if self.try_option(t, policy, option, bound, {}):
                n = t.quota.renegotiations
                where = self.reserve(t, policy, option, bound, {})
                s = shape(t, option.workers, option.resources)
                status = self.admitted(t, policy, prio, option, f"{option.kind}-{n}", where, n, None)
                message = self.admitted_message(policy, option, s)
                fallback = f" ({kinds[0]} has no room for it)" if option.kind != kinds[0] else ""
                self.verdicts[t.uid] = Verdict(
                    status,
                    _condition("True", "Admitted", message),
                    (("Normal", "Admitted", message + fallback + self.lowered(option)),),
                )
                return
        self.summary(policy)["pending"] += 1
        lo, _ = worker_bounds(t.spec)
        smallest = shape(t, lo, None)
        reasons = []
        too_big = bool(kinds)
        for kind in kinds:
            limits = budget(policy, kind)
            over = {n: a for n, a in smallest.reserved.items() if n in limits and a > limits[n]}
            if over:
                reasons.append(f"{kind}: more than the budget ({describe({n: limits[n] for n in over})})")
            else:
                too_big = False
                in_budget = self.ledger.within_budget(policy, t.namespace, kind, smallest.reserved)
                reasons.append(
                    f"{kind}: " + ("not enough free nodes" if in_budget else "the namespace's budget is in use")
                )
        need = f"{sum(smallest.counts.values())} pods ({describe(smallest.reserved)})"
        if not kinds:
            message = f"QuotaPolicy {policy.name} allows neither capacity type for the run's preference"
            reason = "ExceedsQuota"
        elif too_big:
            message = (
                f"the run needs {need} but QuotaPolicy {policy.name} allows less per namespace ("
                + "; ".join(reasons)
                + "); lower topology.workers or spec.resources, or ask an admin to raise the budget"
            )
            reason = "ExceedsQuota"
        else:
            message = f"waiting for capacity for {need} — " + "; ".join(reasons)
            reason = "WaitingForCapacity"
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
        self.verdicts[t.uid] = Verdict(
            self.pending_status(t, policy, prio), _condition("False", reason, message), events
        )


def plan(world: World) -> Plan:
    return Planner(world).run()

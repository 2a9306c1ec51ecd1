"""The plan's working state (pure): the ledger of free capacity, what each run holds, and the
decisions and policy summaries made so far; with the helpers every pass uses (:mod:`admit` for
waiting runs, :mod:`renegotiate` for admitted ones)."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from functools import cached_property
from typing import Any

from trainerop_common.api import Contribution, Grant
from trainerop_common.api.quota import CapacityType, PlacementScore, PluginHint
from trainerop_common.api.trainer import QuotaStatus, RenegotiationStatus
from trainerop_common.clock import rfc3339
from trainerop_common.conditions import find
from trainerop_common.contracts import ADMISSION_ANNOTATION
from trainerop_common.nodes import gone_reason
from trainerop_common.topology import ROLES

from .capacity import PodInfo, Resources, placement
from .cost import cost_section, describe
from .hints import Suggestion, weights
from .ledger import Ledger, Option, Shape, shape
from .model import CONDITION, Decision, Observed, PolicyInfo, TrainerInfo, condition
from .packing import Site, Slot, score

# A node the run is on outweighs any placement plugin's preference (Kubernetes' weights are 1-100
# a term): a replacement goes where its run is.
NEAR_WEIGHT = 1000


@dataclass(frozen=True)
class Places:
    """Where a run's replicas are placed from: ``bound``, the nodes of its pods that keep their
    place; ``hints``, places tried first; ``replacing``, its pods a new admission replaces (their
    room counts as free)."""

    bound: Mapping[Slot, str] = field(default_factory=dict)
    hints: Mapping[Slot, str] = field(default_factory=dict)
    replacing: Mapping[Slot, str] = field(default_factory=dict)


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


class Planner:
    def __init__(self, obs: Observed) -> None:
        self.obs = obs
        self.now = rfc3339(obs.now)
        self.decisions: dict[str, Decision] = {}
        self.summaries: dict[str, dict[str, Any]] = {}
        self.nodes = {n.name: n for n in obs.nodes}
        self.requests: dict[tuple[str, str, int], Resources] = {}  # (uid, role, index) -> its pod's requests
        self.lost = {n.name: n.lost for n in obs.nodes if n.lost}
        self.reclaimed = {n.name: n.reclaimed for n in obs.nodes if n.reclaimed and not n.lost}
        # a cordon moves only runs with checkpoints, whose pods the trainer guards from the drain's
        # evictions until they saved (docs/design/disruption.md, decision 5)
        self.drained = {n.name: n.drained for n in obs.nodes if n.drained and n.name not in self.reclaimed}
        for pod in obs.pods:
            if pod.node and pod.node not in self.nodes:
                self.lost[pod.node] = gone_reason(pod.node)

    # The free capacity and each run's pods are read only for runs a QuotaPolicy governs: a plan
    # with none (most of a cluster's Trainers, or all) never builds them.
    @cached_property
    def ledger(self) -> Ledger:
        return Ledger(self.obs)

    @cached_property
    def pods(self) -> dict[str, list[PodInfo]]:
        """Each run's pods, by Trainer uid."""
        out: dict[str, list[PodInfo]] = {}
        for pod in self.obs.pods:
            if pod.trainer_uid:
                out.setdefault(pod.trainer_uid, []).append(pod)
        return out

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
        """Nodes under the run's live pods that are lost, and that are being reclaimed — or
        drained, under a run with checkpoints (pods of an earlier admission, which the trainer is
        replacing, do not count)."""
        lost, reclaimed = set(), set()
        current = t.grant.id if t.grant else None
        for pod in self.pods.get(t.uid, ()):
            if pod.deleting or pod.succeeded or pod.admission not in (current, None):
                continue
            if pod.node in self.lost:
                lost.add(pod.node)
            elif pod.node in self.reclaimed or (pod.node in self.drained and t.spec.checkpoint is not None):
                reclaimed.add(pod.node)
        return sorted(lost), sorted(reclaimed)

    def leaving(self, node: str) -> str:
        """Why the run's pods on a reclaimed or drained node go."""
        return self.reclaimed.get(node) or self.drained[node]

    def surplus(self, t: TrainerInfo, s: Shape, bound: Mapping[Slot, str]) -> list[tuple[str, Resources]]:
        """Pods of the run on nodes that the option has no replica for (the trainer removes them)."""
        slots = set(s.slots())
        return [(node, self.requests.get((t.uid, *slot), {})) for slot, node in bound.items() if slot not in slots]

    def replaced(self, t: TrainerInfo, replacing: Mapping[Slot, str]) -> list[tuple[str, Resources]]:
        """The room of the run's pods that a new admission replaces."""
        return [(node, self.requests.get((t.uid, *slot), {})) for slot, node in replacing.items() if node]

    def suggestion(self, t: TrainerInfo) -> Suggestion | None:
        """The placement plugin's answer for the run's current generation, if any."""
        s = self.obs.suggestions.get(t.uid)
        return s if s is not None and s.generation == t.generation else None

    def prefer(self, t: TrainerInfo, bound: Mapping[Slot, str]) -> dict[str, int]:
        """Node weights for packing: the plugin's preferred terms, and the nodes the run is on."""
        s = self.suggestion(t)
        out = weights(s.preferred, self.sites.values()) if s is not None else {}
        for node in bound.values():
            if node:
                out[node] = out.get(node, 0) + NEAR_WEIGHT
        return out

    def try_option(self, t: TrainerInfo, policy: PolicyInfo, option: Option, places: Places) -> bool:
        s = shape(t, option.workers, option.resources)
        if not self.ledger.within_budget(policy, t.namespace, option.kind, s.reserved):
            return False
        ok, _ = self._place(t, option, s, places, commit=False)
        return ok

    def reserve(self, t: TrainerInfo, policy: PolicyInfo, option: Option, places: Places) -> dict[str, list[str]]:
        """Take the run's resources from the ledger; returns where each replica goes (its node, or
        its earlier place / "" when it does not fit now)."""
        s = shape(t, option.workers, option.resources)
        _, where = self._place(t, option, s, places, commit=True)
        self.count(t, policy, option.kind, s.reserved, +1)
        nodes = {**places.hints, **where, **places.bound}
        return {role: [nodes.get((role, i), "") for i in range(n)] for role, n in s.counts.items()}

    def _place(
        self, t: TrainerInfo, option: Option, s: Shape, places: Places, commit: bool
    ) -> tuple[bool, dict[Slot, str]]:
        released = self.surplus(t, s, places.bound) + self.replaced(t, places.replacing)
        wants = s.wants(places.bound, places.hints)
        prefer, kept = self.prefer(t, places.bound), list(places.bound.values())
        return self.ledger.place(option.kind, wants, commit, released, s.packing, prefer, kept)

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
            policy=policy.name or None,
            capacity_type=option.kind,
            workers=option.workers,
            priority=prio,
            admitted_time=t.quota.admitted_time if t.grant and t.grant.id == grant_id else self.now,
            renegotiations=renegotiations,
            renegotiation=renegotiation,
            placement_score=self.placement_score(t, grant_id, where),
            contribution=Contribution(
                generation=t.generation,
                pod=pod,
                grant=Grant(id=grant_id, workers=option.workers, resources=option.resources, placement=where),
            ),
        ).to_k8s()
        if (cost := cost_section(t, policy, option.kind, s.reserved, self.now)) is not None:
            status["cost"] = cost
        return status

    def placement_score(self, t: TrainerInfo, grant_id: str, where: Mapping[str, Sequence[str]]) -> PlacementScore:
        """How the placement sits in the topology (status.quota.placementScore), and what the
        placement plugin suggested for the admission (kept while the admission is)."""
        slots = {(role, i): node for role in ROLES for i, node in enumerate(where.get(role, ()))}
        before = t.quota.placement_score
        if t.grant is not None and t.grant.id == grant_id and before is not None:
            plugin = before.plugin
        elif (s := self.suggestion(t)) is not None:
            followed = sum(1 for slot, node in s.nodes.items() if slots.get(slot) == node)
            plugin = PluginHint(
                suggested=len(s.nodes), followed=followed, reason=s.reason or None, failed=s.failed or None
            )
        else:
            plugin = None
        return score(slots, self.sites, self.obs.levels).model_copy(update={"plugin": plugin})

    @cached_property
    def sites(self) -> dict[str, Site]:
        return {n.name: Site(n.name, n.labels) for n in self.obs.nodes}

    def pending_status(self, t: TrainerInfo, policy: PolicyInfo, prio: int | None) -> dict[str, Any]:
        status = QuotaStatus(policy=policy.name or None, priority=prio, renegotiations=t.quota.renegotiations).to_k8s()
        if t.quota.cost is not None and (cost := cost_section(t, policy, None, None, self.now)) is not None:
            status["cost"] = cost  # what the run cost until it lost its admission
        return status

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
        self.decisions[t.uid] = self.admitted_decision(
            t, policy, prio, held.option, where, renegotiation, reason, requeue
        )

    def admitted_decision(
        self,
        t: TrainerInfo,
        policy: PolicyInfo,
        prio: int,
        option: Option,
        where: dict[str, list[str]],
        renegotiation: RenegotiationStatus | None,
        reason: str,
        requeue: float | None = None,
    ) -> Decision:
        """The decision for a run that keeps its admission (same id)."""
        assert t.grant is not None
        s = shape(t, option.workers, option.resources)
        status = self.admitted(t, policy, prio, option, t.grant.id, where, t.quota.renegotiations, renegotiation)
        if reason == "WaitingForCapacity":
            message = (
                f"the run keeps its admission ({option.workers} workers on {option.kind}) until its new size, "
                f"{t.spec.topology.workers} workers, fits {option.kind} capacity"
            )
            return Decision(status, condition("False", reason, message))
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
            events = (("Warning", renegotiation.reason, renegotiation.message),)
        return Decision(status, condition("True", reason, message), events, requeue_after=requeue)

    @staticmethod
    def admitted_message(policy: PolicyInfo, option: Option, s: Shape) -> str:
        pods = sum(s.counts.values())
        under = "no QuotaPolicy covers this namespace" if policy.implicit else f"under QuotaPolicy {policy.name}"
        return f"admitted on {option.kind}: {option.workers} workers, {pods} pods ({describe(s.reserved)}) {under}"

    @staticmethod
    def lowered(option: Option) -> str:
        if option.resources is None or option.percent >= 100:
            return ""
        names = ", ".join(option.resources.requests or option.resources.limits or {})
        return f" (per-pod {names} lowered to {option.percent}%)"

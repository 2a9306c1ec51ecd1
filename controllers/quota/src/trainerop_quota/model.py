"""What the quota controller's plan sees and decides (pure): the policies, the Trainers, the
cluster's nodes and pods (:class:`Observed`), a :class:`Decision` per Trainer and the policies'
summaries (:class:`Plan`); which policy governs a namespace, a Trainer's priority and capacity
order."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from trainerop_common.api import Grant
from trainerop_common.api.base import Condition, ConditionStatus, PluginChoice, PodContribution
from trainerop_common.api.quota import CapacityType, Packing, Preference, QuotaPolicySpec
from trainerop_common.api.trainer import QuotaStatus, TrainerSpec
from trainerop_common.conditions import Desired
from trainerop_common.contracts import GATE_CONDITIONS
from trainerop_common.outcome import Event, StatusSection

from .capacity import NodeInfo, PodInfo, Resources
from .hints import Suggestion
from .kueue_views import FlavorView, WorkloadView
from .taints import Tolerates

CONDITION = GATE_CONDITIONS["quota"]
SECTION = StatusSection(("quota",), (CONDITION,))
ORDER: dict[Preference, tuple[CapacityType, ...]] = {
    "SpotFirst": ("spot", "on-demand"),
    "OnDemandFirst": ("on-demand", "spot"),
    "SpotOnly": ("spot",),
    "OnDemandOnly": ("on-demand",),
}
MAX_NODES_NAMED = 64  # status.quota.renegotiation.nodes


@dataclass(frozen=True)
class PolicyInfo:
    name: str
    spec: QuotaPolicySpec

    @property
    def implicit(self) -> bool:
        """The stand-in for no QuotaPolicy (``--ungoverned AllOrNothing``)."""
        return self.name == ""


# Namespaces no QuotaPolicy covers, under --ungoverned AllOrNothing: no budget limits anything,
# on-demand nodes first; every run still waits until all of its pods have a node.
UNGOVERNED = PolicyInfo("", QuotaPolicySpec(budgets={"spot": {}, "onDemand": {}}, preference="OnDemandFirst"))
Ungoverned = Literal["AllOrNothing", "AtOnce"]


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
    save: tuple[str, str] | None = None  # status.checkpoint.saveRequest's (id, phase)
    queue: str | None = None  # the Kueue LocalQueue it asks for (label kueue.x-k8s.io/queue-name)
    controller_uid: str | None = None  # what controls it (a Kubeflow job's Trainer: the job), by uid
    kueue_priority_class: str | None = None  # label kueue.x-k8s.io/priority-class
    placement_plugin: PluginChoice | None = None  # its profile's placementPlugin
    profile_packing: Packing | None = None  # its profile's packing (the spec's wins)
    profile_pending: bool = False  # it names a profile whose answer for its generation is not written yet
    phase: str = ""  # status.phase
    namespace_tolerations: tuple[Tolerates, ...] = ()  # its namespace's default tolerations (taints.py)

    @property
    def grant(self) -> Grant | None:
        c = self.quota.contribution
        return c.grant if c is not None else None


@dataclass(frozen=True)
class Observed:
    now: datetime
    trainers: Sequence[TrainerInfo]
    policies: Sequence[PolicyInfo]
    namespace_labels: Mapping[str, Mapping[str, str]]
    nodes: Sequence[NodeInfo]
    pods: Sequence[PodInfo]
    levels: Sequence[str] = ()  # the topology's node label keys, finest first (--topology-levels)
    suggestions: Mapping[str, Suggestion] = field(default_factory=dict)  # by Trainer uid: the plugin's
    asking: frozenset[str] = frozenset()  # Trainer uids whose plugin answer is awaited: not admitted yet
    ungoverned: Ungoverned = "AllOrNothing"  # how runs no QuotaPolicy covers are admitted (--ungoverned)
    kueue: bool = False  # Kueue admits the runs that name a LocalQueue (--kueue)
    workloads: Mapping[str, WorkloadView] = field(default_factory=dict)  # by Trainer uid
    flavors: Mapping[str, FlavorView] = field(default_factory=dict)  # Kueue's ResourceFlavors by name
    priorities: Mapping[str, int] = field(default_factory=dict)  # Kueue's WorkloadPriorityClasses' values


@dataclass(frozen=True)
class Decision:
    quota: dict[str, Any]  # the whole status.quota section ({} removes it)
    condition: Desired
    events: tuple[Event, ...] = ()
    renegotiation_seconds: float | None = None  # from the reclaim to this decision
    requeue_after: float | None = None


@dataclass(frozen=True)
class PolicySummary:
    admitted: int = 0
    pending: int = 0
    used: Mapping[CapacityType, Resources] = field(default_factory=dict)


@dataclass(frozen=True)
class Plan:
    decisions: Mapping[str, Decision]  # by Trainer uid
    policies: Mapping[str, PolicySummary]


def policy_for(policies: Sequence[PolicyInfo], labels: Mapping[str, str]) -> PolicyInfo | None:
    """The covering policy with the most specific selector (then by name)."""

    def wanted(p: PolicyInfo) -> dict[str, str]:
        return (p.spec.namespace_selector.match_labels if p.spec.namespace_selector else None) or {}

    covering = [p for p in policies if all(labels.get(k) == v for k, v in wanted(p).items())]
    return min(covering, key=lambda p: (-len(wanted(p)), p.name), default=None)


def over(t: TrainerInfo) -> bool:
    """Finished, suspended or being deleted: the run holds nothing and is not placed."""
    return bool(t.deleting or t.finished or t.spec.run_policy.suspend)


def placed_by_plan(t: TrainerInfo, policy: PolicyInfo | None, ungoverned: Ungoverned) -> bool:
    """Whether the plan decides where the run goes: a policy governs it, or none does and runs are
    admitted all-or-nothing (``--ungoverned``); and it is not over."""
    return not over(t) and (policy is not None or ungoverned == "AllOrNothing")


def unadmitted(t: TrainerInfo) -> bool:
    return t.grant is None or t.quota.capacity_type is None


def priority(policy: PolicyInfo, spec: TrainerSpec) -> int | None:
    """The Trainer's priority value; None when it names a class the policy does not define."""
    name = spec.scheduling.priority_class_name if spec.scheduling else None
    if name is None or policy.implicit:
        return 0
    return next((c.value for c in policy.spec.priority_classes or () if c.name == name), None)


def preference(policy: PolicyInfo, spec: TrainerSpec) -> tuple[CapacityType, ...]:
    own = spec.scheduling.preference if spec.scheduling else None
    budgets = policy.spec.budgets
    allowed = {"spot": budgets.spot is not None, "on-demand": budgets.on_demand is not None}
    return tuple(k for k in ORDER[own or policy.spec.preference] if allowed[k])


def condition(status: ConditionStatus, reason: str, message: str) -> Desired:
    return Desired(CONDITION, status, reason, message)

"""Which nodes a run's pods may be placed on, besides room (pure): the node labels a role's pods
select, and the taints they tolerate — Kubernetes' own rule (a NoSchedule or NoExecute taint keeps
off every pod without a matching toleration), so a pod is never pinned to a node the scheduler
would refuse it (docs/quota.md "Where pods may go").

A role's tolerations are those its pods will have: the profile's, its podTemplateOverrides', the
namespace's defaults (`scheduler.alpha.kubernetes.io/defaultTolerations`, which the API server's
PodTolerationRestriction admission adds), the spot tolerations the quota itself adds on spot
capacity, and a taint named like an extended resource the pods request (`nvidia.com/gpu`: the
ExtendedResourceToleration admission's rule, which GPU clusters enable)."""

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

SCHEDULING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})  # PreferNoSchedule keeps no pod off
DEFAULT_TOLERATIONS_ANNOTATION = "scheduler.alpha.kubernetes.io/defaultTolerations"
# The taints Kubernetes sets from a node's readiness and cordon: they come and go with it, and the
# quota's readiness rule (lost nodes, schedulable) already judges that state, so a run placed on a
# node that is briefly NotReady keeps its place. (The pressures' taints count: the scheduler keeps
# new pods off such a node, and nothing else here judges them.)
NODE_STATE_TAINTS = frozenset(
    {"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable", "node.kubernetes.io/unschedulable"}
)


@dataclass(frozen=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"


@dataclass(frozen=True)
class Tolerates:
    """One toleration (corev1.Toleration without its seconds)."""

    key: str = ""  # empty with Exists: every taint
    operator: str = "Equal"
    value: str = ""
    effect: str = ""  # empty: every effect

    def matches(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if self.operator == "Exists":
            return not self.key or self.key == taint.key
        return self.key == taint.key and self.value == taint.value


def tolerations_of(items: Iterable[Mapping[str, Any]]) -> tuple[Tolerates, ...]:
    """Tolerations as the API writes them (camelCase maps; None where unset)."""
    return tuple(
        Tolerates(
            key=str(t.get("key") or ""),
            operator=str(t.get("operator") or "Equal"),
            value=str(t.get("value") or ""),
            effect=str(t.get("effect") or ""),
        )
        for t in items
    )


def scheduling_taints(taints: Iterable[Mapping[str, Any]] | None) -> tuple[Taint, ...]:
    """A node's taints that keep pods off (spec.taints), but for those of its readiness and cordon."""
    return tuple(
        Taint(str(t.get("key") or ""), str(t.get("value") or ""), str(t["effect"]))
        for t in taints or ()
        if t.get("effect") in SCHEDULING_EFFECTS and t.get("key") not in NODE_STATE_TAINTS
    )


def namespace_defaults(annotations: Mapping[str, str] | None) -> tuple[Tolerates, ...]:
    """A namespace's default tolerations (PodTolerationRestriction's annotation); none when absent
    or not a JSON list of tolerations (the API server would refuse such a namespace's pods)."""
    text = (annotations or {}).get(DEFAULT_TOLERATIONS_ANNOTATION)
    try:
        items = json.loads(text) if text else []
    except ValueError:
        return ()
    if not isinstance(items, list) or not all(isinstance(t, dict) for t in items):
        return ()
    return tolerations_of(items)


@dataclass(frozen=True)
class Selector:
    """Where one role's pods may go: the node labels they select and the taints they tolerate."""

    labels: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Tolerates, ...] = ()
    extended: frozenset[str] = frozenset()  # extended resources requested: taints of that key are tolerated
    # each taint's verdict once judged: a plan asks for every node, again and again (plain loops
    # below for the same reason: this is the plan's innermost test)
    _judged: dict[Taint, bool] = field(default_factory=dict, compare=False, repr=False)

    def allows(self, labels: Mapping[str, str], taints: Sequence[Taint] = ()) -> bool:
        for key, value in self.labels.items():
            if labels.get(key) != value:
                return False
        for taint in taints:
            tolerated = self._judged.get(taint)
            if tolerated is None:
                tolerated = taint.key in self.extended or any(t.matches(taint) for t in self.tolerations)
                self._judged[taint] = tolerated
            if not tolerated:
                return False
        return True

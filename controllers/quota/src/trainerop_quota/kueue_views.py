"""What the quota controller reads of Kueue's objects (pure): a Workload's admission, eviction
and end, and a ResourceFlavor's node labels and tolerations (:mod:`kueue` decides with them)."""

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

GENERATION_ANNOTATION = "trainer.operator.kubeflow.org/trainer-generation"  # the Trainer generation it was made for


@dataclass(frozen=True)
class TopologyAssignment:
    """Where Kueue's topology-aware scheduling put a pod set: the levels (node label keys,
    coarsest first) and each pod's domain (its values at those levels), in Kueue's order."""

    levels: tuple[str, ...]
    pods: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class PodSetAdmission:
    count: int
    flavors: Mapping[str, str]  # resource -> ResourceFlavor name
    topology: TopologyAssignment | None = None  # set when a flavor of it is topology-aware


@dataclass(frozen=True)
class PodSetUpdate:
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: Sequence[Mapping[str, Any]] = ()


@dataclass(frozen=True)
class WorkloadView:
    """What the decision reads of a Trainer's Workload."""

    name: str
    generation: int  # the Trainer generation it was made for
    cluster_queue: str | None = None  # set while Kueue holds a reservation for it
    admitted: bool = False  # quota reserved and every admission check ready
    admitted_time: str | None = None  # when the Admitted condition last turned True
    pending_message: str = ""  # Kueue's word on why it is not admitted (QuotaReserved False)
    evicted: str | None = None  # Evicted True: Kueue's message
    finished: bool = False
    pod_sets: Mapping[str, PodSetAdmission] = field(default_factory=dict)
    updates: Mapping[str, PodSetUpdate] = field(default_factory=dict)
    admission_hash: str = ""
    active: bool = True  # spec.active: False once deactivated (the run suspended)
    topology_requests: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # pod set -> its request

    @property
    def topology_assigned(self) -> bool:
        """Kueue placed a pod set of it by topology (its pods are gated until Kueue's ungater)."""
        return any(a.topology is not None for a in self.pod_sets.values())


@dataclass(frozen=True)
class FlavorView:
    name: str
    node_labels: Mapping[str, str] = field(default_factory=dict)
    tolerations: Sequence[Mapping[str, Any]] = ()


def _conditions(status: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {str(c.get("type")): c for c in status.get("conditions") or ()}


def workload_view(body: Mapping[str, Any]) -> WorkloadView:
    meta, status = body["metadata"], body.get("status") or {}
    conditions = _conditions(status)

    def true(kind: str) -> bool:
        return conditions.get(kind, {}).get("status") == "True"

    admission = status.get("admission") or {}
    pod_sets = {
        str(a["name"]): PodSetAdmission(
            int(a.get("count") or 0), dict(a.get("flavors") or {}), topology_assignment(a.get("topologyAssignment"))
        )
        for a in admission.get("podSetAssignments") or ()
    }
    updates: dict[str, PodSetUpdate] = {}
    for check in status.get("admissionChecks") or ():
        for u in check.get("podSetUpdates") or ():
            updates[str(u["name"])] = _merge_update(updates.get(str(u["name"])), u)
    return WorkloadView(
        name=meta["name"],
        generation=int((meta.get("annotations") or {}).get(GENERATION_ANNOTATION) or 0),
        cluster_queue=admission.get("clusterQueue") if true("QuotaReserved") else None,
        admitted=true("Admitted"),
        admitted_time=conditions["Admitted"].get("lastTransitionTime") if true("Admitted") else None,
        pending_message=str(conditions.get("QuotaReserved", {}).get("message") or ""),
        evicted=str(conditions["Evicted"].get("message") or "evicted") if true("Evicted") else None,
        finished=true("Finished"),
        pod_sets=pod_sets,
        updates=updates,
        active=(body.get("spec") or {}).get("active") is not False,
        topology_requests={
            str(p["name"]): dict(p["topologyRequest"])
            for p in (body.get("spec") or {}).get("podSets") or ()
            if p.get("topologyRequest")
        },
        admission_hash=hashlib.sha256(json.dumps(admission, sort_keys=True).encode()).hexdigest()[:10],
    )


def topology_assignment(body: Mapping[str, Any] | None) -> TopologyAssignment | None:
    """Kueue's v1beta2 topology assignment expanded to one domain per pod: each slice covers
    ``domainCount`` domains, a level's values either one for all of them (``universal``) or one
    each (``individual``: prefix + root + suffix), and its pods one count for all or one each."""
    if not body:
        return None
    levels = tuple(str(level) for level in body.get("levels") or ())
    pods: list[tuple[str, ...]] = []
    for piece in body.get("slices") or ():
        n = int(piece.get("domainCount") or 0)
        columns = [_level_values(v or {}, n) for v in piece.get("valuesPerLevel") or ()]
        counts = piece.get("podCounts") or {}
        per_domain = counts.get("individual") or [int(counts.get("universal") or 0)] * n
        for domain, count in zip(zip(*columns, strict=True), per_domain, strict=False):
            pods += [tuple(domain)] * int(count)
    return TopologyAssignment(levels, tuple(pods))


def _level_values(values: Mapping[str, Any], n: int) -> list[str]:
    if values.get("universal") is not None:
        return [str(values["universal"])] * n
    each = values.get("individual") or {}
    prefix, suffix = str(each.get("prefix") or ""), str(each.get("suffix") or "")
    return [f"{prefix}{root}{suffix}" for root in each.get("roots") or ()]


def _merge_update(before: PodSetUpdate | None, update: Mapping[str, Any]) -> PodSetUpdate:
    b = before or PodSetUpdate()
    return PodSetUpdate(
        labels={**b.labels, **(update.get("labels") or {})},
        annotations={**b.annotations, **(update.get("annotations") or {})},
        node_selector={**b.node_selector, **(update.get("nodeSelector") or {})},
        tolerations=[*b.tolerations, *(update.get("tolerations") or ())],
    )


def flavor_view(body: Mapping[str, Any]) -> FlavorView:
    spec = body.get("spec") or {}
    return FlavorView(body["metadata"]["name"], dict(spec.get("nodeLabels") or {}), list(spec.get("tolerations") or ()))

"""Trainers Kueue admits (docs/design/placement.md, decision 6), pure: the Workload a Trainer is
reported to Kueue as, the quota decision that Workload's status makes, and what the controller
writes back to Kueue (the reservation given back after an eviction, the run's end).

A Trainer with the label ``kueue.x-k8s.io/queue-name`` is not planned: Kueue decides. Until its
Workload is admitted the QuotaAdmitted gate stays closed (``WaitingForKueue``, with Kueue's own
message); once admitted, the flavors' node labels and tolerations and the admission checks' pod
set updates become the quota's pod contribution, and the grant's id names the admission, so a
new admission after an eviction makes new pods.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from trainerop_common.api import API_VERSION
from trainerop_common.api.base import ROLE_NAMES
from trainerop_common.conditions import Desired, merge, parse
from trainerop_common.contracts import ADMISSION_ANNOTATION, TRAINING_CONTAINER
from trainerop_common.names import child_name
from trainerop_common.topology import Role, worker_bounds

from .capacity import quantity_text
from .kueue_views import GENERATION_ANNOTATION, FlavorView, PodSetUpdate, WorkloadView
from .ledger import shape
from .model import Decision, TrainerInfo, condition, over

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"  # a WorkloadPriorityClass, as for Kueue's own integrations
GROUP = "kueue.x-k8s.io"
VERSION = "v1beta2"
WORKLOAD_API = f"{GROUP}/{VERSION}"
MAX_POD_SETS = 8  # Kueue's limit on a Workload's pod sets


def queue_of(labels: Mapping[str, str] | None) -> str | None:
    queue = (labels or {}).get(QUEUE_LABEL)
    return queue or None


def workload_name(t: TrainerInfo) -> str:
    return child_name(t.name, "trainer", t.uid[:8])


def pod_set_name(role: Role) -> str:
    return str(role)


def unknown_priority(t: TrainerInfo, priorities: Mapping[str, int]) -> str | None:
    """Why the run's Workload cannot be made yet: the WorkloadPriorityClass it names is missing."""
    if t.kueue_priority_class is None or t.kueue_priority_class in priorities:
        return None
    return (
        f"label {PRIORITY_LABEL} names WorkloadPriorityClass {t.kueue_priority_class}, which does not exist; "
        "create it or change the label (the run waits, with no Workload, until then)"
    )


def workload_manifest(t: TrainerInfo, queue: str, priorities: Mapping[str, int]) -> dict[str, Any]:
    """The Workload that reports the run to Kueue: one pod set per role, each with the pod's
    requests, node selector and tolerations as the trainer will create them, and the priority of
    the WorkloadPriorityClass the Trainer's label names; owned by the Trainer."""
    s = shape(t, max(t.spec.topology.workers, 0), None)
    profile_tolerations = (t.profile.tolerations if t.profile else None) or ()
    tolerations = [tol.model_dump(by_alias=True, exclude_none=True) for tol in profile_tolerations]
    pod_sets = []
    for role, count in s.counts.items():
        requests = {k: quantity_text(v) for k, v in sorted(s.requests[role].items()) if k != "pods"}
        container = {"name": TRAINING_CONTAINER[t.spec.framework], "resources": {"requests": requests}}
        pod_spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [container]}
        if s.selectors[role]:
            pod_spec["nodeSelector"] = dict(s.selectors[role])
        if tolerations:
            pod_spec["tolerations"] = tolerations
        pod_set = {"name": pod_set_name(role), "count": count, "template": {"spec": pod_spec}}
        lo, hi = worker_bounds(t.spec)
        if role == "worker" and lo < hi:  # elastic: Kueue may admit fewer (partial admission)
            pod_set["minCount"] = lo
        pod_sets.append(pod_set)
    return {
        "apiVersion": WORKLOAD_API,
        "kind": "Workload",
        "metadata": {
            "name": workload_name(t),
            "namespace": t.namespace,
            "annotations": {GENERATION_ANNOTATION: str(t.generation)},
            "ownerReferences": [
                {
                    "apiVersion": API_VERSION,
                    "kind": "Trainer",
                    "name": t.name,
                    "uid": t.uid,
                    "controller": True,
                }
            ],
        },
        "spec": {"queueName": queue, "podSets": pod_sets[:MAX_POD_SETS], **_priority(t, priorities)},
    }


def _priority(t: TrainerInfo, priorities: Mapping[str, int]) -> dict[str, Any]:
    name = t.kueue_priority_class
    if name is None or name not in priorities:
        return {}
    ref = {"group": GROUP, "kind": "WorkloadPriorityClass", "name": name}
    return {"priorityClassRef": ref, "priority": priorities[name]}


def decide(
    t: TrainerInfo,
    queue: str,
    w: WorkloadView | None,
    flavors: Mapping[str, FlavorView],
    priorities: Mapping[str, int] | None = None,
) -> Decision:
    """The quota decision for a run Kueue admits: waiting for its Workload's admission, admitted
    with the flavors' and admission checks' pod contribution, or evicted (its grant withdrawn, so
    the trainer stops its pods)."""
    name = w.name if w is not None else workload_name(t)
    if t.finished or t.deleting:
        return Decision({"workload": name}, condition("True", "Released", "the run is over; Kueue is told so"))
    if over(t):
        message = f"the run is suspended: Workload {name} is deactivated, and it queues again when resumed"
        return Decision({"workload": name}, condition("False", "Suspended", message))
    if w is None and (problem := unknown_priority(t, priorities or {})) is not None:
        return Decision({"workload": name}, condition("False", "PriorityClassNotFound", problem))
    if w is None or (w.generation != t.generation and w.cluster_queue is None):
        message = f"reporting the run to Kueue as Workload {name} in LocalQueue {queue}"
        return Decision({"workload": name}, condition("False", "WaitingForKueue", message))
    if w.evicted is not None and w.cluster_queue is not None:  # until the pods are gone and it is given back
        message = f"Kueue evicted Workload {w.name}: {w.evicted}; the run's pods are stopped and it queues again"
        return Decision(
            {"workload": w.name},
            condition("False", "EvictedByKueue", message),
            (("Warning", "EvictedByKueue", message),),
        )
    if not w.admitted or w.cluster_queue is None:
        message = f"Workload {w.name} waits in LocalQueue {queue}" + (
            f": {w.pending_message}" if w.pending_message else ""
        )
        return Decision({"workload": w.name}, condition("False", "WaitingForKueue", message))
    worker_set = w.pod_sets.get(pod_set_name("worker"))
    workers = worker_set.count if worker_set is not None else t.spec.topology.workers
    grant_id = f"kueue-{w.admission_hash}"
    # Pods carry the admission they were made under: another one (or none, after an eviction) replaces them.
    contribution: dict[str, Any] = {
        "generation": t.generation,
        "pod": {"annotations": {ADMISSION_ANNOTATION: grant_id}},
    }
    if roles := role_fragments(w, flavors):
        contribution["roles"] = roles
    flavor_names = sorted({f for a in w.pod_sets.values() for f in a.flavors.values()})
    flavors_used = ", ".join(flavor_names) or "none"
    message = f"Kueue admitted Workload {w.name} to ClusterQueue {w.cluster_queue} (flavors: {flavors_used})"
    quota = {
        "workload": w.name,
        "clusterQueue": w.cluster_queue,
        "workers": workers,
        "admittedTime": w.admitted_time,
        "contribution": contribution | {"grant": {"id": grant_id, "workers": workers}},
    }
    return Decision(quota, condition("True", "AdmittedByKueue", message), (("Normal", "AdmittedByKueue", message),))


def role_fragments(w: WorkloadView, flavors: Mapping[str, FlavorView]) -> dict[str, dict[str, Any]]:
    """The pod fragment of each admitted pod set, by role: its flavors' node labels (as a node
    selector) and tolerations, and its admission checks' updates (docs/design/contributions.md:
    ``roles``, so roles Kueue sends to different flavors go to different nodes)."""
    roles: dict[str, dict[str, Any]] = {}
    for pod_set, admission in sorted(w.pod_sets.items()):
        if pod_set not in ROLE_NAMES:
            continue  # not one of ours (the pod sets are named by role)
        update = w.updates.get(pod_set, PodSetUpdate())
        fragments = [flavors.get(f, FlavorView(f)) for f in sorted(set(admission.flavors.values()))]
        selector = {k: v for f in fragments for k, v in f.node_labels.items()} | dict(update.node_selector)
        tolerations: list[Mapping[str, Any]] = []
        for tol in [*(t for f in fragments for t in f.tolerations), *update.tolerations]:
            if tol not in tolerations:
                tolerations.append(tol)
        fragment = {
            "nodeSelector": selector,
            "tolerations": tolerations,
            "labels": dict(update.labels),
            "annotations": dict(update.annotations),
        }
        roles[pod_set] = {k: v for k, v in fragment.items() if v}
    return {role: fragment for role, fragment in roles.items() if fragment}


Verb = Literal["create", "replace", "release", "finish", "activate", "deactivate"]


@dataclass(frozen=True)
class WorkloadAction:
    verb: Verb
    namespace: str
    name: str
    body: Mapping[str, Any] = field(default_factory=dict)  # the manifest (create, replace)
    reason: str = ""  # finish: Succeeded or Failed


def actions(
    t: TrainerInfo, queue: str, w: WorkloadView | None, pods_left: bool, priorities: Mapping[str, int] | None = None
) -> list[WorkloadAction]:
    """What to write to Kueue for one run: its Workload made (again, when the spec changed before
    any reservation), deactivated while the run is suspended, its reservation given back once an
    evicted or suspended run's pods are gone, marked Finished when the run ends."""
    if t.deleting:
        return []  # the Workload goes with its owner
    known = priorities or {}
    if w is None:
        if over(t) or unknown_priority(t, known) is not None:
            return []
        return [WorkloadAction("create", t.namespace, workload_name(t), workload_manifest(t, queue, known))]
    if t.finished:
        return [] if w.finished else [WorkloadAction("finish", t.namespace, w.name, reason=t.phase or "Succeeded")]
    out: list[WorkloadAction] = []
    suspended = t.spec.run_policy.suspend
    if w.active == suspended:
        out.append(WorkloadAction("deactivate" if suspended else "activate", t.namespace, w.name))
    if w.cluster_queue is not None and w.evicted is not None and not pods_left:
        out.append(WorkloadAction("release", t.namespace, w.name))
    elif w.cluster_queue is None and w.generation != t.generation and not suspended:
        out.append(WorkloadAction("replace", t.namespace, w.name, workload_manifest(t, queue, known)))
    return out


def _with(conditions: Sequence[Mapping[str, Any]], desired: Sequence[Desired], generation: int, now: str) -> list[Any]:
    """A Workload's conditions with ``desired`` set by the project's one rule (conditions.merge:
    the transition time moves only on a flip); Kueue's other entries kept as they are."""
    updated = {c.type: c.to_k8s() for c in merge(parse(conditions), desired, generation, now)}
    kept = [updated.pop(str(c.get("type")), c) for c in conditions]
    return [*kept, *updated.values()]


def status_patch(body: Mapping[str, Any], action: WorkloadAction, now: str) -> dict[str, Any]:
    """The merge patch of a Workload's status for ``release`` (an evicted run's pods are gone: its
    reservation given back, as Kueue's job integrations do) or ``finish`` (the run ended);
    conditional on the version read, so Kueue's own writes meanwhile are not overwritten."""
    conditions = (body.get("status") or {}).get("conditions") or ()
    generation = int(body["metadata"].get("generation") or 0)
    patch: dict[str, Any] = {"metadata": {"resourceVersion": body["metadata"]["resourceVersion"]}}
    if action.verb == "finish":
        finished = Desired.true("Finished", action.reason, f"the Trainer's run {action.reason.lower()}")
        patch["status"] = {"conditions": _with(conditions, [finished], generation, now)}
        return patch
    message = "the run's pods are stopped after the eviction; the quota reservation is given back"
    released = [
        Desired.false("QuotaReserved", "Pending", message),
        Desired.false("Admitted", "NoReservation", "the Workload has no quota reservation"),
    ]
    patch["status"] = {"conditions": _with(conditions, released, generation, now), "admission": None}
    return patch

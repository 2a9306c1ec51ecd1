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
from trainerop_common.api.quota import Packing, PlacementScore
from trainerop_common.conditions import Desired, merge, parse
from trainerop_common.contracts import ADMISSION_ANNOTATION, REPLICA_INDEX_LABEL, TRAINING_CONTAINER
from trainerop_common.names import child_name
from trainerop_common.topology import Role, worker_bounds

from .capacity import quantity_text
from .kueue_views import GENERATION_ANNOTATION, FlavorView, PodSetAdmission, PodSetUpdate, WorkloadView
from .ledger import invalid, shape
from .model import Decision, TrainerInfo, condition, over
from .packing import RING_ORDER, Site, Slot, score

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"  # a WorkloadPriorityClass, as for Kueue's own integrations
GROUP = "kueue.x-k8s.io"
VERSION = "v1beta2"
WORKLOAD_API = f"{GROUP}/{VERSION}"
MAX_POD_SETS = 8  # Kueue's limit on a Workload's pod sets
# Topology-aware scheduling: pods of a pod set Kueue assigned domains to are created gated, named
# by their pod set and Workload; Kueue's topology ungater then gives each its domain's node
# labels and removes the gate (docs/quota.md#kueue).
TOPOLOGY_GATE = "kueue.x-k8s.io/topology"
POD_SET_LABEL = "kueue.x-k8s.io/podset"
WORKLOAD_ANNOTATION = "kueue.x-k8s.io/workload"
# The ungater handles only pods that say how their pod set asked to be placed.
REQUIRED_ANNOTATION = "kueue.x-k8s.io/podset-required-topology"
PREFERRED_ANNOTATION = "kueue.x-k8s.io/podset-preferred-topology"
UNCONSTRAINED_ANNOTATION = "kueue.x-k8s.io/podset-unconstrained-topology"
POD_SET_GROUP = "run"  # a master's and its workers' pod sets, placed together
HOSTNAME_LABEL = "kubernetes.io/hostname"  # a topology's node level, below the interconnect's domains


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
    requests_by_role = topology_requests(s.packing, s.counts)
    for role, count in s.counts.items():
        requests = {k: quantity_text(v) for k, v in sorted(s.requests[role].items()) if k != "pods"}
        container = {"name": TRAINING_CONTAINER[t.spec.framework], "resources": {"requests": requests}}
        pod_spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [container]}
        if s.selectors[role].labels:
            pod_spec["nodeSelector"] = dict(s.selectors[role].labels)
        if tolerations:
            pod_spec["tolerations"] = tolerations
        pod_set: dict[str, Any] = {"name": pod_set_name(role), "count": count, "template": {"spec": pod_spec}}
        if role in requests_by_role:
            pod_set["topologyRequest"] = requests_by_role[role]
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


def topology_requests(packing: Packing | None, counts: Mapping[Role, int]) -> dict[Role, dict[str, Any]]:
    """Each pod set's topology request from ``spec.scheduling.packing``: Required or Preferred at
    its level. A master and its workers form one pod set group (Kueue places the two together,
    the master as the leader); otherwise each pod set is placed by the pods' replica index, so
    neighbouring ranks share a domain."""
    if packing is None:
        return {}
    request: dict[str, Any] = {"required" if packing.mode == "Required" else "preferred": packing.level}
    roles = [r for r, n in counts.items() if n]
    grouped = len(roles) == 2 and "master" in roles
    extra = {"podSetGroupName": POD_SET_GROUP} if grouped else {"podIndexLabel": REPLICA_INDEX_LABEL}
    return {role: request | extra for role in roles}


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
    nodes: tuple[Mapping[str, Site], Sequence[str]] = ({}, ()),
) -> Decision:
    """The quota decision for a run Kueue admits: waiting for its Workload's admission, admitted
    with the flavors' and admission checks' pod contribution, or evicted (its grant withdrawn, so
    the trainer stops its pods). ``nodes``: the nodes by name and ``--topology-levels``, to score
    a topology assignment by."""
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
    grant_id = admission_id(w)
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
    quota = admitted_quota(w, workers, contribution)
    if (placed := topology_score(w.pod_sets, *nodes)) is not None:
        quota["placementScore"] = placed.to_k8s()
    return Decision(quota, condition("True", "AdmittedByKueue", message), (("Normal", "AdmittedByKueue", message),))


def admission_id(w: WorkloadView) -> str:
    """The grant's id: Kueue's admission, so that pods of an earlier one are replaced."""
    return f"kueue-{w.admission_hash}"


def admitted_quota(w: WorkloadView, workers: int, contribution: Mapping[str, Any]) -> dict[str, Any]:
    """status.quota of a run Kueue admitted through ``w``, its contribution with the grant."""
    grant = {"id": admission_id(w), "workers": workers}
    return {
        "workload": w.name,
        "clusterQueue": w.cluster_queue,
        "workers": workers,
        "admittedTime": w.admitted_time,
        "contribution": {**contribution, "grant": grant},
    }


def job_workload(t: TrainerInfo, workloads: Mapping[str, WorkloadView]) -> WorkloadView | None:
    """The Workload Kueue made for the Kubeflow job that controls the run, if it made one: Kueue's
    own integration for the job's kind admits it (Kueue's shipped configuration manages the
    Kubeflow kinds), so the run is reported to Kueue once, as that job."""
    return workloads.get(t.controller_uid) if t.controller_uid else None


def decide_by_job(t: TrainerInfo, w: WorkloadView) -> Decision:
    """The quota decision for a run whose Kubeflow job Kueue admits through its own Workload ``w``:
    Kueue suspends and resumes the job (and so the Trainer), and writes its flavors' node labels
    and tolerations into the job's templates, which reach the pods as the Trainer's overrides; no
    Workload of the Trainer's is made (docs/kubeflow.md#kueue)."""
    if t.finished or t.deleting:
        return Decision(
            {"workload": w.name}, condition("True", "Released", "the run is over; Kueue reads the job's end")
        )
    if over(t) or w.evicted is not None or not w.admitted or w.cluster_queue is None:
        said = w.evicted or w.pending_message or ("the job is suspended" if over(t) else "")
        message = f"Kueue admits the job through its Workload {w.name}, which waits" + (f": {said}" if said else "")
        return Decision({"workload": w.name}, condition("False", "WaitingForKueue", message))
    message = f"Kueue admitted the job's Workload {w.name} to ClusterQueue {w.cluster_queue}"
    # Pods carry the admission, as under kueue.decide: another (after an eviction) replaces them.
    pod = {"annotations": {ADMISSION_ANNOTATION: admission_id(w)}}
    quota = admitted_quota(w, t.spec.topology.workers, {"generation": t.generation, "pod": pod})
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
        labels, annotations, gates = dict(update.labels), dict(update.annotations), []
        if admission.topology is not None:  # gated until Kueue's ungater gives each pod its domain
            gates = [TOPOLOGY_GATE]
            labels[POD_SET_LABEL] = pod_set
            annotations |= {WORKLOAD_ANNOTATION: w.name, **topology_annotation(w.topology_requests.get(pod_set))}
        fragment: dict[str, Any] = {
            "nodeSelector": selector,
            "tolerations": tolerations,
            "labels": labels,
            "annotations": annotations,
            "schedulingGates": gates,
        }
        roles[pod_set] = {k: v for k, v in fragment.items() if v}
    return {role: fragment for role, fragment in roles.items() if fragment}


def topology_annotation(request: Mapping[str, Any] | None) -> dict[str, str]:
    """The annotation by which a pod says how its pod set asked to be placed (as Kueue's own
    integrations annotate theirs): required or preferred at a level, else unconstrained."""
    asked = request or {}
    for key, annotation in (("required", REQUIRED_ANNOTATION), ("preferred", PREFERRED_ANNOTATION)):
        if asked.get(key):
            return {annotation: str(asked[key])}
    return {UNCONSTRAINED_ANNOTATION: "true"}


def topology_score(
    pod_sets: Mapping[str, PodSetAdmission], sites: Mapping[str, Site], levels: Sequence[str]
) -> PlacementScore | None:
    """How Kueue's topology assignment places the run, scored by the rule of the quota's own
    packing (:func:`packing.score`, the ranks in Kueue's order). An assignment to nodes (Kueue
    keeps only the finest level when it is ``kubernetes.io/hostname``) is scored on the nodes'
    labels at ``levels`` (``--topology-levels``); one to coarser domains on the Topology's own
    levels, each domain standing for its nodes."""
    assigned = [(r, a.topology) for r in RING_ORDER if (a := pod_sets.get(r)) is not None and a.topology is not None]
    if not assigned or any(not topology.levels for _, topology in assigned):
        return None
    where: dict[Slot, str] = {}
    named: dict[str, Site] = {}
    for role, topology in assigned:
        for index, values in enumerate(topology.pods):
            if topology.levels[-1] == HOSTNAME_LABEL:
                where[(role, index)] = values[-1]
                continue
            name = "/".join(values)
            named[name] = Site(name, dict(zip(topology.levels, values, strict=True)))
            where[(role, index)] = name
    if named:
        if len({topology.levels for _, topology in assigned}) > 1 or len(named) != len(set(where.values())):
            return None  # pod sets on flavors of different topologies: no common measure
        return score(where, named, tuple(reversed(assigned[0][1].levels)))
    return score(where, sites, levels)


Verb = Literal["create", "replace", "release", "finish", "activate", "deactivate", "delete"]


@dataclass(frozen=True)
class WorkloadAction:
    verb: Verb
    namespace: str
    name: str
    body: Mapping[str, Any] = field(default_factory=dict)  # the manifest (create, replace)
    reason: str = ""  # finish: Succeeded or Failed


def actions(
    t: TrainerInfo,
    queue: str,
    w: WorkloadView | None,
    pods_left: bool,
    priorities: Mapping[str, int] | None = None,
    job: WorkloadView | None = None,
) -> list[WorkloadAction]:
    """What to write to Kueue for one run: its Workload made (again, when the spec changed before
    any reservation), deactivated while the run is suspended, its reservation given back once an
    evicted or suspended run's pods are gone, marked Finished when the run ends. A run whose
    Kubeflow job has a Workload of Kueue's own (``job``) has none: one made before Kueue's
    appeared is deleted."""
    if t.deleting:
        return []  # the Workload goes with its owner
    if job is not None:
        return [WorkloadAction("delete", t.namespace, w.name)] if w is not None else []
    known = priorities or {}
    if w is None:
        # A run whose pods cannot be sized is held as InvalidResources (decide.sort_out): no Workload.
        if over(t) or unknown_priority(t, known) is not None or invalid(t) is not None:
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
    elif w.cluster_queue is None and w.generation != t.generation and not suspended and invalid(t) is None:
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

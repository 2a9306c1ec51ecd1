"""Runs Kueue admits (trainerop_quota.kueue): the Workload a Trainer is reported as, the quota
decision its status makes, and what is written back to Kueue."""

from dataclasses import replace
from typing import Any

import pytest

from tests.factories import trainer_spec
from tests.unit.test_decide_quota import GPU, world
from trainerop_common.contracts import ADMISSION_ANNOTATION
from trainerop_quota import kueue
from trainerop_quota.decide import TrainerInfo, plan
from trainerop_quota.kueue_views import (
    GENERATION_ANNOTATION,
    FlavorView,
    PodSetAdmission,
    PodSetUpdate,
    TopologyAssignment,
    WorkloadView,
    topology_assignment,
    workload_view,
)
from trainerop_quota.packing import Site

NOW = "2026-12-05T00:00:00Z"
WL = "job-trainer-uid-job"
FLAVORS = {
    "a100": FlavorView("a100", {"gpu": "a100"}, [{"key": "a100", "operator": "Exists", "effect": "NoSchedule"}]),
    "h100": FlavorView("h100", {"gpu": "h100"}),
    "zone-a": FlavorView("zone-a", {"zone": "a"}),
}


def job(**extra: Any) -> TrainerInfo:
    s = trainer_spec(
        resources={"requests": {"cpu": 4}, "limits": {GPU: 8}}, topology={"workers": 3}, framework="pytorch"
    )
    return TrainerInfo(
        uid="uid-job", namespace="team-a", name="job", generation=2, created=NOW, spec=s, queue="team", **extra
    )


def admitted(flavors: dict[str, dict[str, str]], **extra: Any) -> WorkloadView:
    return WorkloadView(
        name=WL,
        generation=2,
        cluster_queue="cq",
        admitted=True,
        admitted_time=NOW,
        pod_sets={name: PodSetAdmission(1 if name == "master" else 3, f) for name, f in flavors.items()},
        admission_hash="abc",
        **extra,
    )


ONE_FLAVOR = {"master": {GPU: "a100", "cpu": "a100"}, "worker": {GPU: "a100", "cpu": "a100"}}
SUSPENDED = trainer_spec(resources={"limits": {GPU: 8}}, topology={"workers": 3}, runPolicy={"suspend": True})

DECISIONS: list[tuple[str, TrainerInfo, WorkloadView | None, str, str, str]] = [
    # (case, trainer, its workload, condition status, reason, in the message)
    ("not reported yet", job(), None, "False", "WaitingForKueue", f"as Workload {WL} in LocalQueue team"),
    (
        "queued, with Kueue's word",
        job(),
        WorkloadView(WL, 2, pending_message="insufficient unused quota for nvidia.com/gpu"),
        "False",
        "WaitingForKueue",
        f"Workload {WL} waits in LocalQueue team: insufficient unused quota",
    ),
    ("admitted", job(), admitted(ONE_FLAVOR), "True", "AdmittedByKueue", "to ClusterQueue cq (flavors: a100)"),
    (
        "reserved, an admission check still pending",
        job(),
        replace(admitted(ONE_FLAVOR), admitted=False),
        "False",
        "WaitingForKueue",
        "waits in LocalQueue team",
    ),
    (
        "evicted, its pods still to stop",
        job(),
        admitted(ONE_FLAVOR, evicted="Preempted to accommodate a higher priority Workload"),
        "False",
        "EvictedByKueue",
        "Preempted to accommodate a higher priority Workload; the run's pods are stopped",
    ),
    (
        "evicted and given back: queued again",
        job(),
        WorkloadView(WL, 2, evicted="Preempted", pending_message="couldn't assign flavors"),
        "False",
        "WaitingForKueue",
        "couldn't assign flavors",
    ),
    (
        "roles sent to flavors of different nodes",
        job(),
        admitted({"master": {GPU: "a100"}, "worker": {GPU: "h100"}}),
        "True",
        "AdmittedByKueue",
        "(flavors: a100, h100)",
    ),
    ("over", job(finished=NOW, phase="Succeeded"), admitted(ONE_FLAVOR), "True", "Released", "the run is over"),
    ("suspended", replace(job(), spec=SUSPENDED), admitted(ONE_FLAVOR), "False", "Suspended", "deactivated"),
]


@pytest.mark.parametrize(("case", "t", "w", "status", "reason", "message"), DECISIONS, ids=[r[0] for r in DECISIONS])
def test_the_quota_decision_follows_the_workload(
    case: str, t: TrainerInfo, w: WorkloadView | None, status: str, reason: str, message: str
) -> None:
    d = kueue.decide(t, "team", w, FLAVORS)
    assert (d.condition.status, d.condition.reason) == (status, reason), case
    assert message in d.condition.message, case
    assert d.quota["workload"] == WL
    granted = (d.quota.get("contribution") or {}).get("grant")
    assert (granted is not None) == (reason == "AdmittedByKueue"), case  # no grant: the trainer stops its pods


def test_an_admission_contributes_each_role_its_flavors_labels_and_tolerations_and_the_checks_updates() -> None:
    w = admitted(
        {"master": {GPU: "a100"}, "worker": {GPU: "a100", "cpu": "zone-a"}},
        updates={"worker": PodSetUpdate(labels={"team": "a"}, node_selector={"rack": "7"})},
    )
    d = kueue.decide(job(), "team", w, FLAVORS)
    a100 = [{"key": "a100", "operator": "Exists", "effect": "NoSchedule"}]
    assert d.quota["contribution"] == {
        "generation": 2,
        "pod": {"annotations": {"trainer.operator.kubeflow.org/admission": "kueue-abc"}},
        "roles": {
            "master": {"nodeSelector": {"gpu": "a100"}, "tolerations": a100},
            "worker": {
                "nodeSelector": {"gpu": "a100", "rack": "7", "zone": "a"},
                "tolerations": a100,
                "labels": {"team": "a"},
            },
        },
        "grant": {"id": "kueue-abc", "workers": 3},
    }
    assert (d.quota["clusterQueue"], d.quota["admittedTime"]) == ("cq", NOW)
    assert d.events == (("Normal", "AdmittedByKueue", d.condition.message),)


def test_the_workload_has_a_pod_set_per_role_with_the_pods_requests() -> None:
    body = kueue.workload_manifest(job(), "team", {})
    assert body["metadata"]["name"] == WL
    assert body["metadata"]["annotations"] == {GENERATION_ANNOTATION: "2"}
    assert body["metadata"]["ownerReferences"][0] | {} == {
        "apiVersion": "trainer.operator.kubeflow.org/v1alpha1",
        "kind": "Trainer",
        "name": "job",
        "uid": "uid-job",
        "controller": True,
    }
    assert body["spec"]["queueName"] == "team"
    sets = {s["name"]: s for s in body["spec"]["podSets"]}
    assert {n: s["count"] for n, s in sets.items()} == {"master": 1, "worker": 3}
    container = sets["worker"]["template"]["spec"]["containers"][0]
    assert container == {"name": "pytorch", "resources": {"requests": {"cpu": "4", GPU: "8"}}}
    assert "minCount" not in sets["worker"]
    assert "priorityClassRef" not in body["spec"]


def test_a_priority_class_named_by_the_label_gives_the_workload_its_priority_or_holds_the_run() -> None:
    t = job(kueue_priority_class="urgent")
    spec = kueue.workload_manifest(t, "team", {"urgent": 1000})["spec"]
    assert (spec["priorityClassRef"], spec["priority"]) == (
        {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "urgent"},
        1000,
    )
    d = kueue.decide(t, "team", None, FLAVORS, {})
    assert (d.condition.status, d.condition.reason) == ("False", "PriorityClassNotFound")
    assert "names WorkloadPriorityClass urgent, which does not exist" in d.condition.message
    assert kueue.actions(t, "team", None, False, {}) == []
    assert [a.verb for a in kueue.actions(t, "team", None, False, {"urgent": 1000})] == ["create"]


def test_an_elastic_run_may_be_admitted_with_fewer_workers() -> None:
    """Partial admission: the worker pod set's minCount is the elastic minimum, and the grant has
    as many workers as Kueue admitted."""
    s = trainer_spec(
        resources={"limits": {GPU: 8}}, topology={"workers": 4, "elastic": {"minWorkers": 2, "maxWorkers": 4}}
    )
    t = replace(job(), spec=s)
    (workers,) = kueue.workload_manifest(t, "team", {})["spec"]["podSets"]
    assert (workers["count"], workers["minCount"]) == (4, 2)
    w = admitted({"worker": {GPU: "a100"}})
    w = replace(w, pod_sets={"worker": PodSetAdmission(2, {GPU: "a100"})})
    d = kueue.decide(t, "team", w, FLAVORS)
    assert (d.quota["workers"], d.quota["contribution"]["grant"]["workers"]) == (2, 2)


def test_kueue_s_status_is_read_as_the_decision_needs_it() -> None:
    body = {
        "metadata": {"name": WL, "annotations": {GENERATION_ANNOTATION: "2"}},
        "spec": {"active": True, "podSets": [{"name": "worker", "count": 3, "topologyRequest": {"required": "rack"}}]},
        "status": {
            "conditions": [
                {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "Quota reserved"},
                {"type": "Admitted", "status": "True", "reason": "Admitted", "lastTransitionTime": NOW},
            ],
            "admission": {
                "clusterQueue": "cq",
                "podSetAssignments": [{"name": "worker", "count": 3, "flavors": {GPU: "a100"}}],
            },
            "admissionChecks": [
                {"name": "prov", "state": "Ready", "podSetUpdates": [{"name": "worker", "nodeSelector": {"rack": "7"}}]}
            ],
        },
    }
    w = workload_view(body)
    assert (w.generation, w.cluster_queue, w.admitted, w.admitted_time, w.evicted, w.active) == (
        2,
        "cq",
        True,
        NOW,
        None,
        True,
    )
    assert w.pod_sets == {"worker": PodSetAdmission(3, {GPU: "a100"})}
    assert w.updates["worker"].node_selector == {"rack": "7"}
    assert (w.topology_requests, w.topology_assigned) == ({"worker": {"required": "rack"}}, False)


def packed(mode: str, workers: int = 3, master: bool = True) -> TrainerInfo:
    s = trainer_spec(
        resources={"limits": {GPU: 8}},
        topology={"workers": workers},
        framework="pytorch" if master else "jax",
        scheduling={"packing": {"level": "nvidia.com/gpu.clique", "mode": mode}},
    )
    return replace(job(), spec=s)


TOPOLOGY_REQUESTS: list[tuple[str, TrainerInfo, dict[str, Any] | None]] = [
    # (case, trainer, each pod set's topologyRequest)
    ("no packing: none", job(), None),
    (
        "a master and workers, Required: one group, placed together",
        packed("Required"),
        {"required": "nvidia.com/gpu.clique", "podSetGroupName": "run"},
    ),
    (
        "workers only, Preferred: placed by replica index (neighbouring ranks together)",
        packed("Preferred", master=False),
        {"preferred": "nvidia.com/gpu.clique", "podIndexLabel": "trainer.operator.kubeflow.org/replica-index"},
    ),
]


@pytest.mark.parametrize(("case", "t", "want"), TOPOLOGY_REQUESTS, ids=[r[0] for r in TOPOLOGY_REQUESTS])
def test_packing_becomes_each_pod_set_s_topology_request(
    case: str, t: TrainerInfo, want: dict[str, Any] | None
) -> None:
    sets = kueue.workload_manifest(t, "team", {})["spec"]["podSets"]
    assert sets
    assert all(s.get("topologyRequest") == want for s in sets)


def tas(levels: list[str], *slices: dict[str, Any]) -> dict[str, Any]:
    return {"levels": levels, "slices": list(slices)}


LEVELS = ["nvidia.com/gpu.clique", "kubernetes.io/hostname"]
# Kueue's compact form: 3 workers in clique-0 on two nodes (2 + 1), a master alone in clique-1.
WORKERS_ON_CLIQUE_0 = tas(
    ["nvidia.com/gpu.clique"],
    {"domainCount": 1, "valuesPerLevel": [{"universal": "clique-0"}], "podCounts": {"universal": 3}},
)
MASTER_ON_CLIQUE_1 = tas(
    ["nvidia.com/gpu.clique"],
    {"domainCount": 1, "valuesPerLevel": [{"universal": "clique-1"}], "podCounts": {"universal": 1}},
)
# With the nodes as the finest level, Kueue writes only that level.
WORKERS_ON_NODES = tas(
    ["kubernetes.io/hostname"],
    {
        "domainCount": 2,
        "valuesPerLevel": [{"individual": {"prefix": "kwok-gpu-", "roots": ["0", "4"]}}],
        "podCounts": {"individual": [2, 1]},
    },
)
SITES = {f"kwok-gpu-{i}": Site(f"kwok-gpu-{i}", {"nvidia.com/gpu.clique": f"clique-{i // 4}"}) for i in range(8)}
NODES = (SITES, ("nvidia.com/gpu.clique",))


def test_a_topology_assignment_is_read_as_one_domain_per_pod() -> None:
    got = topology_assignment(WORKERS_ON_NODES)
    assert got == TopologyAssignment(("kubernetes.io/hostname",), (("kwok-gpu-0",), ("kwok-gpu-0",), ("kwok-gpu-4",)))
    assert topology_assignment(None) is None


def on(**assignments: dict[str, Any]) -> dict[str, PodSetAdmission]:
    """Pod sets admitted to flavor a100 where Kueue's topology assignment put them."""
    placed = {role: topology_assignment(body) for role, body in assignments.items()}
    return {role: PodSetAdmission(len(ta.pods), {GPU: "a100"}, ta) for role, ta in placed.items() if ta}


SCORES: list[tuple[str, dict[str, PodSetAdmission], tuple[str | None, int, int] | None]] = [
    # (case, the pod sets' admissions, (level holding all, domains spanned, cross-domain ring neighbours))
    ("no topology assignment", {"worker": PodSetAdmission(3, {GPU: "a100"})}, None),
    ("workers in one clique", on(worker=WORKERS_ON_CLIQUE_0), ("nvidia.com/gpu.clique", 1, 0)),
    (
        "master in another clique: two ring edges cross",
        on(master=MASTER_ON_CLIQUE_1, worker=WORKERS_ON_CLIQUE_0),
        (None, 2, 2),
    ),
    ("on nodes of two cliques, scored on the nodes' labels", on(worker=WORKERS_ON_NODES), (None, 2, 2)),
    ("pod sets of two topologies: no common measure", on(master=MASTER_ON_CLIQUE_1, worker=WORKERS_ON_NODES), None),
]


@pytest.mark.parametrize(("case", "pod_sets", "want"), SCORES, ids=[r[0] for r in SCORES])
def test_kueue_s_topology_assignment_is_scored_like_the_quota_s_own_packing(
    case: str, pod_sets: dict[str, PodSetAdmission], want: tuple[str | None, int, int] | None
) -> None:
    got = kueue.topology_score(pod_sets, *NODES)
    assert (None if got is None else (got.level, got.domains, got.cross_neighbours)) == want


ANNOTATIONS: list[tuple[str, dict[str, Any] | None, dict[str, str]]] = [
    (
        "required",
        {"required": "nvidia.com/gpu.clique", "podSetGroupName": "run"},
        {"kueue.x-k8s.io/podset-required-topology": "nvidia.com/gpu.clique"},
    ),
    ("preferred", {"preferred": "rack", "podIndexLabel": "i"}, {"kueue.x-k8s.io/podset-preferred-topology": "rack"}),
    ("no request: Kueue's implicit default", None, {"kueue.x-k8s.io/podset-unconstrained-topology": "true"}),
]


@pytest.mark.parametrize(("case", "asked", "want"), ANNOTATIONS, ids=[r[0] for r in ANNOTATIONS])
def test_a_gated_pod_says_how_its_pod_set_asked_to_be_placed(
    case: str, asked: dict[str, Any] | None, want: dict[str, str]
) -> None:
    assert kueue.topology_annotation(asked) == want


def test_pods_of_a_pod_set_kueue_placed_by_topology_are_gated_until_its_ungater_gives_their_domain() -> None:
    request = {"required": "nvidia.com/gpu.clique", "podSetGroupName": "run"}
    w = replace(
        admitted(ONE_FLAVOR),
        pod_sets=on(worker=WORKERS_ON_NODES) | {"master": PodSetAdmission(1, {GPU: "a100"})},
        topology_requests={"worker": request},
    )
    d = kueue.decide(job(), "team", w, FLAVORS, nodes=NODES)
    roles = d.quota["contribution"]["roles"]
    assert roles["worker"]["schedulingGates"] == ["kueue.x-k8s.io/topology"]
    assert roles["worker"]["labels"] == {"kueue.x-k8s.io/podset": "worker"}
    assert roles["worker"]["annotations"] == {
        "kueue.x-k8s.io/workload": WL,
        "kueue.x-k8s.io/podset-required-topology": "nvidia.com/gpu.clique",
    }
    assert "schedulingGates" not in roles["master"]  # not placed by topology: scheduled as it is
    assert d.quota["placementScore"] == {"domains": 2, "crossNeighbours": 2}


ACTIONS: list[tuple[str, TrainerInfo, WorkloadView | None, bool, list[str]]] = [
    # (case, trainer, its workload, its pods still there, the verbs)
    ("a new run is reported", job(), None, False, ["create"]),
    ("admitted and running: nothing", job(), admitted(ONE_FLAVOR), True, []),
    ("the spec changed while queued: made again", job(), WorkloadView(WL, 1), False, ["replace"]),
    ("the spec changed after admission: kept", job(), replace(admitted(ONE_FLAVOR), generation=1), True, []),
    ("suspended: deactivated", replace(job(), spec=SUSPENDED), admitted(ONE_FLAVOR), True, ["deactivate"]),
    ("resumed: activated", job(), WorkloadView(WL, 2, active=False), False, ["activate"]),
    ("evicted, pods still there: wait", job(), admitted(ONE_FLAVOR, evicted="Preempted"), True, []),
    ("evicted, pods gone: given back", job(), admitted(ONE_FLAVOR, evicted="Preempted"), False, ["release"]),
    (
        "suspended, evicted, pods gone",
        replace(job(), spec=SUSPENDED),
        admitted(ONE_FLAVOR, evicted="Deactivated", active=False),
        False,
        ["release"],
    ),
    ("the run ended: Finished", job(finished=NOW, phase="Failed"), admitted(ONE_FLAVOR), False, ["finish"]),
    ("already Finished: nothing", job(finished=NOW), replace(admitted(ONE_FLAVOR), finished=True), False, []),
    ("being deleted: the Workload goes with it", job(deleting=True), None, False, []),
]


@pytest.mark.parametrize(("case", "t", "w", "pods", "verbs"), ACTIONS, ids=[r[0] for r in ACTIONS])
def test_what_is_written_to_kueue(
    case: str, t: TrainerInfo, w: WorkloadView | None, pods: bool, verbs: list[str]
) -> None:
    assert [a.verb for a in kueue.actions(t, "team", w, pods)] == verbs, case


def test_a_release_gives_the_reservation_back_conditionally_and_a_finish_says_how_it_ended() -> None:
    body = {
        "metadata": {"name": WL, "resourceVersion": "42"},
        "status": {
            "admission": {"clusterQueue": "cq"},
            "conditions": [
                {
                    "type": "QuotaReserved",
                    "status": "True",
                    "reason": "QuotaReserved",
                    "message": "",
                    "lastTransitionTime": "t0",
                },
                {"type": "Evicted", "status": "True", "reason": "Preempted", "message": "", "lastTransitionTime": "t1"},
            ],
        },
    }
    release = kueue.status_patch(body, kueue.WorkloadAction("release", "team-a", WL), NOW)
    assert release["metadata"] == {"resourceVersion": "42"}
    assert release["status"]["admission"] is None
    by_type = {c["type"]: c for c in release["status"]["conditions"]}
    assert (by_type["QuotaReserved"]["status"], by_type["QuotaReserved"]["lastTransitionTime"]) == ("False", NOW)
    assert (by_type["Admitted"]["status"], by_type["Evicted"]["status"]) == ("False", "True")
    finish = kueue.status_patch(body, kueue.WorkloadAction("finish", "team-a", WL, reason="Failed"), NOW)
    finished = {c["type"]: c for c in finish["status"]["conditions"]}["Finished"]
    assert (finished["status"], finished["reason"], finished["message"]) == (
        "True",
        "Failed",
        "the Trainer's run failed",
    )
    assert "admission" not in finish["status"]


def test_the_plan_leaves_kueue_s_runs_to_kueue_only_where_kueue_is_on() -> None:
    t = job()
    off = plan(world([t], []))
    on = plan(replace(world([t], []), kueue=True, workloads={t.uid: admitted(ONE_FLAVOR)}, flavors=FLAVORS))
    assert off.decisions[t.uid].condition.reason != "AdmittedByKueue"  # without --kueue the label is not read
    assert on.decisions[t.uid].condition.reason == "AdmittedByKueue"
    assert off.policies["team"].pending == 1
    assert "team" not in on.policies  # the QuotaPolicy's summary does not count a run Kueue admits


def test_a_run_kueue_would_queue_whose_pods_cannot_be_sized_is_held_without_a_workload() -> None:
    """Resource claims in an override cannot be counted: the run is held, no Workload is made."""
    claims = {"worker": {"spec": {"resourceClaims": [{"name": "gpu", "resourceClaimName": "any-gpu"}]}}}
    t = replace(job(), spec=trainer_spec(topology={"workers": 1}, podTemplateOverrides=claims))
    assert kueue.actions(t, "team", None, False, {}) == []
    d = plan(replace(world([t], []), kueue=True, flavors=FLAVORS)).decisions[t.uid]
    assert (d.condition.status, d.condition.reason) == ("False", "InvalidResources")
    assert "resourceClaims" in d.condition.message


# -- a Kubeflow job Kueue admits itself (issue 53: one job, one admission) ------------------------

JOB_UID = "uid-of-the-pytorchjob"
JOB_WL = "pytorchjob-job-1a2b3"


def of_job(**extra: Any) -> TrainerInfo:
    """The Trainer the kubeflow controller made for a PyTorchJob with the queue label (copied)."""
    return job(controller_uid=JOB_UID, **extra)


JOB_DECISIONS: list[tuple[str, TrainerInfo, WorkloadView, str, str, str]] = [
    # (case, trainer, the job's workload, condition status, reason, in the message)
    (
        "queued",
        of_job(),
        WorkloadView(JOB_WL, 0, pending_message="insufficient quota"),
        "False",
        "WaitingForKueue",
        f"through its Workload {JOB_WL}, which waits: insufficient quota",
    ),
    ("admitted", of_job(), replace(admitted(ONE_FLAVOR), name=JOB_WL), "True", "AdmittedByKueue", "ClusterQueue cq"),
    (
        "evicted",
        of_job(),
        replace(admitted(ONE_FLAVOR, evicted="Preempted"), name=JOB_WL),
        "False",
        "WaitingForKueue",
        "waits: Preempted",
    ),
    ("over", of_job(finished=NOW), replace(admitted(ONE_FLAVOR), name=JOB_WL), "True", "Released", "is over"),
    (
        "admitted, the job still suspended",
        replace(of_job(), spec=SUSPENDED),
        replace(admitted(ONE_FLAVOR), name=JOB_WL),
        "False",
        "WaitingForKueue",
        "waits: the job is suspended",
    ),
]


@pytest.mark.parametrize(
    ("case", "t", "w", "status", "reason", "message"), JOB_DECISIONS, ids=[r[0] for r in JOB_DECISIONS]
)
def test_a_kubeflow_job_kueue_admits_itself_is_admitted_through_its_workload_alone(
    case: str, t: TrainerInfo, w: WorkloadView, status: str, reason: str, message: str
) -> None:
    workloads = {JOB_UID: w}
    assert kueue.job_workload(t, workloads) == w
    d = plan(replace(world([t], []), kueue=True, workloads=workloads, flavors=FLAVORS)).decisions[t.uid]
    assert (d.condition.status, d.condition.reason) == (status, reason), case
    assert message in d.condition.message, case
    assert d.quota["workload"] == JOB_WL
    contribution = d.quota.get("contribution") or {}
    assert (contribution.get("grant") is not None) == (reason == "AdmittedByKueue"), case
    if reason == "AdmittedByKueue":  # the pods carry the admission: another replaces them
        assert contribution["pod"]["annotations"] == {ADMISSION_ANNOTATION: "kueue-abc"}
    assert kueue.actions(t, "team", None, False, {}, w) == []  # no Workload of the Trainer's is made


def test_a_trainers_workload_made_before_kueue_made_the_jobs_is_deleted() -> None:
    own = WorkloadView(WL, 2)
    job_wl = WorkloadView(JOB_WL, 0)
    assert [a.verb for a in kueue.actions(of_job(), "team", own, False, {}, job_wl)] == ["delete"]
    assert kueue.actions(of_job(deleting=True), "team", own, False, {}, job_wl) == []


def test_a_trainer_of_a_job_kueue_does_not_manage_gets_its_own_workload() -> None:
    """Kueue without the job's kind among its integrations makes no Workload for the job: the
    quota controller reports the Trainer, as for any run with the queue label."""
    t = of_job()
    assert kueue.job_workload(t, {}) is None
    assert [a.verb for a in kueue.actions(t, "team", None, False, {})] == ["create"]
    assert kueue.job_workload(job(), {JOB_UID: WorkloadView(JOB_WL, 0)}) is None  # a Trainer of no job

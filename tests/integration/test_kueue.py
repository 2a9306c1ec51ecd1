"""Kueue admits the Trainers that name a LocalQueue (docs/quota.md#kueue), against the real Kueue
manager built from its Go module (testbed/kueue.py) and run as a local process: a run waits with
Kueue's own message until its Workload is admitted, then starts on its flavor's nodes with its
tolerations; a suspended run gives its quota back to the next; the run's end marks its Workload
Finished, which frees the quota too."""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testbed import cluster as cluster_tool
from testbed import kueue, localdev
from tests.harness import REPO, Cluster, condition, eventually
from tests.integration.test_client import finishing_after
from tests.integration.test_deploy import controller_env, with_component
from tests.integration.test_quota import GPU, pods_of, quota, run
from trainerop_common.contracts import REPLICA_TYPE_LABEL

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
DOMAIN = f"{cluster_tool.LABEL_PREFIX}/nvlink-domain"
TOLERATION = {"key": "example.com/kueue-flavor", "operator": "Exists", "effect": "NoSchedule"}


@pytest.fixture(scope="module")
def kueue_manager(cluster: Cluster) -> Iterator[None]:
    try:
        kueue.start(cluster_tool.RUN_DIR, localdev.kubectl)
    except cluster_tool.ClusterError as err:
        pytest.fail(str(err))
    cluster.kubectl("apply", "-f", str(REPO / "deploy" / "components" / "kueue" / "rbac.yaml"))
    localdev.restart("quota", {"TRAINEROP_KUEUE": "true"})
    try:
        yield
    finally:
        localdev.restart("quota")
        kueue.stop(cluster_tool.RUN_DIR, localdev.kubectl)


def queues(cluster: Cluster, namespace: str, gpus: int, domain: str, preempt: bool = False) -> None:
    """A ResourceFlavor of one NVLink domain's nodes (with a toleration for its pods), a
    ClusterQueue of ``gpus`` GPUs of it for ``namespace``, and the LocalQueue ``team`` there."""
    flavor = f"{namespace}-flavor"
    cluster.apply(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": flavor},
            "spec": {"nodeLabels": {DOMAIN: domain}, "tolerations": [TOLERATION]},
        }
    )
    cluster.apply(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": namespace},
            "spec": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                **({"preemption": {"withinClusterQueue": "LowerPriority"}} if preempt else {}),
                "resourceGroups": [
                    {
                        "coveredResources": [GPU],
                        "flavors": [{"name": flavor, "resources": [{"name": GPU, "nominalQuota": gpus}]}],
                    }
                ],
            },
        }
    )
    cluster.apply(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "team"},
            "spec": {"clusterQueue": namespace},
        },
        namespace,
    )


def queued(name: str, priority: str | None = None, **spec: Any) -> dict[str, Any]:
    body = run(name, **spec)
    body["metadata"]["labels"] = {QUEUE_LABEL: "team"} | ({PRIORITY_LABEL: priority} if priority else {})
    return body


def gate(cluster: Cluster, namespace: str, name: str, reason: str) -> dict[str, Any] | None:
    got = quota(cluster, namespace, name)[1]
    return got if got.get("reason") == reason else None


def workload(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    return cluster.get("workload", name, namespace)


def test_kueue_admits_runs_in_its_queue_and_they_go_where_its_flavor_says(
    cluster: Cluster, namespace: str, kueue_manager: None
) -> None:
    queues(cluster, namespace, gpus=8, domain="nvl-6")
    cluster.apply(queued("first"), namespace)
    admitted = eventually(lambda: gate(cluster, namespace, "first", "AdmittedByKueue"), what="first admitted by Kueue")
    q = quota(cluster, namespace, "first")[0]
    assert (q["clusterQueue"], admitted["status"]) == (namespace, "True")
    assert f"to ClusterQueue {namespace} (flavors: {namespace}-flavor)" in admitted["message"]
    wl = workload(cluster, namespace, q["workload"])
    assert wl["spec"]["queueName"] == "team"
    assert [(s["name"], s["count"]) for s in wl["spec"]["podSets"]] == [("worker", 1)]
    assert wl["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"]["requests"] == {GPU: "8"}
    assert wl["metadata"]["ownerReferences"][0]["kind"] == "Trainer"
    (pod,) = eventually(lambda: [p for p in pods_of(cluster, namespace, "first") if p["spec"].get("nodeName")])
    assert pod["spec"]["nodeSelector"][DOMAIN] == "nvl-6"
    assert TOLERATION in pod["spec"]["tolerations"]
    assert pod["spec"]["nodeName"] in ("kwok-gpu-12", "kwok-gpu-13")

    cluster.apply(queued("second"), namespace)

    def kueue_says(want: str) -> dict[str, Any] | None:
        got = gate(cluster, namespace, "second", "WaitingForKueue")
        return got if got is not None and want in got["message"] else None

    waiting = eventually(lambda: kueue_says("insufficient unused quota for nvidia.com/gpu"), what="Kueue's reason")
    assert waiting["status"] == "False"
    assert pods_of(cluster, namespace, "second") == []

    # Suspended, the first gives its quota back (its Workload deactivated, evicted, released).
    suspend = '{"spec":{"runPolicy":{"suspend":true}}}'
    cluster.kubectl("patch", "trainer", "first", "-n", namespace, "--type=merge", "-p", suspend)
    eventually(
        lambda: gate(cluster, namespace, "second", "AdmittedByKueue"), what="second admitted after the suspension"
    )
    eventually(lambda: len(pods_of(cluster, namespace, "second")) == 1, what="second's pod")
    assert pods_of(cluster, namespace, "first") == []
    first = workload(cluster, namespace, quota(cluster, namespace, "first")[0]["workload"])
    assert first["spec"]["active"] is False
    assert "admission" not in first.get("status", {})


def test_a_finished_run_marks_its_workload_finished_and_frees_the_quota(
    cluster: Cluster, namespace: str, kueue_manager: None
) -> None:
    queues(cluster, namespace, gpus=8, domain="nvl-7")
    cluster.apply(queued("short", **finishing_after(5)), namespace)
    eventually(lambda: gate(cluster, namespace, "short", "AdmittedByKueue"), what="short admitted")
    cluster.apply(queued("next"), namespace)
    eventually(lambda: gate(cluster, namespace, "short", "Released"), timeout=120, what="short over")
    name = quota(cluster, namespace, "short")[0]["workload"]
    finished = eventually(lambda: condition(workload(cluster, namespace, name), "Finished"), what="Workload Finished")
    assert (finished["status"], finished["reason"]) == ("True", "Succeeded")
    eventually(lambda: gate(cluster, namespace, "next", "AdmittedByKueue"), what="next admitted once short ended")


def test_roles_kueue_sends_to_different_flavors_go_to_their_flavors_nodes(
    cluster: Cluster, namespace: str, kueue_manager: None
) -> None:
    """A PyTorch run (a master and a worker of 8 GPUs) on a ClusterQueue of two flavors of 8 GPUs
    each: Kueue gives the master the first and the worker the second, and each role's pod goes
    to its flavor's nodes (Contribution.roles)."""
    flavors = []
    for domain in ("nvl-2", "nvl-3"):
        name = f"{namespace}-{domain}"
        flavor = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": name}}
        cluster.apply(flavor | {"spec": {"nodeLabels": {DOMAIN: domain}}})
        flavors.append({"name": name, "resources": [{"name": GPU, "nominalQuota": 8}]})
    queue = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": namespace}}
    selector = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
    groups = [{"coveredResources": [GPU], "flavors": flavors}]
    cluster.apply(queue | {"spec": {"namespaceSelector": selector, "resourceGroups": groups}})
    local = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "team"}}
    cluster.apply(local | {"spec": {"clusterQueue": namespace}}, namespace)
    cluster.apply(queued("split", framework="pytorch"), namespace)
    eventually(lambda: gate(cluster, namespace, "split", "AdmittedByKueue"), what="split admitted")

    def both() -> list[dict[str, Any]] | None:
        pods = pods_of(cluster, namespace, "split")
        return pods if len(pods) == 2 else None

    pods = eventually(both, what="its two pods")
    where = {p["metadata"]["name"]: p["spec"]["nodeSelector"][DOMAIN] for p in pods}
    assert where == {"split-master-0": "nvl-2", "split-worker-0": "nvl-3"}


def test_an_elastic_run_is_admitted_with_the_workers_the_queue_holds(
    cluster: Cluster, namespace: str, kueue_manager: None
) -> None:
    """Partial admission: 16 GPUs, 8 in use; an elastic run of up to 3 workers of 8 GPUs (at
    least 1) starts with the 1 worker that fits."""
    queues(cluster, namespace, gpus=16, domain="nvl-4")
    cluster.apply(queued("first"), namespace)
    eventually(lambda: gate(cluster, namespace, "first", "AdmittedByKueue"), what="first admitted")
    body = queued("elastic", workers=3)
    body["spec"]["topology"]["elastic"] = {"minWorkers": 1, "maxWorkers": 3}
    cluster.apply(body, namespace)
    eventually(lambda: gate(cluster, namespace, "elastic", "AdmittedByKueue"), what="elastic admitted")
    assert quota(cluster, namespace, "elastic")[0]["workers"] == 1
    eventually(lambda: len(pods_of(cluster, namespace, "elastic")) == 1, what="its one worker")


def test_a_run_kueue_preempts_stops_gives_its_quota_back_and_queues_again(
    cluster: Cluster, namespace: str, kueue_manager: None
) -> None:
    """Kueue's own eviction: a higher-priority run (WorkloadPriorityClass by label) preempts the
    running one, whose pods stop; its reservation is given back, the other starts, and the
    preempted run waits in the queue with Kueue's word."""
    for name, value in ((f"{namespace}-low", 10), (f"{namespace}-high", 1000)):
        priority = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass", "value": value}
        cluster.apply(priority | {"metadata": {"name": name}})
    queues(cluster, namespace, gpus=8, domain="nvl-5", preempt=True)
    cluster.apply(queued("low", priority=f"{namespace}-missing"), namespace)
    held = eventually(lambda: gate(cluster, namespace, "low", "PriorityClassNotFound"), what="the missing class")
    assert f"names WorkloadPriorityClass {namespace}-missing, which does not exist" in held["message"]
    cluster.kubectl("label", "trainer", "low", "-n", namespace, f"{PRIORITY_LABEL}={namespace}-low", "--overwrite")
    eventually(lambda: gate(cluster, namespace, "low", "AdmittedByKueue"), what="low admitted")
    eventually(lambda: len(pods_of(cluster, namespace, "low")) == 1, what="low's pod")
    assert workload(cluster, namespace, quota(cluster, namespace, "low")[0]["workload"])["spec"]["priority"] == 10

    cluster.apply(queued("high", priority=f"{namespace}-high"), namespace)
    eventually(lambda: gate(cluster, namespace, "high", "AdmittedByKueue"), timeout=90, what="high admitted")
    eventually(lambda: len(pods_of(cluster, namespace, "high")) == 1, what="high's pod")
    assert pods_of(cluster, namespace, "low") == []
    again = eventually(lambda: gate(cluster, namespace, "low", "WaitingForKueue"), what="low queued again")
    assert again["status"] == "False"
    events = cluster.kubectl(
        "get", "events", "-n", namespace, "--field-selector", "reason=EvictedByKueue", "-o", "name"
    )
    assert events.strip(), "the eviction was said in a Warning Event"


CLIQUE = "nvidia.com/gpu.clique"
FAKE_NODE_TAINT = {"key": cluster_tool.KWOK_NODE_ANNOTATION, "operator": "Exists", "effect": "NoSchedule"}


def topology_queues(cluster: Cluster, namespace: str, gpus: int) -> None:
    """Kueue's topology-aware scheduling: a Topology of NVLink cliques then nodes, a flavor of
    the fake GPU nodes on it (tolerating their taint, which Kueue checks), ``gpus`` GPUs of it."""
    cluster.apply(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Topology",
            "metadata": {"name": f"{namespace}-cliques"},
            "spec": {"levels": [{"nodeLabel": CLIQUE}, {"nodeLabel": "kubernetes.io/hostname"}]},
        }
    )
    flavor = {
        "nodeLabels": {"gpu-type": "nvidia-tesla-a100"},
        "topologyName": f"{namespace}-cliques",
        "tolerations": [FAKE_NODE_TAINT],
    }
    cluster.apply(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": f"{namespace}-tas"},
            "spec": flavor,
        }
    )
    quota_of = [{"name": GPU, "nominalQuota": gpus}]
    groups = [{"coveredResources": [GPU], "flavors": [{"name": f"{namespace}-tas", "resources": quota_of}]}]
    selector = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
    queue = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": namespace}}
    cluster.apply(queue | {"spec": {"namespaceSelector": selector, "resourceGroups": groups}})
    local = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "team"}}
    cluster.apply(local | {"spec": {"clusterQueue": namespace}}, namespace)


def test_a_run_packed_in_one_clique_is_placed_there_by_kueue_s_topology_aware_scheduling(
    cluster: Cluster, namespace: str, kueue_manager: None
) -> None:
    """spec.scheduling.packing Required at the clique level becomes the Workload's topology
    request (the master and the workers one group); Kueue assigns nodes of one clique, the pods
    are created gated with the pod set label and the Workload and packing annotations, Kueue's
    ungater gives each its node and lifts the gate, and they run within one clique;
    status.quota.placementScore says so."""
    topology_queues(cluster, namespace, gpus=64)
    packing = {"packing": {"level": CLIQUE, "mode": "Required"}}
    cluster.apply(queued("packed", workers=3, gpus=2, framework="pytorch", scheduling=packing), namespace)
    eventually(lambda: gate(cluster, namespace, "packed", "AdmittedByKueue"), what="packed admitted")
    q = quota(cluster, namespace, "packed")[0]
    pod_sets = workload(cluster, namespace, q["workload"])["spec"]["podSets"]
    assert {s["name"]: s["topologyRequest"] for s in pod_sets} == {
        role: {"required": CLIQUE, "podSetGroupName": "run"} for role in ("master", "worker")
    }

    def placed() -> list[dict[str, Any]] | None:
        pods = pods_of(cluster, namespace, "packed")
        return pods if len(pods) == 4 and all(p["spec"].get("nodeName") for p in pods) else None

    pods = eventually(placed, timeout=90, what="its four pods ungated by Kueue and scheduled")
    nodes = {n["metadata"]["name"]: n for n in cluster_tool.fake_nodes(cluster_tool.FAKE_NODES)}
    cliques = {nodes[p["spec"]["nodeName"]]["metadata"]["labels"][CLIQUE] for p in pods}
    assert len(cliques) == 1, f"the pods span cliques {cliques}"
    for pod in pods:
        assert not pod["spec"].get("schedulingGates"), "Kueue's ungater removed the topology gate"
        # Kueue's assignment is to nodes (the Topology's finest level), written by its ungater.
        assert pod["spec"]["nodeSelector"]["kubernetes.io/hostname"] == pod["spec"]["nodeName"]
        annotations = pod["metadata"]["annotations"]
        assert annotations["kueue.x-k8s.io/workload"] == q["workload"]
        assert annotations["kueue.x-k8s.io/podset-required-topology"] == CLIQUE
        assert pod["metadata"]["labels"]["kueue.x-k8s.io/podset"] == pod["metadata"]["labels"][REPLICA_TYPE_LABEL]
    score = quota(cluster, namespace, "packed")[0]["placementScore"]
    assert (score["level"], score["domains"], score.get("crossNeighbours", 0)) == (CLIQUE, 1, 0)


def test_the_kueue_component_turns_it_on_for_the_quota_controller(cluster: Cluster, tmp_path: Path) -> None:
    """deploy/components/kueue on the dev overlay: the flag and the RBAC, accepted by the API server."""
    overlay, objects = with_component(cluster, tmp_path, "dev", "kueue")
    assert controller_env(objects, "quota")["TRAINEROP_KUEUE"] == "true"
    (binding,) = [o for o in objects if o["kind"] == "ClusterRoleBinding" and o["metadata"]["name"].endswith("kueue")]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "trainer-operator-quota", "namespace": "trainer-operator-system"}
    ]
    cluster.kubectl("apply", "--server-side", "--dry-run=server", "--force-conflicts", "-k", str(overlay))


def test_a_pytorchjob_kueue_manages_itself_is_admitted_once_through_kueues_own_workload(
    cluster: Cluster, namespace: str, kueue_manager: None
) -> None:
    """Issue 53: Kueue manages PyTorchJobs, as its shipped configuration does. A job with the queue
    label is suspended by Kueue's webhook and reported as Kueue's own Workload; its Trainer (which
    carries the job's labels, the queue's too) makes no second one: the quota controller reads the
    job's Workload, and the pods start once Kueue resumes the job, on the flavor's nodes Kueue wrote
    into the job's templates. Before this, the Trainer's own Workload asked for the same GPUs again,
    and with the queue full it waited for ever."""
    queues(cluster, namespace, gpus=8, domain="nvl-7")

    def replica(count: int) -> dict[str, Any]:
        container = {"name": "pytorch", "image": "busybox:1.36", "resources": {"limits": {GPU: 4}}}
        return {"replicas": count, "template": {"spec": {"containers": [container]}}}

    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "kj", "labels": {QUEUE_LABEL: "team"}},
        "spec": {"pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(1)}},
    }
    cluster.apply(job, namespace)
    uid = cluster.get("pytorchjob", "kj", namespace)["metadata"]["uid"]
    admitted = eventually(lambda: gate(cluster, namespace, "kj", "AdmittedByKueue"), what="the job's run admitted")
    (name,) = cluster.names("workloads", namespace)  # one Workload: Kueue's, for the job
    wl = workload(cluster, namespace, name)
    assert wl["metadata"]["labels"]["kueue.x-k8s.io/job-uid"] == uid
    assert wl["metadata"]["ownerReferences"][0]["kind"] == "PyTorchJob"
    assert quota(cluster, namespace, "kj")[0]["workload"] == name
    assert f"the job's Workload {name} to ClusterQueue {namespace}" in admitted["message"]

    def placed() -> list[dict[str, Any]] | None:
        pods = [p for p in pods_of(cluster, namespace, "kj") if p["spec"].get("nodeName")]
        return pods if len(pods) == 2 else None

    for pod in eventually(placed, what="the job's two pods placed"):
        assert pod["spec"]["nodeSelector"][DOMAIN] == "nvl-7"  # Kueue's flavor, through the job's templates
        assert TOLERATION in pod["spec"]["tolerations"]
    assert cluster.names("workloads", namespace) == {name}  # still one

"""The quota controller on kwok nodes: spot-first admission, fallback, waiting, renegotiation when a
spot node goes, and no over-commitment with 50 Trainers created at once (docs/quota.md)."""

import json
import time
from typing import Any

from testbed import cluster as cluster_tool
from testbed import localdev
from tests.factories import trainer_manifest
from tests.harness import REPO, Cluster, condition, eventually
from trainerop_common.api import API_VERSION

GPU = "nvidia.com/gpu"
LABEL = "trainer.operator.kubeflow.org/capacity-type"
ADMISSION = "trainer.operator.kubeflow.org/admission"
CLIQUE = "nvidia.com/gpu.clique"


def run(name: str, workers: int = 1, gpus: int = 8, domain: str | None = None, **spec: Any) -> dict[str, Any]:
    """A Trainer of ``workers`` pods with ``gpus`` each, pinned to one NVLink domain if given
    (each domain has one spot and one on-demand node: kwok-gpu-2k and kwok-gpu-2k+1)."""
    body = trainer_manifest(name, resources={"limits": {GPU: gpus}}, topology={"workers": workers}, **spec)
    if domain:
        selector = {"nodeSelector": {f"{cluster_tool.LABEL_PREFIX}/nvlink-domain": domain}}
        body["spec"]["podTemplateOverrides"] = {"worker": {"spec": selector}}
    return body


def admitted_nodes(trainer: dict[str, Any]) -> set[str]:
    """The nodes a Trainer's quota admission keeps for it (its pods may be gone already)."""
    grant = (((trainer.get("status") or {}).get("quota") or {}).get("contribution") or {}).get("grant") or {}
    return {node for nodes in (grant.get("placement") or {}).values() for node in nodes if node}


def domain_free(cluster: Cluster, domain: str) -> None:
    """Wait until no pod (of any namespace: earlier tests' namespaces may still be going) holds
    the nodes of ``domain``, nor any Trainer's admission keeps them (a Trainer outlives its pods
    while its namespace goes), so what a test expects of them is what it gets."""
    k = int(domain.removeprefix("nvl-"))
    nodes = {f"kwok-gpu-{2 * k}", f"kwok-gpu-{2 * k + 1}"}

    def free() -> bool:
        pods = json.loads(cluster.kubectl("get", "pods", "-A", "-o", "json"))["items"]
        trainers = json.loads(cluster.kubectl("get", "trainers", "-A", "-o", "json"))["items"]
        return not any(
            p["spec"].get("nodeName") in nodes and p["status"].get("phase") not in ("Succeeded", "Failed") for p in pods
        ) and not any(nodes & admitted_nodes(t) for t in trainers)

    eventually(free, timeout=120, what=f"the nodes of {domain} to be free")


def quota(cluster: Cluster, namespace: str, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    obj = cluster.get("trainer", name, namespace)
    return (obj.get("status") or {}).get("quota") or {}, condition(obj, "QuotaAdmitted") or {}


def admitted_on(cluster: Cluster, namespace: str, name: str, kind: str) -> dict[str, Any] | None:
    q, cond = quota(cluster, namespace, name)
    return q if cond.get("status") == "True" and q.get("capacityType") == kind else None


def pods_of(cluster: Cluster, namespace: str, name: str) -> list[dict[str, Any]]:
    out = cluster.kubectl("get", "pods", "-n", namespace, "-l", f"trainer-name={name}", "-o", "json")
    return [p for p in json.loads(out)["items"] if not p["metadata"].get("deletionTimestamp")]


def node_kinds(cluster: Cluster) -> dict[str, str]:
    nodes = json.loads(cluster.kubectl("get", "nodes", "-o", "json"))["items"]
    return {n["metadata"]["name"]: n["metadata"].get("labels", {}).get(LABEL, "on-demand") for n in nodes}


def placed_on(cluster: Cluster, namespace: str, name: str, kind: str, count: int) -> list[dict[str, Any]] | None:
    """The run's pods when ``count`` of them are scheduled, all on ``kind`` nodes."""
    pods = [p for p in pods_of(cluster, namespace, name) if p["spec"].get("nodeName")]
    kinds = node_kinds(cluster)
    if len(pods) == count and all(kinds.get(p["spec"]["nodeName"]) == kind for p in pods):
        return pods
    return None


def events(cluster: Cluster, namespace: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads(cluster.kubectl("get", "events", "-n", namespace, "-o", "json"))["items"]
    return items


def test_spot_first_then_on_demand_then_waiting(cluster: Cluster, namespace: str, policy: Any) -> None:
    policy(budgets={"spot": {GPU: 64}, "onDemand": {GPU: 64}}, preference="SpotFirst")
    domain_free(cluster, "nvl-1")
    cluster.apply(run("first", domain="nvl-1"), namespace)
    q = eventually(lambda: admitted_on(cluster, namespace, "first", "spot"), what="admission on spot")
    assert q["contribution"]["grant"] == {"id": "spot-0", "workers": 1, "placement": {"worker": ["kwok-gpu-3"]}}
    (pod,) = eventually(lambda: placed_on(cluster, namespace, "first", "spot", 1), what="the pod on a spot node")
    assert pod["spec"]["nodeName"] == "kwok-gpu-3"
    assert pod["metadata"]["annotations"][ADMISSION] == "spot-0"
    assert pod["metadata"]["annotations"]["trainer.operator.kubeflow.org/node"] == "kwok-gpu-3"

    # The domain's spot node is full: the next run falls back to its on-demand node.
    cluster.apply(run("second", domain="nvl-1"), namespace)
    eventually(lambda: admitted_on(cluster, namespace, "second", "on-demand"), what="fallback to on-demand")
    eventually(lambda: placed_on(cluster, namespace, "second", "on-demand", 1), what="the pod on on-demand")
    assert any(
        e["reason"] == "Admitted" and "(spot has no room for it)" in e["message"] for e in events(cluster, namespace)
    )

    # Neither fits: the third waits with no pod at all.
    cluster.apply(run("third", domain="nvl-1"), namespace)
    cond = eventually(
        lambda: (c := quota(cluster, namespace, "third")[1]).get("reason") == "WaitingForCapacity" and c,
        what="the third run to wait",
    )
    assert cond["status"] == "False"
    assert "spot: not enough free nodes; on-demand: not enough free nodes" in cond["message"]
    # The trainer's own first status write may land after the quota's refusal.
    created = eventually(
        lambda: condition(cluster.get("trainer", "third", namespace), "Created"), what="the Created condition"
    )
    assert created["reason"] == "WaitingForGates"
    assert pods_of(cluster, namespace, "third") == []

    # The first run ends: the waiting one takes its spot capacity.
    cluster.kubectl("delete", "trainer", "first", "-n", namespace)
    eventually(lambda: admitted_on(cluster, namespace, "third", "spot"), what="the waiting run admitted on spot")
    eventually(lambda: placed_on(cluster, namespace, "third", "spot", 1), what="its pod on spot")
    status = cluster.get("quotapolicy", f"quota-{namespace}")["status"]
    assert (status["admittedTrainers"], status["pendingTrainers"]) == (2, 0)
    assert status["used"] == {"onDemand": {GPU: "8", "pods": "1"}, "spot": {GPU: "8", "pods": "1"}}


def test_a_sidecar_in_an_override_is_charged_against_the_budget(cluster: Cluster, namespace: str, policy: Any) -> None:
    """Issue 51: a budget of 2 GPUs; 2 workers of 1 GPU whose override adds a sidecar (an init
    container with restartPolicy Always) asking 7 GPUs would hold 16. It is never admitted: it
    waits as more than the budget, with no pod."""
    policy(budgets={"spot": {GPU: 2}, "onDemand": {GPU: 2}})
    body = run("sidecar", workers=2, gpus=1)
    sidecar = {"name": "hog", "image": "busybox:1.36", "restartPolicy": "Always", "resources": {"limits": {GPU: 7}}}
    body["spec"]["podTemplateOverrides"] = {"worker": {"spec": {"initContainers": [sidecar]}}}
    cluster.apply(body, namespace)
    cond = eventually(
        lambda: (c := quota(cluster, namespace, "sidecar")[1]).get("reason") == "ExceedsQuota" and c,
        what="the run refused as more than the budget",
    )
    assert cond["status"] == "False"
    assert f"the run needs 2 pods (16 {GPU}) but QuotaPolicy quota-{namespace} allows less" in cond["message"]
    assert pods_of(cluster, namespace, "sidecar") == []

    def said() -> set[tuple[str, str]]:
        return {
            (e["type"], e["reason"]) for e in events(cluster, namespace) if e["involvedObject"]["name"] == "sidecar"
        }

    eventually(lambda: ("Warning", "ExceedsQuota") in said(), what="the ExceedsQuota Event")
    assert ("Normal", "Admitted") not in said()


def test_a_run_is_packed_into_one_nvlink_clique(cluster: Cluster, namespace: str, policy: Any) -> None:
    """The kwok nodes carry NVIDIA's clique label (4 nodes a clique, 2 of them on-demand): a run
    that requires one clique gets one, and says so in its status; one no clique holds waits."""
    policy(budgets={"spot": {GPU: 64}, "onDemand": {GPU: 64}}, preference="OnDemandOnly")
    packing = {"packing": {"level": CLIQUE, "mode": "Required"}}
    cluster.apply(run("packed", workers=2, scheduling=packing), namespace)
    q = eventually(lambda: admitted_on(cluster, namespace, "packed", "on-demand"), what="admission in one clique")
    assert q["placementScore"] == {"level": CLIQUE, "domains": 1, "crossNeighbours": 0}
    pods = eventually(lambda: placed_on(cluster, namespace, "packed", "on-demand", 2), what="both pods on nodes")
    nodes = json.loads(cluster.kubectl("get", "nodes", "-o", "json"))["items"]
    clique = {n["metadata"]["name"]: n["metadata"]["labels"][CLIQUE] for n in nodes}
    assert len({clique[p["spec"]["nodeName"]] for p in pods}) == 1

    cluster.apply(run("too-wide", workers=3, scheduling=packing), namespace)
    cond = eventually(
        lambda: (c := quota(cluster, namespace, "too-wide")[1]).get("reason") == "WaitingForCapacity" and c,
        what="the run no clique holds to wait",
    )
    assert f"on-demand: no single {CLIQUE} holds the run" in cond["message"]
    assert pods_of(cluster, namespace, "too-wide") == []


def test_a_profile_s_packing_holds_its_runs_to_one_clique(cluster: Cluster, namespace: str, policy: Any) -> None:
    """A TrainingProfile's packing (passed on by the profile controller in status.profile) is the
    quota controller's for runs that name it: three on-demand pods no clique holds wait."""
    policy(budgets={"spot": {GPU: 64}, "onDemand": {GPU: 64}}, preference="OnDemandOnly")
    packing = {"level": CLIQUE, "mode": "Required"}
    profile = {"apiVersion": API_VERSION, "kind": "TrainingProfile", "metadata": {"name": "one-clique"}}
    cluster.apply(profile | {"spec": {"packing": packing}}, namespace)
    cluster.apply(run("wide", workers=3, profile="one-clique"), namespace)
    cond = eventually(
        lambda: (c := quota(cluster, namespace, "wide")[1]).get("reason") == "WaitingForCapacity" and c,
        what="the run no clique holds to wait",
    )
    assert f"on-demand: no single {CLIQUE} holds the run" in cond["message"]
    assert cluster.get("trainer", "wide", namespace)["status"]["profile"]["packing"] == packing
    assert pods_of(cluster, namespace, "wide") == []


def own_nodes(pool: str, cliques: dict[str, int]) -> list[dict[str, Any]]:
    """On-demand kwok nodes of this test alone (label ``pool``: its runs select them), ``n`` in
    each clique named."""
    out = []
    for clique, n in cliques.items():
        for i in range(n):
            (node,) = cluster_tool.fake_nodes(1)
            name = f"{pool}-{clique}-{i}"
            node["metadata"]["name"], node["spec"]["providerID"] = name, f"kwok://{name}"
            labels = {"kubernetes.io/hostname": name, LABEL: "on-demand", CLIQUE: f"{pool}-{clique}", "pool": pool}
            node["metadata"]["labels"].update(labels)
            out.append(node)
    return out


def test_a_replacement_stays_in_the_clique_its_run_requires(cluster: Cluster, namespace: str, policy: Any) -> None:
    """A run that requires one clique loses a node: its replacement goes to the same clique's free
    node, though the other clique's lone node would be the best fit for one pod."""
    policy(budgets={"spot": {GPU: 64}, "onDemand": {GPU: 64}}, preference="OnDemandOnly")
    nodes = own_nodes("keep", {"x": 4, "y": 1})
    for node in nodes:
        cluster.apply(node)
    try:
        body = run("kept", workers=2, scheduling={"packing": {"level": CLIQUE, "mode": "Required"}})
        body["spec"]["podTemplateOverrides"] = {"worker": {"spec": {"nodeSelector": {"pool": "keep"}}}}
        cluster.apply(body, namespace)
        pods = eventually(lambda: placed_on(cluster, namespace, "kept", "on-demand", 2), what="both pods on nodes")
        first = {p["spec"]["nodeName"] for p in pods}
        assert all(n.startswith("keep-x-") for n in first)
        lost = min(first)
        cluster.kubectl("delete", "node", lost, "--wait=false")

        def replaced() -> set[str] | None:
            placed = placed_on(cluster, namespace, "kept", "on-demand", 2)
            where = {p["spec"]["nodeName"] for p in placed or ()}
            return where if len(where) == 2 and lost not in where else None

        after = eventually(replaced, timeout=120, what="the lost pod replaced")
        assert all(n.startswith("keep-x-") for n in after), after
        q, cond = quota(cluster, namespace, "kept")
        assert cond["status"] == "True"
        assert q["placementScore"] == {"level": CLIQUE, "domains": 1, "crossNeighbours": 0}
    finally:
        cluster.kubectl("delete", "trainer", "kept", "-n", namespace, "--ignore-not-found")
        cluster.kubectl("delete", "node", *(n["metadata"]["name"] for n in nodes), "--ignore-not-found")


def test_without_a_policy_a_run_starts_only_when_all_of_it_fits(cluster: Cluster, namespace: str) -> None:
    """--ungoverned AllOrNothing: no QuotaPolicy covers the namespace, yet a run that does not fit
    waits with no pod (on-demand first, then spot), and starts when room comes."""
    localdev.restart("quota", {"TRAINEROP_UNGOVERNED": "AllOrNothing"})
    try:
        domain_free(cluster, "nvl-3")
        cluster.apply(run("first", domain="nvl-3"), namespace)
        eventually(lambda: placed_on(cluster, namespace, "first", "on-demand", 1), what="the first on on-demand")
        cluster.apply(run("second", domain="nvl-3"), namespace)
        eventually(lambda: placed_on(cluster, namespace, "second", "spot", 1), what="the second on spot")
        cluster.apply(run("third", domain="nvl-3"), namespace)
        q, cond = eventually(
            lambda: (r := quota(cluster, namespace, "third"))[1].get("reason") == "WaitingForCapacity" and r,
            what="the third run to wait",
        )
        assert cond["status"] == "False"
        assert "on-demand: not enough free nodes; spot: not enough free nodes" in cond["message"]
        assert "policy" not in q
        assert pods_of(cluster, namespace, "third") == []
        first = quota(cluster, namespace, "first")
        assert (first[1]["reason"], first[0]["contribution"]["grant"]["placement"]) == (
            "NoQuotaPolicy",
            {"worker": ["kwok-gpu-6"]},
        )

        cluster.kubectl("delete", "trainer", "first", "-n", namespace)
        eventually(lambda: placed_on(cluster, namespace, "third", "on-demand", 1), what="the third run started")
    finally:
        localdev.restart("quota")


def test_a_run_is_never_pinned_to_a_node_whose_taint_its_pods_do_not_tolerate(cluster: Cluster, namespace: str) -> None:
    """Every kwok node is tainted; a namespace without their default toleration has no node for
    its runs: the run waits with no pod and says why (it was once pinned to a kwok node, where the
    scheduler refused it). Given the toleration (the namespace's default, which the API server adds
    to its pods), the run is placed and its pod scheduled."""
    defaults = next(iter(cluster_tool.DEFAULT_TOLERATIONS))
    cluster.kubectl("annotate", "namespace", namespace, f"{defaults}-")
    cluster.apply(run("shy", gpus=1), namespace)
    cond = eventually(
        lambda: (c := quota(cluster, namespace, "shy")[1]).get("reason") == "WaitingForCapacity" and c,
        what="the run to wait",
    )
    assert "no node takes its worker pods (their nodeSelector, or node taints they do not tolerate" in cond["message"]
    assert pods_of(cluster, namespace, "shy") == []
    cluster.kubectl(
        "annotate", "namespace", namespace, *(f"{k}={v}" for k, v in cluster_tool.DEFAULT_TOLERATIONS.items())
    )
    (pod,) = eventually(
        lambda: [p for p in pods_of(cluster, namespace, "shy") if p["spec"].get("nodeName")] or None,
        what="its pod scheduled once the namespace tolerates the nodes",
    )
    assert pod["spec"]["nodeName"].startswith("kwok-gpu-")


def test_a_deleted_spot_node_moves_the_run_to_on_demand(cluster: Cluster, namespace: str, policy: Any) -> None:
    prices = {"onDemand": {GPU: "3.00"}, "spot": {GPU: "1.00"}}
    policy(budgets={"spot": {GPU: 64}, "onDemand": {GPU: 64}}, prices=prices)
    domain_free(cluster, "nvl-2")
    cluster.apply(run("moving", domain="nvl-2"), namespace)
    q = eventually(lambda: admitted_on(cluster, namespace, "moving", "spot"), what="admission on spot")
    assert (q["cost"]["perHour"], q["cost"]["onDemandPerHour"], q["cost"]["savingsPercent"]) == ("8.00", "24.00", 67)
    (pod,) = eventually(lambda: placed_on(cluster, namespace, "moving", "spot", 1), what="the pod on spot")
    node = pod["spec"]["nodeName"]
    assert node == "kwok-gpu-5"
    before = cluster.metric("quota", "quota_renegotiation_seconds_count", {})
    try:
        cluster.kubectl("delete", "node", node, "--wait=false")  # the spot node is reclaimed
        q = eventually(lambda: admitted_on(cluster, namespace, "moving", "on-demand"), what="the move to on-demand")
        cond = quota(cluster, namespace, "moving")[1]
        assert cond["reason"] == "Renegotiated"
        assert f"node {node} no longer exists" in cond["message"]
        assert q["renegotiations"] == 1
        assert q["contribution"]["grant"]["id"] == "on-demand-1"
        assert q["cost"]["perHour"] == "24.00"
        (moved,) = eventually(lambda: placed_on(cluster, namespace, "moving", "on-demand", 1), what="the new pod")
        assert moved["metadata"]["annotations"][ADMISSION] == "on-demand-1"
        assert moved["spec"]["nodeName"] == "kwok-gpu-4"
        assert any(e["reason"] == "Renegotiated" for e in events(cluster, namespace))
        assert cluster.metric("quota", "quota_renegotiation_seconds_count", {}) == before + 1
    finally:
        (spec,) = [n for n in cluster_tool.fake_nodes(cluster_tool.FAKE_NODES) if n["metadata"]["name"] == node]
        eventually(lambda: node not in cluster.names("nodes"), what="the node to be gone")
        cluster.apply(spec)
        cluster.kubectl("wait", "--for=condition=Ready", f"node/{node}", "--timeout=60s")


def test_fifty_trainers_at_once_never_over_commit(cluster: Cluster, namespace: str, policy: Any) -> None:
    """Spot capacity (8 nodes x 8 GPUs) and the on-demand budget (32 GPUs) bind; every observation
    over the whole run checks both, and each node's GPUs; runs are deleted as they are admitted
    until every one of the 50 has been admitted once."""
    spot_budget, on_demand_budget = 1000, 32
    policy(budgets={"spot": {GPU: spot_budget}, "onDemand": {GPU: on_demand_budget}})
    shapes = [(1, 8), (2, 4), (1, 4), (2, 8)]
    runs = {f"r{i:02d}": shapes[i % len(shapes)] for i in range(50)}
    manifest = {"apiVersion": "v1", "kind": "List", "items": [run(n, w, g) for n, (w, g) in runs.items()]}
    cluster.apply(manifest, namespace)
    kinds = node_kinds(cluster)
    spot_capacity = 8 * sum(k == "spot" for k in kinds.values())
    ever: set[str] = set()
    observations = 0

    def observe() -> set[str]:
        nonlocal observations
        trainers = json.loads(cluster.kubectl("get", "trainers", "-n", namespace, "-o", "json"))["items"]
        used = {"spot": 0, "on-demand": 0}
        now_admitted = set()
        for t in trainers:
            q = (t.get("status") or {}).get("quota") or {}
            grant = (q.get("contribution") or {}).get("grant")
            if not grant or t["metadata"].get("deletionTimestamp"):
                continue
            workers, gpus = runs[t["metadata"]["name"]]
            assert grant["workers"] == workers  # never a partial gang
            used[q["capacityType"]] += workers * gpus
            now_admitted.add(t["metadata"]["name"])
        assert used["on-demand"] <= on_demand_budget, used
        assert used["spot"] <= spot_capacity, used
        pods = json.loads(cluster.kubectl("get", "pods", "-A", "-o", "json"))["items"]
        per_node: dict[str, int] = {}
        for p in pods:
            if p["spec"].get("nodeName") and p["status"].get("phase") not in ("Succeeded", "Failed"):
                gpus_ = sum(
                    int((c.get("resources", {}).get("limits") or {}).get(GPU, 0)) for c in p["spec"]["containers"]
                )
                per_node[p["spec"]["nodeName"]] = per_node.get(p["spec"]["nodeName"], 0) + gpus_
        assert all(v <= 8 for v in per_node.values()), per_node
        observations += 1
        return now_admitted

    deadline = time.monotonic() + 600
    while ever != set(runs):
        assert time.monotonic() < deadline, f"only {len(ever)} of 50 runs were ever admitted"
        admitted = observe()
        new = admitted - ever
        ever |= admitted
        if new:
            # Every admitted gang gets all its pods onto nodes (no partial start); then its
            # capacity is freed for the next wave.
            def all_placed(admitted: set[str] = admitted) -> bool:
                pods = json.loads(cluster.kubectl("get", "pods", "-n", namespace, "-o", "json"))["items"]
                on_nodes: dict[str, int] = {}
                for p in pods:
                    if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp"):
                        on_nodes[p["metadata"]["labels"]["trainer-name"]] = (
                            on_nodes.get(p["metadata"]["labels"]["trainer-name"], 0) + 1
                        )
                return all(on_nodes.get(name, 0) == runs[name][0] for name in admitted)

            eventually(all_placed, timeout=120, what="every admitted run's pods on nodes")
            admitted = observe()  # and whatever was admitted meanwhile
            ever |= admitted
            cluster.kubectl("delete", "trainer", "-n", namespace, "--wait=false", *sorted(admitted))
        time.sleep(0.5)
    assert observations >= 10


def test_the_quota_examples_are_accepted_by_the_api_server(cluster: Cluster, namespace: str) -> None:
    examples = sorted((REPO / "examples" / "quota").glob("*.yaml"))
    assert examples
    for path in examples:
        out = cluster.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", str(path))
        assert "(server dry run)" in out, f"{path.name}: {out}"


def test_a_restarted_quota_controller_keeps_every_admission(cluster: Cluster, namespace: str, policy: Any) -> None:
    """Nothing is kept outside the Trainers' status: after a restart the controller reads every
    Trainer before it plans, so the budget an admitted run holds is never given away twice."""
    policy(budgets={"spot": {GPU: 8}}, preference="SpotOnly")
    cluster.apply(run("holder"), namespace)
    eventually(lambda: admitted_on(cluster, namespace, "holder", "spot"), what="the first run admitted")
    cluster_tool.stop_processes(localdev.state_dir(), ["controller-quota"])
    try:
        cluster.apply(run("newcomer"), namespace)
    finally:
        localdev.start()  # only what is not running: the quota controller
    cond = eventually(
        lambda: (c := quota(cluster, namespace, "newcomer")[1]).get("reason") == "WaitingForCapacity" and c,
        what="the newcomer to wait after the restart",
    )
    assert "spot: the namespace's budget is in use" in cond["message"]
    assert admitted_on(cluster, namespace, "holder", "spot") is not None
    cluster.kubectl("delete", "trainer", "holder", "-n", namespace)
    eventually(lambda: admitted_on(cluster, namespace, "newcomer", "spot"), what="the newcomer admitted")


def test_a_run_admitted_smaller_checkpoints_with_the_writers_it_has(
    cluster: Cluster, namespace: str, policy: Any
) -> None:
    """An elastic run of 4 workers granted 2: its checkpoints have 2 shards, one per pod that
    writes (4 would never commit)."""
    policy(budgets={"spot": {GPU: 16}}, preference="SpotOnly")
    elastic = {"workers": 4, "elastic": {"minWorkers": 1, "maxWorkers": 4}}
    body = run("elastic", gpus=8, framework="pytorch", checkpoint={"bucket": "pvc-backups"})
    body["spec"]["topology"] = elastic
    cluster.apply(body, namespace)
    q = eventually(lambda: admitted_on(cluster, namespace, "elastic", "spot"), what="admission on spot")
    assert q["contribution"]["grant"]["workers"] == 2

    def two_workers() -> list[dict[str, Any]] | None:
        pods = pods_of(cluster, namespace, "elastic")
        return pods if len(pods) == 2 else None

    for pod in eventually(two_workers, what="2 workers"):
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        assert env["CHECKPOINT_SHARDS"] == "2"

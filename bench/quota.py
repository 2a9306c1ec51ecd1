#!/usr/bin/env python3
"""Quota admission at scale, spot savings and renegotiation time (prints figures).

    python bench/quota.py --trainers 50

N Trainers (1 or 2 workers of 4 or 8 GPUs) are created at once in a namespace governed by
examples/quota/policy.yaml's prices with a spot-first preference, budgets larger than the kwok
nodes (8 spot, 8 on-demand nodes of 8 GPUs), so capacity decides. Figures: time until every
Trainer has a decision, until every admitted run's pods are on nodes; status writes per Trainer;
the plan's mean time; the estimated cost per hour against all on-demand (the seed README's
"up to 40%" claim, measured on this mix); then a spot node under an admitted run is deleted and
the time until that run is renegotiated is measured. Uses the cluster in $KUBECONFIG, else
brings the local cluster up and takes it down again.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.setup import run_with_trainers
from testbed import cluster as cluster_tool
from tests.harness import REPO, Cluster, eventually

POLICY: dict[str, Any] = yaml.safe_load((REPO / "examples" / "quota" / "policy.yaml").read_text())
GPU = "nvidia.com/gpu"
SHAPES = [(1, 8), (2, 4), (1, 4), (2, 8)]


def trainers(c: Cluster, namespace: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads(c.kubectl("get", "trainers", "-n", namespace, "-o", "json"))["items"]
    return items


def decided(t: dict[str, Any]) -> dict[str, Any] | None:
    found = [
        c
        for c in t.get("status", {}).get("conditions", [])
        if c["type"] == "QuotaAdmitted" and c["observedGeneration"] == t["metadata"]["generation"]
    ]
    return found[0] if found else None


def writes(c: Cluster) -> float:
    return c.metric(
        "quota", "operator_status_writes_total", {"controller": "quota", "kind": "Trainer", "outcome": "written"}
    )


def run(c: Cluster, namespace: str, count: int) -> None:
    policy = json.loads(json.dumps(POLICY))
    policy["metadata"]["name"] = f"bench-{namespace}"
    policy["spec"]["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
    policy["spec"]["budgets"] = {"spot": {GPU: 1000}, "onDemand": {GPU: 1000}}
    c.apply(policy)
    try:
        measure(c, namespace, count)
    finally:
        c.kubectl("delete", "quotapolicy", policy["metadata"]["name"], "--ignore-not-found")


def measure(c: Cluster, namespace: str, count: int) -> None:
    writes_before = writes(c)
    plans_before = (c.metric("quota", "quota_plan_seconds_sum", {}), c.metric("quota", "quota_plan_seconds_count", {}))
    items = []
    for i in range(count):
        workers, gpus = SHAPES[i % len(SHAPES)]
        items.append(
            {
                "apiVersion": "trainer.operator.kubeflow.org/v1alpha1",
                "kind": "Trainer",
                "metadata": {"name": f"q{i:03d}"},
                "spec": {
                    "epochs": 1,
                    "image": "busybox",
                    "resources": {"requests": {"cpu": 4}, "limits": {GPU: gpus}},
                    "topology": {"workers": workers},
                },
            }
        )
    t0 = time.monotonic()
    c.apply(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}), namespace)
    eventually(
        lambda: len(listed := trainers(c, namespace)) == count and all(decided(t) for t in listed),
        timeout=600,
        what="a quota decision for every Trainer",
    )
    print(f"trainers {count}")
    print(f"all_decided_seconds {time.monotonic() - t0:.2f}")
    listed = trainers(c, namespace)
    admitted = {t["metadata"]["name"]: t["status"]["quota"] for t in listed if decided(t)["status"] == "True"}  # type: ignore[index]
    expected = sum(q["workers"] for q in admitted.values())

    def placed() -> bool:
        pods = json.loads(c.kubectl("get", "pods", "-n", namespace, "-o", "json"))["items"]
        return bool(sum(bool(p["spec"].get("nodeName")) for p in pods) >= expected)

    eventually(placed, timeout=600, what="every admitted run's pods on nodes")
    print(f"admitted_pods_on_nodes_seconds {time.monotonic() - t0:.2f}")
    kinds = [q["capacityType"] for q in admitted.values()]
    print(
        f"admitted {len(admitted)} spot {kinds.count('spot')} on_demand {kinds.count('on-demand')} "
        f"waiting {count - len(admitted)}"
    )
    print(f"quota_status_writes_per_trainer {(writes(c) - writes_before) / count:.1f}")
    plans = (
        c.metric("quota", "quota_plan_seconds_sum", {}) - plans_before[0],
        c.metric("quota", "quota_plan_seconds_count", {}) - plans_before[1],
    )
    print(f"plans {plans[1]:.0f} mean_plan_ms {1000 * plans[0] / max(plans[1], 1):.1f}")
    actual = c.metric("quota", "quota_cost_per_hour", {"namespace": namespace, "basis": "admitted"})
    on_demand = c.metric("quota", "quota_cost_per_hour", {"namespace": namespace, "basis": "on_demand"})
    print(
        f"cost_per_hour {actual:.2f} all_on_demand_per_hour {on_demand:.2f} "
        f"savings_percent {100 * (1 - actual / on_demand):.1f}"
    )

    # A spot node under an admitted run is reclaimed (deleted): time until the run is renegotiated.
    victim = next(
        (
            p
            for p in json.loads(c.kubectl("get", "pods", "-n", namespace, "-o", "json"))["items"]
            if p["metadata"].get("labels", {}).get("trainer.operator.kubeflow.org/capacity-type") == "spot"
            and p["spec"].get("nodeName")
        ),
        None,
    )
    if victim is None:
        print("renegotiation skipped: no run on spot")
        return
    node, run_name = victim["spec"]["nodeName"], victim["metadata"]["labels"]["trainer-name"]
    before = admitted[run_name].get("renegotiations", 0)
    t0 = time.monotonic()
    c.kubectl("delete", "node", node, "--wait=false")
    pod_name, pod_uid = victim["metadata"]["name"], victim["metadata"]["uid"]

    def handled() -> str | None:
        """Renegotiated (moved, shrunk or withdrawn), or kept: the lost pod replaced on another node."""
        t = json.loads(c.kubectl("get", "trainer", run_name, "-n", namespace, "-o", "json"))
        q = t["status"].get("quota") or {}
        if q.get("renegotiations", 0) > before:
            return f"renegotiated, now_on {q.get('capacityType', 'nothing (waiting)')}"
        pods = json.loads(c.kubectl("get", "pods", "-n", namespace, "-o", "json"))["items"]
        same = [p for p in pods if p["metadata"]["name"] == pod_name and p["metadata"]["uid"] != pod_uid]
        if same and same[0]["spec"].get("nodeName"):
            return f"kept on {q.get('capacityType')} (the pod was replaced on {same[0]['spec']['nodeName']})"
        return None

    try:
        outcome = eventually(handled, timeout=180, what="the run to recover from the lost node")
        print(f"node_loss_handled_seconds {time.monotonic() - t0:.2f} {outcome}")
    finally:
        (spec,) = [n for n in cluster_tool.fake_nodes(cluster_tool.FAKE_NODES) if n["metadata"]["name"] == node]
        eventually(lambda: node not in c.names("nodes"), what="the node to be gone")
        c.apply(spec)


if __name__ == "__main__":
    sys.exit(run_with_trainers(__doc__, run, 50))

#!/usr/bin/env python3
"""Topology-aware placement (prints figures): NVLink cliques spanned and cross-clique ring
neighbours per Trainer, ours against the default scheduler's and the optimum; the time it adds.

    python bench/placement.py --trainers 12

On kwok nodes labelled in cliques (testbed/cluster.py: `nvidia.com/gpu.clique`, four nodes of 8
GPUs a clique, two of each capacity type; 32 nodes here), a mix of Trainers of 1 to 4 workers of
4 GPUs (two pods fit a node) is created at once, twice, each time in a namespace no QuotaPolicy
covers and after the previous one is gone:

- default scheduler: the quota controller with `--ungoverned AtOnce`: every pod is created at
  once and the default scheduler places it (it spreads pods over the least allocated nodes);
- ours: `--ungoverned AllOrNothing` (the default): each run is placed by the quota controller,
  packed into the fewest cliques with its ranks in ring order (docs/quota.md#topology), on one
  capacity type.

Per Trainer, from the nodes its running pods are bound to: cliques spanned, and ring neighbours
(workers by index, the last next to the first) in different cliques. The optimum is the fewest
cliques that could hold the run on an empty cluster (ceil(workers / 8): a clique holds 8 such pods),
with as many cross-clique neighbours. Time: from the first create to every pod running, and the
quota controller's mean plan time. Uses the cluster in $KUBECONFIG, else brings the local cluster
up and takes it down again.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.setup import gone, operator_running, scratch_namespace
from testbed import cluster as cluster_tool
from testbed import localdev
from tests.harness import Cluster, eventually
from trainerop_common.contracts import KUBEFLOW_REPLICA_INDEX_LABEL, TRAINER_NAME_LABEL

GPU = "nvidia.com/gpu"
CLIQUE = "nvidia.com/gpu.clique"
SIZES = (1, 2, 3, 4)  # workers of a Trainer, in turn
PODS_PER_CLIQUE = 8  # four nodes, two pods of 4 GPUs each


def trainer(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.operator.kubeflow.org/v1alpha1",
        "kind": "Trainer",
        "metadata": {"name": f"p{i:03d}"},
        "spec": {
            "epochs": 1,
            "image": "busybox",
            "resources": {"requests": {"cpu": 1}, "limits": {GPU: 4}},
            "topology": {"workers": SIZES[i % len(SIZES)]},
        },
    }


def running_pods(c: Cluster, namespace: str) -> list[dict[str, Any]]:
    pods: list[dict[str, Any]] = json.loads(c.kubectl("get", "pods", "-n", namespace, "-o", "json"))["items"]
    return [p for p in pods if p["status"].get("phase") == "Running" and p["spec"].get("nodeName")]


def spans(workers: list[str], cliques: dict[str, str]) -> tuple[int, int]:
    """(cliques spanned, ring neighbours in different cliques) of workers' nodes in index order."""
    ring = [cliques[n] for n in workers]
    cross = sum(1 for i in range(len(ring)) if ring[i] != ring[(i + 1) % len(ring)]) if len(ring) > 1 else 0
    return len(set(ring)), cross


def one_placement(c: Cluster, count: int, label: str) -> dict[str, float]:
    """Create the mix, wait for every pod running, measure; the namespace is gone after."""
    plans = (c.metric("quota", "quota_plan_seconds_sum", {}), c.metric("quota", "quota_plan_seconds_count", {}))
    items = [trainer(i) for i in range(count)]
    pods = sum(t["spec"]["topology"]["workers"] for t in items)
    with scratch_namespace(c, f"placement-{label}") as namespace:
        t0 = time.monotonic()
        c.apply(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}), namespace)
        eventually(lambda: len(running_pods(c, namespace)) == pods or None, timeout=600, what=f"{pods} pods running")
        seconds = time.monotonic() - t0
        nodes = json.loads(c.kubectl("get", "nodes", "-o", "json"))["items"]
        cliques = {n["metadata"]["name"]: n["metadata"]["labels"].get(CLIQUE, n["metadata"]["name"]) for n in nodes}
        by_run: dict[str, dict[int, str]] = {}
        for p in running_pods(c, namespace):
            labels = p["metadata"]["labels"]
            index = int(labels[KUBEFLOW_REPLICA_INDEX_LABEL])
            by_run.setdefault(labels[TRAINER_NAME_LABEL], {})[index] = p["spec"]["nodeName"]
    gone(c, namespace)
    measured = [spans([w[i] for i in sorted(w)], cliques) for w in by_run.values()]
    optimum = [math.ceil(t["spec"]["topology"]["workers"] / PODS_PER_CLIQUE) for t in items]
    plan_count = c.metric("quota", "quota_plan_seconds_count", {}) - plans[1]
    plan_ms = 1000 * (c.metric("quota", "quota_plan_seconds_sum", {}) - plans[0]) / max(plan_count, 1)
    ring_edges = sum(t["spec"]["topology"]["workers"] for t in items if t["spec"]["topology"]["workers"] > 1)
    return {
        "cliques_per_trainer": sum(m[0] for m in measured) / len(measured),
        "optimum_cliques_per_trainer": sum(optimum) / len(optimum),
        "cross_clique_neighbour_fraction": sum(m[1] for m in measured) / max(ring_edges, 1),
        "optimum_cross_fraction": sum(o if o > 1 else 0 for o in optimum) / max(ring_edges, 1),
        "all_pods_running_seconds": seconds,
        "mean_plan_ms": plan_ms,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trainers", type=int, default=12)
    parser.add_argument("--nodes", type=int, default=32, help="kwok nodes (four a clique) when the cluster is ours")
    args = parser.parse_args()
    cluster_tool.FAKE_NODES = args.nodes
    results: dict[str, dict[str, float]] = {}
    with operator_running() as c:
        localdev.restart("quota", {"TRAINEROP_UNGOVERNED": "AtOnce"})
        results["default scheduler"] = one_placement(c, args.trainers, "default")
        localdev.restart("quota")
        results["ours (AllOrNothing, packed)"] = one_placement(c, args.trainers, "ours")
    print(f"trainers {args.trainers} (workers {', '.join(map(str, SIZES))} in turn, 4 GPUs each)")
    for label, figures in results.items():
        print(label + ": " + ", ".join(f"{k} {v:.3f}" for k, v in figures.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Topology-aware placement (prints figures): NVLink cliques spanned and cross-clique ring
neighbours per Trainer, ours against the default scheduler's and the optimum; the time it adds.

    python bench/placement.py --trainers 20 --nodes 48 --out bench/results/placement-1205.json

On kwok nodes labelled in cliques (testbed/cluster.py: `nvidia.com/gpu.clique`, four nodes of 8
GPUs a clique, two of each capacity type), a mix of Trainers of 1, 2, 3, 4 and 6 workers of 4 GPUs
in turn (two pods fit a node; a run of 6 is larger than one clique's nodes of a capacity type) is
created at once, twice, each time in a namespace no QuotaPolicy covers and after the previous one
is gone:

- default scheduler: the quota controller with `--ungoverned AtOnce`: every pod is created at
  once and the default scheduler places it (it spreads pods over the least allocated nodes);
- ours: `--ungoverned AllOrNothing` (the default): each run is placed by the quota controller,
  packed into the fewest cliques with its ranks in ring order (docs/quota.md#topology), on one
  capacity type.

Per Trainer, from the nodes its running pods are bound to: cliques spanned, and ring neighbours
(workers by index, the last next to the first) in different cliques. Two optima: the fewest
cliques that could hold the run on an empty cluster (ceil(workers / 8): a clique's four nodes hold
8 such pods), and the same on one capacity type (ceil(workers / 4)), which is what a run the quota
places keeps to; a run over k cliques has at least k cross-clique neighbours (0 for one). Time:
per Trainer, from the first create to the poll (every 0.25 s plus one `kubectl get pods`) that
sees all of its pods Running (p50, p95, max); all pods running; the quota controller's plan time
per plan and per Trainer. Uses the cluster in $KUBECONFIG, else brings the local cluster up and
takes it down again.
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

from bench.setup import gone, operator_running, percentile, scratch_namespace
from testbed import cluster as cluster_tool
from testbed import localdev
from tests.harness import Cluster, eventually
from trainerop_common.contracts import KUBEFLOW_REPLICA_INDEX_LABEL, TRAINER_NAME_LABEL

GPU = "nvidia.com/gpu"
CLIQUE = "nvidia.com/gpu.clique"
SIZES = (1, 2, 3, 4, 6)  # workers of a Trainer, in turn
PODS_PER_CLIQUE = 8  # four nodes, two pods of 4 GPUs each
PODS_PER_CLIQUE_KIND = 4  # two of its nodes are of each capacity type


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


def all_running(c: Cluster, namespace: str, sizes: dict[str, int], t0: float, seen: dict[str, float]) -> bool:
    """Record the seconds since ``t0`` at which each Trainer is first seen with all of its pods
    Running; whether every one is."""
    now = time.monotonic() - t0
    running: dict[str, int] = {}
    for p in running_pods(c, namespace):
        name = p["metadata"]["labels"][TRAINER_NAME_LABEL]
        running[name] = running.get(name, 0) + 1
    for name, workers in sizes.items():
        if name not in seen and running.get(name) == workers:
            seen[name] = now
    return len(seen) == len(sizes)


def one_placement(c: Cluster, count: int, label: str) -> dict[str, float]:
    """Create the mix, wait for every pod running, measure; the namespace is gone after."""
    plans = (c.metric("quota", "quota_plan_seconds_sum", {}), c.metric("quota", "quota_plan_seconds_count", {}))
    items = [trainer(i) for i in range(count)]
    sizes = {t["metadata"]["name"]: t["spec"]["topology"]["workers"] for t in items}
    seen: dict[str, float] = {}
    with scratch_namespace(c, f"placement-{label}") as namespace:
        t0 = time.monotonic()
        c.apply(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}), namespace)
        eventually(lambda: all_running(c, namespace, sizes, t0, seen) or None, timeout=600, what="every pod running")
        nodes = json.loads(c.kubectl("get", "nodes", "-o", "json"))["items"]
        cliques = {n["metadata"]["name"]: n["metadata"]["labels"].get(CLIQUE, n["metadata"]["name"]) for n in nodes}
        by_run: dict[str, dict[int, str]] = {}
        for p in running_pods(c, namespace):
            labels = p["metadata"]["labels"]
            index = int(labels[KUBEFLOW_REPLICA_INDEX_LABEL])
            by_run.setdefault(labels[TRAINER_NAME_LABEL], {})[index] = p["spec"]["nodeName"]
    gone(c, namespace)
    plan_count = c.metric("quota", "quota_plan_seconds_count", {}) - plans[1]
    plan_seconds = c.metric("quota", "quota_plan_seconds_sum", {}) - plans[0]
    return figures(sizes, by_run, cliques, list(seen.values())) | {
        "mean_plan_ms": 1000 * plan_seconds / max(plan_count, 1),
        "plan_ms_per_trainer": 1000 * plan_seconds / count,
    }


def figures(
    sizes: dict[str, int], by_run: dict[str, dict[int, str]], cliques: dict[str, str], seconds: list[float]
) -> dict[str, float]:
    """The mix's placement against the two optima, and its per-Trainer times."""
    measured = [spans([w[i] for i in sorted(w)], cliques) for w in by_run.values()]
    ring_edges = sum(w for w in sizes.values() if w > 1)

    def bound(per_clique: int) -> list[int]:
        return [math.ceil(w / per_clique) for w in sizes.values()]

    anywhere, one_kind = bound(PODS_PER_CLIQUE), bound(PODS_PER_CLIQUE_KIND)
    return {
        "cliques_per_trainer": sum(m[0] for m in measured) / len(measured),
        "optimum_cliques_per_trainer": sum(anywhere) / len(anywhere),
        "optimum_one_capacity_type_cliques_per_trainer": sum(one_kind) / len(one_kind),
        "trainers_over_their_one_type_optimum": sum(m[0] > o for m, o in zip(measured, one_kind, strict=True)),
        "cross_clique_neighbour_fraction": sum(m[1] for m in measured) / max(ring_edges, 1),
        "optimum_cross_fraction": sum(o if o > 1 else 0 for o in anywhere) / max(ring_edges, 1),
        "optimum_one_capacity_type_cross_fraction": sum(o if o > 1 else 0 for o in one_kind) / max(ring_edges, 1),
        "trainer_running_p50_seconds": percentile(seconds, 50),
        "trainer_running_p95_seconds": percentile(seconds, 95),
        "all_pods_running_seconds": max(seconds),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trainers", type=int, default=12)
    parser.add_argument("--nodes", type=int, default=32, help="kwok nodes (four a clique) when the cluster is ours")
    parser.add_argument("--out", type=Path, help="also write the figures here (JSON)")
    args = parser.parse_args()
    cluster_tool.FAKE_NODES = args.nodes
    results: dict[str, dict[str, float]] = {}
    with operator_running() as c:
        localdev.restart("quota", {"TRAINEROP_UNGOVERNED": "AtOnce"})
        results["default scheduler"] = one_placement(c, args.trainers, "default")
        localdev.restart("quota")
        results["ours (AllOrNothing, packed)"] = one_placement(c, args.trainers, "ours")
    print(f"trainers {args.trainers} (workers {', '.join(map(str, SIZES))} in turn, 4 GPUs each)")
    for label, measured in results.items():
        print(label + ": " + ", ".join(f"{k} {v:.3f}" for k, v in measured.items()))
    if args.out:
        run = {"trainers": args.trainers, "sizes": list(SIZES), "nodes": cluster_tool.FAKE_NODES, "results": results}
        args.out.write_text(json.dumps(run, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

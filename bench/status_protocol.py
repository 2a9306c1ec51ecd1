#!/usr/bin/env python3
"""How fast and how cheaply the controllers converge on new Trainers (prints figures).

    python bench/status_protocol.py --trainers 10

Uses the cluster in $KUBECONFIG (it must fit N seed Trainers at once: five 8-GPU pods each), else
brings the local cluster up with enough fake nodes (and reports how long that took) and takes it
down again. Figures: time from `kubectl apply` of N Trainers until every
controller has reported on all of them, status writes per Trainer (the minimum is one per
controller), and the writes a no-op event causes (should be 0).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.setup import run_with_trainers
from bench.throughput import CONTROLLERS_WRITING_STATUS
from tests.harness import REPO, Cluster, eventually
from tests.integration.test_seed_examples import is_converged

SEED_PODS = 5  # the seed Trainer's 4 workers and 1 parameter server, each asking a whole 8-GPU node


def writes(c: Cluster, outcome: str) -> float:
    return sum(
        c.metric(ctl, "operator_status_writes_total", {"controller": ctl, "kind": "Trainer", "outcome": outcome})
        for ctl in CONTROLLERS_WRITING_STATUS
    )


def run(c: Cluster, namespace: str, trainers: int) -> None:
    seed = yaml.safe_load((REPO / "examples" / "seed" / "trainer.yaml").read_text())
    items = [{**seed, "metadata": {"name": f"bench-{i}"}} for i in range(trainers)]
    written_before = writes(c, "written")
    t0 = time.monotonic()
    c.apply(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}), namespace)

    def all_converged() -> bool:
        listed = json.loads(c.kubectl("get", "trainers", "-n", namespace, "-o", "json"))["items"]
        return len(listed) == trainers and all(is_converged(t) for t in listed)

    eventually(all_converged, timeout=300, what="every Trainer to converge")
    elapsed = time.monotonic() - t0
    per_trainer = (writes(c, "written") - written_before) / trainers
    print(f"trainers {trainers}")
    print(f"converge_seconds {elapsed:.2f}")
    print(f"status_writes_per_trainer {per_trainer:.1f}")

    written_before, skipped_before = writes(c, "written"), writes(c, "skipped")
    c.kubectl("label", "trainers", "--all", "-n", namespace, "bench-poke=1")
    eventually(
        lambda: writes(c, "skipped") >= skipped_before + len(CONTROLLERS_WRITING_STATUS) * trainers,
        timeout=120,
        what="every controller to see the no-op change",
    )
    print(f"status_writes_on_noop_event {writes(c, 'written') - written_before:.0f}")


if __name__ == "__main__":
    sys.exit(run_with_trainers(__doc__, run, 10, nodes_per_trainer=SEED_PODS))

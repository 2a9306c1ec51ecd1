#!/usr/bin/env python3
"""How fast and how cheaply the five controllers converge on new Trainers (prints figures).

    python bench/status_protocol.py --trainers 10

Uses the cluster in $KUBECONFIG, else brings the local cluster up (and reports how long that
took) and takes it down again. Figures: time from `kubectl apply` of N Trainers until every
controller has reported on all of them, status writes per Trainer (the minimum is one per
controller), and the writes a no-op event causes (should be 0).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hack import cluster as cluster_tool
from hack import localdev
from tests.harness import REPO, Cluster, eventually
from tests.integration.test_seed_examples import is_converged


def writes(c: Cluster, outcome: str) -> float:
    return sum(
        c.metric(ctl, "operator_status_writes_total", {"controller": ctl, "kind": "Trainer", "outcome": outcome})
        for ctl in localdev.CONTROLLERS
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--trainers", type=int, default=10)
    args = parser.parse_args()

    started = False
    if not os.environ.get("KUBECONFIG"):
        t0 = time.monotonic()
        if cluster_tool.main(["up"]) != 0:
            return 1
        print(f"cluster_up_seconds {time.monotonic() - t0:.1f}")
        os.environ["KUBECONFIG"] = str(cluster_tool.RUN_DIR / "admin.kubeconfig")
        started = True
    t0 = time.monotonic()
    localdev.install()
    ports = localdev.start()
    print(f"operator_install_and_start_seconds {time.monotonic() - t0:.1f}")
    state = localdev.state_dir()
    c = Cluster(
        kubeconfig=localdev.admin_kubeconfig(),
        kubectl_bin=cluster_tool.bin_dir() / "kubectl",
        metrics_ports=ports,
        sa_kubeconfigs={name: state / f"{name}.kubeconfig" for name in localdev.CONTROLLERS},
    )
    namespace = f"bench-{uuid.uuid4().hex[:6]}"
    c.kubectl("create", "namespace", namespace)
    try:
        seed = yaml.safe_load((REPO / "examples" / "seed" / "trainer.yaml").read_text())
        items = [{**seed, "metadata": {"name": f"bench-{i}"}} for i in range(args.trainers)]
        written_before = writes(c, "written")
        t0 = time.monotonic()
        c.apply(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}), namespace)

        def all_converged() -> bool:
            listed = json.loads(c.kubectl("get", "trainers", "-n", namespace, "-o", "json"))["items"]
            return len(listed) == args.trainers and all(is_converged(t) for t in listed)

        eventually(all_converged, timeout=300, what="every Trainer to converge")
        elapsed = time.monotonic() - t0
        per_trainer = (writes(c, "written") - written_before) / args.trainers
        print(f"trainers {args.trainers}")
        print(f"converge_seconds {elapsed:.2f}")
        print(f"status_writes_per_trainer {per_trainer:.1f}")

        written_before, skipped_before = writes(c, "written"), writes(c, "skipped")
        c.kubectl("label", "trainers", "--all", "-n", namespace, "bench-poke=1")
        eventually(
            lambda: writes(c, "skipped") >= skipped_before + len(localdev.CONTROLLERS) * args.trainers,
            timeout=120,
            what="every controller to see the no-op change",
        )
        print(f"status_writes_on_noop_event {writes(c, 'written') - written_before:.0f}")
    finally:
        c.kubectl("delete", "namespace", namespace, "--wait=false")
        localdev.stop()
        if started:
            cluster_tool.main(["down"])
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""How fast profiles take effect on many Trainers (prints figures).

    python bench/profiles.py --trainers 20

N one-worker Trainers name the seed profile, whose Secret does not exist yet, so they all wait
with SecretNotFound (a Trainer naming a profile that does not exist is refused by the profile
webhook, so it cannot wait for the profile itself). Figures: time from creating the Secret until
every Trainer has its pod (Secrets are not watched: bounded by the controller's
--secret-recheck-seconds, 10); time from a profile update until every Trainer is re-resolved
(new status.profile.hash); the Secret lookups the profile controller made for all of that (they
are cached, not one per reconcile).
Uses the cluster in $KUBECONFIG, else brings the local cluster up and takes it down again.
"""

from __future__ import annotations

import copy
import json
import sys
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.setup import run_with_trainers
from tests.harness import REPO, Cluster, eventually

PROFILE: dict[str, Any] = yaml.safe_load((REPO / "examples" / "seed" / "trainingprofile.yaml").read_text())
TRAINER: dict[str, Any] = yaml.safe_load((REPO / "examples" / "profiles" / "trainer.yaml").read_text())


def trainers(c: Cluster, namespace: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads(c.kubectl("get", "trainers", "-n", namespace, "-o", "json"))["items"]
    return items


def reason(trainer: dict[str, Any]) -> str:
    found = [c for c in trainer.get("status", {}).get("conditions", []) if c["type"] == "ProfileResolved"]
    return str(found[0]["reason"]) if found else ""


def secret_gets(c: Cluster) -> float:
    """The profile controller's GETs: it reads everything else from watches, so these are the
    metadata-only Secret lookups (found, not found or forbidden)."""
    return sum(
        c.metric("profile", "operator_api_requests_total", {"controller": "profile", "verb": "get", "code": code})
        for code in ("ok", "404", "403")
    )


def run(c: Cluster, namespace: str, count: int) -> None:
    c.apply(PROFILE, namespace)
    items = []
    for i in range(count):
        body = copy.deepcopy(TRAINER)
        body["metadata"] = {"name": f"bench-{i}"}
        body["spec"]["topology"] = {"workers": 1}
        items.append(body)
    c.apply(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}), namespace)
    eventually(
        lambda: len(listed := trainers(c, namespace)) == count and all(reason(t) == "SecretNotFound" for t in listed),
        timeout=300,
        what="every Trainer to wait for its profile's Secret",
    )
    gets_before = secret_gets(c)
    t0 = time.monotonic()
    c.kubectl("create", "secret", "generic", "mistral-vault", "-n", namespace, "--from-literal=k=v")

    def pods() -> int:
        listed = c.kubectl("get", "pods", "-n", namespace, "-o", "name").split()
        return len(listed)

    eventually(lambda: pods() == count, timeout=300, what="a pod for every Trainer")
    print(f"trainers {count}")
    print(f"secret_created_to_all_pods_seconds {time.monotonic() - t0:.2f}")

    updated = copy.deepcopy(PROFILE)
    updated["spec"]["envVars"] = [{"name": "NCCL_IB_TIMEOUT", "value": "30"}]
    old = {t["status"]["profile"]["hash"] for t in trainers(c, namespace)}
    t0 = time.monotonic()
    c.apply(updated, namespace)
    eventually(
        lambda: all(t["status"]["profile"]["hash"] not in old for t in trainers(c, namespace)),
        timeout=300,
        what="every Trainer to be re-resolved",
    )
    print(f"profile_update_reresolved_all_seconds {time.monotonic() - t0:.2f}")
    print(f"profile_controller_gets_during_both {secret_gets(c) - gets_before:.0f}")


if __name__ == "__main__":
    sys.exit(run_with_trainers(__doc__, run, 20))

"""The leak check (issue 19): Trainers created and deleted round after round, each controller's
resident memory read after every round once the cluster has settled. A Python process keeps the
memory its caches once held (its allocator rarely hands pages back), so the first round sets the
high-water mark and the figure is the growth from there to the last round: what a long-lived
controller would keep adding with every Trainer it has ever seen."""

from __future__ import annotations

import sys
from typing import Any

from lightkube import Client

from bench.measure import Timeline, api_requests, create_all, resident_mib
from bench.throughput import TRAINER, bench_trainer, running, settled
from tests.harness import Cluster, eventually


def leak_check(c: Cluster, client: Client, namespace: str, total: int, batch: int) -> dict[str, Any]:
    """``total`` one-worker Trainers in rounds of ``batch``: each round Running, then deleted and
    gone (pods too); memory after each round."""
    trainers = Timeline(client, TRAINER, namespace, running)
    rounds: list[dict[str, float]] = []
    for r in range(total // batch):
        print(f"== leak check: round {r + 1} of {total // batch}, {batch} Trainers", file=sys.stderr, flush=True)
        create_all(client, [TRAINER.from_dict(bench_trainer(f"r{r:02d}-{i:04d}", 1, namespace)) for i in range(batch)])
        trainers.wait((r + 1) * batch, f"leak check round {r + 1}: Trainers Running")
        c.kubectl("delete", "trainers", "--all", "-n", namespace, "--wait=false")
        eventually(
            lambda: not c.names("trainers", namespace) and not c.names("pods", namespace),
            timeout=600,
            what=f"round {r + 1}'s Trainers and pods to go",
        )
        settled(c, api_requests(c))  # the controllers have handled the deletions
        rounds.append(resident_mib(c))
    trainers.stop()
    first, last = rounds[0], rounds[-1]
    return {
        "trainers": total,
        "batch": batch,
        "memory_mib_by_round": rounds,
        "growth_mib_after_first_round": {ctl: round(last[ctl] - first[ctl], 1) for ctl in last},
    }

"""The drain guard (pure; docs/trainer.md "Drains"): a PodDisruptionBudget over a run's pods, so
that a drain's evictions of its ranks are refused and the drain retries until the run has saved
and moved (docs/design/disruption.md, decision 5).

Only a run that can save first has one: it checkpoints, and the quota controller places it on
nodes (its grant's placement in status.quota; Kueue's grants place nothing). The quota reads a
cordoned node under it as a notice (`NodeDrained`), has the checkpoint controller ask the ranks
to save, and then moves it under a new admission. A run without that would only be held up: the
drain evicts its pods, and they are replaced.

Once the run moves, the guard is lowered to 0 and the old pods on a cordoned node are left to the
drain for ``DRAIN_WAIT_SECONDS``: `kubectl drain` retries its eviction every 5 s by the pod's
name, never its UID, so had the trainer deleted the pod and made its replacement (same name,
another node), the drain would go on evicting the replacement (refused while it runs, or taken
while it is Pending). Its eviction of the old pod ends its loop; after the wait, the trainer
deletes those left (a cordon without a drain).

`minAvailable` is the number of the run's pods, not `maxUnavailable: 0`: the disruption
controller would count the pods a `maxUnavailable` allows from the Trainer's scale subresource,
which counts workers only. Pods that are not Ready may always be evicted
(`unhealthyPodEvictionPolicy: AlwaysAllow`): a pod that does not run yet has nothing to save.
"""

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from trainerop_common.api import GROUP
from trainerop_common.clock import parse_time, rfc3339
from trainerop_common.objects import slim

from .pods import Owner

LOWERED_ANNOTATION = f"{GROUP}/guard-lowered-at"  # when the run moved and the guard let its old pods go
DRAIN_WAIT_SECONDS = 10.0  # two of kubectl drain's retries


@dataclass(frozen=True)
class GuardView:
    """The guard found: its size (-1: someone made it a percentage) and when it was lowered."""

    size: int
    lowered_at: datetime | None = None


@dataclass(frozen=True)
class GuardChange:
    """What the drain guard needs now: created (``manifest``), or its size set (``resize``, with
    the time it is lowered for a move in ``lowered_at``)."""

    manifest: dict[str, Any] | None = None
    resize: int | None = None
    lowered_at: str | None = None


def guard_essentials(budget: dict[str, Any]) -> dict[str, Any]:
    """What the trainer holds of a guard: not its status (the disruption controller rewrites it as
    the pods come and go)."""
    return {k: v for k, v in slim(budget).items() if k != "status"}


def guard_view(budgets: list[dict[str, Any]], name: str) -> GuardView | None:
    """The run's guard among its PodDisruptionBudgets (None: there is none)."""
    budget = next((b for b in budgets if b["metadata"]["name"] == name), None)
    if budget is None:
        return None
    size = (budget.get("spec") or {}).get("minAvailable")
    lowered = (budget["metadata"].get("annotations") or {}).get(LOWERED_ANNOTATION)
    try:
        at = parse_time(lowered) if lowered else None
    except ValueError:
        at = None
    return GuardView(size if isinstance(size, int) else -1, at)


def guard_manifest(owner: Owner, pods: int) -> dict[str, Any]:
    """The run's PodDisruptionBudget, named like it (as its headless Service is)."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": owner.named_metadata(),
        "spec": {
            "minAvailable": pods,
            "selector": {"matchLabels": owner.selector()},
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }


def guard_change(
    owner: Owner, guarded: bool, moving: bool, pods: int, found: GuardView | None, now: datetime
) -> GuardChange | None:
    """The change a run needs: ``guarded`` (it checkpoints and the quota places it) with ``pods``
    pods wanted, where the guard found is ``found``. While the run moves (pods of an earlier
    admission are left) the guard is 0, and says since when; a guard no longer needed is 0 too
    (it lets every eviction through; it goes with the Trainer)."""
    want = pods if guarded and not moving else 0
    lowered = guarded and moving
    if found is None:
        return GuardChange(manifest=guard_manifest(owner, want)) if want > 0 else None
    if found.size == want and (found.lowered_at is not None) == lowered:
        return None
    return GuardChange(resize=want, lowered_at=rfc3339(now) if lowered else None)


def drain_wait(found: GuardView | None, now: datetime) -> float:
    """Seconds the old pods of a moving run that sit on a cordoned node are still left to the
    drain's eviction: ``DRAIN_WAIT_SECONDS`` from when the guard was lowered (all of it while it
    is not lowered yet); 0 without a guard (nothing held their eviction: no drain waits)."""
    if found is None:
        return 0.0
    if found.size != 0 or found.lowered_at is None:
        return DRAIN_WAIT_SECONDS
    return max(0.0, DRAIN_WAIT_SECONDS - (now - found.lowered_at).total_seconds())

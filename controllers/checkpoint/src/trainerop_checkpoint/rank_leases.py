"""The ranks' Leases, the checkpoint controller's channel to them (docs/checkpoints.md): what each
rank's heartbeat reported, a save request written on each, and taken off once answered. Read
only while a save is being asked (a list of one Trainer's Leases, at most every few seconds per
request however often the Trainer changes), never watched."""

import time
from dataclasses import dataclass, field
from typing import Any

from trainerop_common.contracts import SAVE_AT_STEP_ANNOTATION, TRAINER_UID_LABEL
from trainerop_common.kube import Kube
from trainerop_common.objects import metadata_only
from trainerop_common.parallel import bounded

from .save_request import ASK_AGAIN_SECONDS, RankReport, rank_report


def annotations_of(lease: dict[str, Any]) -> dict[str, str]:
    return dict(lease.get("metadata", {}).get("annotations") or {})


@dataclass
class RankLeases:
    kube: Kube
    asked: dict[tuple[str, str, int], float] = field(default_factory=dict)  # (ns, uid, step) -> when listed

    async def _leases(self, namespace: str, trainer_uid: str) -> list[dict[str, Any]]:
        return await self.kube.list_core_in("Lease", namespace, f"{TRAINER_UID_LABEL}={trainer_uid}", metadata_only)

    async def reports(self, namespace: str, trainer_uid: str) -> list[RankReport]:
        """Each rank's last report (ranks that have not reported a step are left out)."""
        found = (rank_report(annotations_of(lease)) for lease in await self._leases(namespace, trainer_uid))
        return [r for r in found if r is not None]

    async def ask(self, namespace: str, trainer_uid: str, step: int) -> None:
        """Write ``save-at-step`` on every rank's Lease that does not say it yet (a rank replaced
        meanwhile has a new one): looked at again every ASK_AGAIN_SECONDS at most."""
        key, now = (namespace, trainer_uid, step), time.monotonic()
        if now - self.asked.get(key, -ASK_AGAIN_SECONDS) < ASK_AGAIN_SECONDS:
            return
        self.asked[key] = now
        leases = await self._leases(namespace, trainer_uid)
        todo = [x for x in leases if annotations_of(x).get(SAVE_AT_STEP_ANNOTATION) != str(step)]
        await bounded(self._mark(namespace, x["metadata"]["name"], str(step)) for x in todo)

    async def clear(self, namespace: str, trainer_uid: str) -> None:
        """The answered request taken off the Leases, so that no rank saves there again (one that
        resumed from an earlier step would reach it once more)."""
        self.asked = {k: v for k, v in self.asked.items() if k[:2] != (namespace, trainer_uid)}
        leases = await self._leases(namespace, trainer_uid)
        todo = [x for x in leases if SAVE_AT_STEP_ANNOTATION in annotations_of(x)]
        await bounded(self._mark(namespace, x["metadata"]["name"], None) for x in todo)

    async def _mark(self, namespace: str, name: str, step: str | None) -> None:
        await self.kube.merge_patch(
            "Lease", namespace, name, {"metadata": {"annotations": {SAVE_AT_STEP_ANNOTATION: step}}}
        )

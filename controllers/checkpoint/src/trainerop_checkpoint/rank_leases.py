"""The ranks' Leases, the checkpoint controller's channel to them (docs/checkpoints.md): what each
rank's heartbeat reported, and a save request written on each. Read only while a save is being
asked (a list of one Trainer's Leases), never watched."""

from dataclasses import dataclass
from typing import Any

from trainerop_common.contracts import SAVE_AT_STEP_ANNOTATION, TRAINER_UID_LABEL
from trainerop_common.kube import Kube
from trainerop_common.objects import metadata_only

from .save_request import RankReport, rank_report


def annotations_of(lease: dict[str, Any]) -> dict[str, str]:
    return dict(lease.get("metadata", {}).get("annotations") or {})


@dataclass(frozen=True)
class RankLeases:
    kube: Kube

    async def _leases(self, namespace: str, trainer_uid: str) -> list[dict[str, Any]]:
        return await self.kube.list_core_in("Lease", namespace, f"{TRAINER_UID_LABEL}={trainer_uid}", metadata_only)

    async def reports(self, namespace: str, trainer_uid: str) -> list[RankReport]:
        """Each rank's last report (ranks that have not reported a step are left out)."""
        found = (rank_report(annotations_of(lease)) for lease in await self._leases(namespace, trainer_uid))
        return [r for r in found if r is not None]

    async def ask(self, namespace: str, trainer_uid: str, step: int) -> int:
        """Write ``save-at-step`` on every rank's Lease that does not say it yet; how many were."""
        asked = 0
        for lease in await self._leases(namespace, trainer_uid):
            if annotations_of(lease).get(SAVE_AT_STEP_ANNOTATION) == str(step):
                continue
            patch = {"metadata": {"annotations": {SAVE_AT_STEP_ANNOTATION: str(step)}}}
            if await self.kube.merge_patch("Lease", namespace, lease["metadata"]["name"], patch) is not None:
                asked += 1
        return asked

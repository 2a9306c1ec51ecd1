"""Checkpoints on a PersistentVolumeClaim, read and deleted by pods that mount it: the adapter that
creates and deletes the pods :mod:`pvc_pods` plans, and reports the ones that fail (an Event once
per pod) and the data no pod may delete (an Event once per checkpoint)."""

import logging
from collections.abc import Mapping
from typing import Any

from lightkube import ApiError

from trainerop_common.api import Checkpoint
from trainerop_common.cache import ObjectCache
from trainerop_common.outcome import soonest
from trainerop_common.runtime import Body, Runtime

from . import pvc_pods
from .decide import RECHECK_SECONDS, Collect, Copy, CopyId, CopyState
from .metrics import STORAGE_PODS

COLLECT_REST_SECONDS = 60.0  # a collector that could not delete is tried again this much later
WHAT = {"verify": "verify checkpoint copies", "collect": "delete checkpoint data"}
log = logging.getLogger("trainerop.checkpoint")


class ClaimPods:
    def __init__(self, runtime: Runtime, pods: ObjectCache) -> None:
        self.rt = runtime
        self.pods = pods  # the storage pods, grouped by (namespace, Trainer)
        # Storage pods whose failure or refusal was reported (an Event each), by Trainer and purpose.
        self.reported: dict[tuple[str, str, str], set[str]] = {}

    async def _pods_of(self, target: pvc_pods.Target) -> list[pvc_pods.PodView]:
        found = (pvc_pods.view(p) for p in await self.pods.grouped((target.namespace, target.trainer)))
        return [p for p in found if p is not None]

    async def read(
        self, target: pvc_pods.Target, body: Body, copies: tuple[Copy, ...]
    ) -> tuple[dict[CopyId, CopyState], dict[str, str], float | None]:
        """What the verifier pods that answered found, what each checkpoint's verification waits for
        (by uid), and when to look again; pods created for the copies no pod is on."""
        pods = await self._pods_of(target)
        plan = pvc_pods.plan_verification(target, copies, pods, self.rt.clock.now())
        refused = await self._apply(target, body, plan, "verify", pods)
        notes = dict(plan.notes) | {uid: f"verifying on claim {target.claim!r}: {why}" for uid, why in refused.items()}
        return dict(plan.copy_states), notes, soonest(plan.recheck_after, RECHECK_SECONDS if refused else None)

    async def delete(
        self,
        target: pvc_pods.Target,
        body: Body,
        items: tuple[Collect, ...],
        checkpoints: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> tuple[set[str], float | None]:
        """The checkpoint paths the collector pods deleted, and when to look again; pods created for
        the rest, each as the user that wrote its data (from the items' Checkpoints: ``checkpoints``
        by name, else read). Data no pod may delete is left, and said once."""
        pods = await self._pods_of(target)
        uid = body["metadata"].get("uid", "")
        wanted = await self._writers(target.namespace, items, checkpoints)
        plan = pvc_pods.plan_collection(target, uid, wanted, pods, self.rt.clock.now(), COLLECT_REST_SECONDS)
        refused = await self._apply(target, body, plan, "collect", pods)
        self._left(target, body, {i.path: i.checkpoint for i in items}, plan.left)
        return set(plan.collected), soonest(plan.recheck_after, COLLECT_REST_SECONDS if refused else None)

    async def _writers(
        self, namespace: str, items: tuple[Collect, ...], checkpoints: Mapping[str, Mapping[str, Any]] | None
    ) -> dict[str, pvc_pods.Writer | str]:
        """Who wrote each item's data, or why no pod may delete it; a Checkpoint gone meanwhile is
        not collected (nothing would record it)."""
        out: dict[str, pvc_pods.Writer | str] = {}
        for item in items:
            if checkpoints is not None:
                raw = checkpoints.get(item.checkpoint)
            else:
                raw = await self.rt.kube.get("Checkpoint", item.checkpoint, namespace)
            if raw is not None:
                out[item.path] = pvc_pods.writer_of(Checkpoint.model_validate(raw).spec.shards or ())
        return out

    def _left(self, target: pvc_pods.Target, body: Body, names: Mapping[str, str], left: Mapping[str, str]) -> None:
        """A Warning Event once per checkpoint whose data no collector may delete (said again only
        if it stopped being left in between, or after a restart)."""
        key = (target.namespace, target.trainer, "left")
        said = self.reported.setdefault(key, set())
        for path, why in left.items():
            if path not in said:
                said.add(path)
                message = (
                    f"checkpoint {names.get(path, path)} is not collected: its data at {path} stays on claim "
                    f"{target.claim!r} ({why}); delete it by hand"
                )
                self.rt.event(body, "Warning", "CheckpointDataLeft", message)
        said &= set(left)
        if not said:
            self.reported.pop(key, None)

    async def _apply(
        self, target: pvc_pods.Target, body: Body, plan: pvc_pods.Plan, purpose: str, pods: list[pvc_pods.PodView]
    ) -> dict[str, str]:
        """Delete and create storage pods, report failures once per pod; the pods the API server
        refused, by checkpoint uid ("" for a collector), with its reason."""
        kube = self.rt.kube
        reported = self.reported.setdefault((target.namespace, target.trainer, purpose), set())
        # Each pod is deleted by the UID the plan saw: one made since under its name is not touched.
        uids = {p.name: p.uid or None for p in pods}
        for name in plan.delete:
            await kube.delete_core("Pod", target.namespace, name, uid=uids.get(name))
        for name in plan.force_delete:
            log.warning("pod %s/%s: its node never confirmed its deletion; forcing it", target.namespace, name)
            await kube.delete_core("Pod", target.namespace, name, force=True, uid=uids.get(name))
        refused_names, refused = await self._create(target, body, plan, purpose, reported)
        for name, failure in plan.failures:
            message = f"pod {name} could not {WHAT[purpose]} on claim {target.claim!r}: {failure}"
            self._once(body, reported, name, purpose, message)
        # A name is reported again only once its pod has left (a new pod of that name is a new failure).
        reported &= {p.name for p in pods} | refused_names
        if not reported:
            self.reported.pop((target.namespace, target.trainer, purpose), None)
        return refused

    async def _create(
        self, target: pvc_pods.Target, body: Body, plan: pvc_pods.Plan, purpose: str, reported: set[str]
    ) -> tuple[set[str], dict[str, str]]:
        """Create the planned pods; the names of those refused, and why by checkpoint uid."""
        names: set[str] = set()
        refused: dict[str, str] = {}
        for pod in plan.create:
            name = pod["metadata"]["name"]
            try:
                if await self.rt.kube.create_core(pod):
                    STORAGE_PODS.labels(purpose, "created").inc()
                reported.discard(name)
            except ApiError as err:
                reason = f"pod {name} was refused: {err.status.message}"
                names.add(name)
                refused[pod["metadata"]["labels"].get(pvc_pods.CHECKPOINT_UID_LABEL, "")] = reason
                message = f"the pod to {WHAT[purpose]} on claim {target.claim!r}: {reason}"
                self._once(body, reported, name, purpose, message)
        return names, refused

    def _once(self, body: Body, reported: set[str], name: str, purpose: str, message: str) -> None:
        if name in reported:
            return
        reported.add(name)
        STORAGE_PODS.labels(purpose, "failed").inc()
        rest = RECHECK_SECONDS if purpose == "verify" else COLLECT_REST_SECONDS
        self.rt.event(body, "Warning", "StoragePodFailed", f"{message}; tried again in {rest:g} s")

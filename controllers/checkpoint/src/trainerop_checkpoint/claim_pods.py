"""Checkpoints on a PersistentVolumeClaim, read and deleted by pods that mount it: the adapter that
creates and deletes the pods :mod:`pvc_pods` plans, and reports the ones that fail (an Event once
per pod)."""

import logging

from lightkube import ApiError

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
        self, target: pvc_pods.Target, body: Body, items: tuple[Collect, ...]
    ) -> tuple[set[str], float | None]:
        """The checkpoint paths the collector pods deleted, and when to look again; pods created for
        the rest."""
        pods = await self._pods_of(target)
        uid = body["metadata"].get("uid", "")
        paths = [i.path for i in items]
        plan = pvc_pods.plan_collection(target, uid, paths, pods, self.rt.clock.now(), COLLECT_REST_SECONDS)
        refused = await self._apply(target, body, plan, "collect", pods)
        return set(plan.collected), soonest(plan.recheck_after, COLLECT_REST_SECONDS if refused else None)

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

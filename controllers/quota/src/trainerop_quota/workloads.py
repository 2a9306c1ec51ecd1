"""Kueue's side of the runs it admits (I/O; the decisions are :mod:`kueue`'s): the Workloads and
ResourceFlavors watched for the plan, and after each plan what :func:`kueue.actions` says
written to the Workloads (made, made again, deactivated or activated with the run's suspension,
their reservation given back after an eviction, marked Finished)."""

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import kopf
from lightkube import ApiError

from trainerop_common.cache import Derived, ObjectCache
from trainerop_common.clock import rfc3339
from trainerop_common.runtime import Runtime

from . import kueue
from .kueue_views import flavor_view, workload_view
from .model import Observed

log = logging.getLogger("trainerop.quota.kueue")


def owner_uid(body: Mapping[str, Any]) -> str:
    """The uid of the Trainer that owns a Workload ("" for one of another kind's)."""
    refs = body.get("metadata", {}).get("ownerReferences") or ()
    return next((str(r.get("uid")) for r in refs if r.get("kind") == "Trainer" and r.get("controller")), "")


class Workloads:
    def __init__(self, runtime: Runtime, poke: Callable[[], None]) -> None:
        kube = runtime.kube
        self.rt = runtime
        self.workloads = ObjectCache(
            lambda keep: kube.list_all("Workload", keep), kueue.GROUP, kueue.VERSION, "workloads", index=owner_uid
        )
        self.flavors = ObjectCache(
            lambda keep: kube.list_all("ResourceFlavor", keep), kueue.GROUP, kueue.VERSION, "resourceflavors"
        )
        self.priorities = ObjectCache(
            lambda keep: kube.list_all("WorkloadPriorityClass", keep),
            kueue.GROUP,
            kueue.VERSION,
            "workloadpriorityclasses",
        )
        self._poke = poke
        self.views = Derived(workload_view)  # each plan reads every Workload: parsed again only when it moved

    def register(self, registry: kopf.OperatorRegistry) -> None:
        self.workloads.register(registry, lambda *_: self._poke())
        self.flavors.register(registry, lambda *_: self._poke())
        self.priorities.register(registry, lambda *_: self._poke())

    async def observe(self, obs: Observed) -> Observed:
        """``obs`` with Kueue's side: the Workloads by owner, the ResourceFlavors and priorities."""
        bodies = [b for b in await self.workloads.values() if owner_uid(b)]
        workloads = {owner_uid(b): view for b, view in zip(bodies, self.views.over(bodies), strict=True)}
        flavors = {f.name: f for f in map(flavor_view, await self.flavors.values())}
        priorities = {c["metadata"]["name"]: int(c.get("value") or 0) for c in await self.priorities.values()}
        return replace(obs, kueue=True, workloads=workloads, flavors=flavors, priorities=priorities)

    async def write(self, obs: Observed) -> float | None:
        """Carry out what each Kueue run needs; when to look again (a write that failed)."""
        holding = {p.trainer_uid for p in obs.pods if p.trainer_uid and not p.succeeded}
        again = None
        for t in obs.trainers:
            if t.queue is None:
                continue
            for action in kueue.actions(t, t.queue, obs.workloads.get(t.uid), t.uid in holding, obs.priorities):
                try:
                    await self._do(action, obs)
                except ApiError as err:
                    log.warning("Workload %s/%s: %s failed: %s", action.namespace, action.name, action.verb, err)
                    again = 5.0
        return again

    async def _do(self, action: kueue.WorkloadAction, obs: Observed) -> None:
        kube, ns, name = self.rt.kube, action.namespace, action.name
        if action.verb in ("create", "replace"):
            if action.verb == "replace":
                await kube.delete("Workload", name, ns)
            await kube.create("Workload", dict(action.body), ns)
        elif action.verb in ("activate", "deactivate"):
            await kube.merge_patch("Workload", ns, name, {"spec": {"active": action.verb == "activate"}})
        else:
            body = await kube.get("Workload", name, ns)
            if body is not None:
                patch = kueue.status_patch(body, action, rfc3339(obs.now))
                await kube.merge_patch("Workload", ns, name, patch, status=True)

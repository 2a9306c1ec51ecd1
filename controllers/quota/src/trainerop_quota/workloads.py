"""Kueue's side of the runs it admits (I/O; the decisions are :mod:`kueue`'s): the Workloads and
ResourceFlavors watched for the plan, and after each plan what :func:`kueue.actions` says
written to the Workloads (made, made again, deactivated or activated with the run's suspension,
their reservation given back after an eviction, marked Finished)."""

import logging
from collections.abc import Callable
from dataclasses import replace

import kopf
from lightkube import ApiError

from trainerop_common.cache import Derived, ObjectCache
from trainerop_common.clock import rfc3339
from trainerop_common.objects import controller_uid
from trainerop_common.runtime import Runtime

from . import kueue
from .kueue_views import flavor_view, workload_view
from .model import Observed

log = logging.getLogger("trainerop.quota.kueue")


class Workloads:
    def __init__(self, runtime: Runtime, poke: Callable[[], None]) -> None:
        kube = runtime.kube
        self.rt = runtime
        self.workloads = ObjectCache(
            lambda keep: kube.list_all("Workload", keep), kueue.GROUP, kueue.VERSION, "workloads", index=controller_uid
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
        """``obs`` with Kueue's side: the Workloads by owner (a Trainer, or a Kubeflow job Kueue
        admits itself), the ResourceFlavors and priorities."""
        bodies = [b for b in await self.workloads.values() if controller_uid(b)]
        workloads = {controller_uid(b): view for b, view in zip(bodies, self.views.over(bodies), strict=True)}
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
            own, job = obs.workloads.get(t.uid), kueue.job_workload(t, obs.workloads)
            for action in kueue.actions(t, t.queue, own, t.uid in holding, obs.priorities, job):
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
        elif action.verb == "delete":
            await kube.delete("Workload", name, ns)
        elif action.verb in ("activate", "deactivate"):
            await kube.merge_patch("Workload", ns, name, {"spec": {"active": action.verb == "activate"}})
        else:
            body = await kube.get("Workload", name, ns)
            if body is not None:
                patch = kueue.status_patch(body, action, rfc3339(obs.now))
                await kube.merge_patch("Workload", ns, name, patch, status=True)

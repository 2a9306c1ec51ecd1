"""Carrying out the trainer's decisions with the controller's own client: the pods' identity,
Leases, claims and Services, then pods, then deletions (a replacement can only be created once its
predecessor is gone)."""

from collections.abc import Mapping, Sequence
from typing import Any

from lightkube import ApiError
from prometheus_client import Counter

from trainerop_common.contracts import REPLICA_TYPE_LABEL
from trainerop_common.runtime import Body, Runtime

from .decide import Decision
from .pods import Owner
from .views import PodView

PODS_CREATED = Counter("trainer_pods_created_total", "Training pods created.", ["role"])
RESTARTS = Counter("trainer_worker_restarts_total", "Pods replaced after a retryable failure.", ["role"])


class Actions:
    def __init__(self, runtime: Runtime) -> None:
        self.rt = runtime
        # UIDs of pods this process deleted: treated as going away until the watch says so, so a
        # stale event cannot make one failure count twice.
        self.deleted: set[str] = set()
        self._runners: dict[tuple[str, str, str], frozenset[str]] = {}  # Trainer -> Leases its Role covers

    async def carry_out(self, body: Body, owner: Owner, decision: Decision, pods: Sequence[PodView]) -> bool:
        """Create and delete what the decision says; whether the API server refused something (an
        Event said what; the rest was carried out)."""
        await self._runner(owner, decision.runner)
        refused = False
        for obj in (*decision.create_leases, *decision.create_claims, *decision.create_services):
            refused |= await self._create(body, obj) is None
        created = []
        for pod in decision.create_pods:
            made = await self._create(body, pod)
            refused |= made is None
            if made:
                PODS_CREATED.labels(pod["metadata"]["labels"][REPLICA_TYPE_LABEL]).inc()
                created.append(pod["metadata"]["name"])
        if created:
            self.rt.event(body, "Normal", "CreatedPods", "created " + ", ".join(created))
        await self._delete(owner, decision, {p.name: p for p in pods})
        return refused

    async def _runner(self, owner: Owner, runner: Sequence[dict[str, Any]]) -> None:
        """The pods' ServiceAccount, Role and RoleBinding: applied once per Trainer and again only
        when its Leases change (a scale); a replacement pod does not pay three extra requests."""
        key = (owner.namespace, owner.name, owner.uid)
        leases = frozenset(name for obj in runner if obj["kind"] == "Role" for name in obj["rules"][0]["resourceNames"])
        if runner and self._runners.get(key) != leases:
            for obj in runner:
                await self.rt.kube.apply_core(obj)
            self._runners[key] = leases

    async def _create(self, body: Body, obj: dict[str, Any]) -> bool | None:
        """Create one object: whether it was created (False: it exists, or its namespace is going
        and the Trainer with it), None when the API server refused it (quota, admission, an
        invalid override): an Event says why, and the reconcile is retried with backoff."""
        try:
            return await self.rt.kube.create_core(obj)
        except ApiError as err:
            if err.status.code is not None and err.status.code >= 500:
                raise
            if "is being terminated" in (err.status.message or ""):
                return False
            kind, name = obj["kind"], obj["metadata"]["name"]
            self.rt.event(body, "Warning", "CreateRefused", f"{kind} {name} was refused: {err.status.message}")
            return None

    async def _delete(self, owner: Owner, decision: Decision, pods: Mapping[str, PodView]) -> None:
        kube = self.rt.kube
        for name in decision.delete_pods:
            await kube.delete_core("Pod", owner.namespace, name, force=name in decision.force_delete)
            if name in pods:  # gone already (404) counts as deleted too: never count it twice
                self.deleted.add(pods[name].uid)
        for name in set(decision.force_delete) - set(decision.delete_pods):
            await kube.delete_core("Pod", owner.namespace, name, force=True)
        for name in decision.restarted:
            RESTARTS.labels(pods[name].role if name in pods else "unknown").inc()
        for name in decision.delete_services:
            await kube.delete_core("Service", owner.namespace, name)
        for name in decision.delete_leases:
            await kube.delete_core("Lease", owner.namespace, name)

    def forget_gone(self, existing: set[str]) -> None:
        """Forget deletions whose pods are gone (``existing``: the UIDs of the pods that exist)."""
        self.deleted &= existing

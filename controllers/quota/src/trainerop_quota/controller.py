"""kopf adapter of the quota controller."""

from typing import Any

import kopf

from trainerop_common.api import QuotaPolicy, Trainer, kind_info
from trainerop_common.cache import Key, ObjectCache
from trainerop_common.clock import rfc3339
from trainerop_common.runtime import Body, Runtime, run_entrypoint
from trainerop_common.status_writer import StatusWriter

from .decide import CONDITION, OWNED_FIELDS, decide


class QuotaController:
    name = "quota"

    def __init__(self, runtime: Runtime) -> None:
        self.rt = runtime
        self.policies = ObjectCache.for_kind(runtime.kube, "QuotaPolicy")
        self.writer = StatusWriter(runtime.kube, kind_info("Trainer"), self.name, OWNED_FIELDS, (CONDITION,))

    def register(self, registry: kopf.OperatorRegistry, runtime: Runtime) -> None:
        self.policies.register(registry, self._policy_changed)

    def _policy_changed(self, key: Key, body: dict[str, Any], deleted: bool) -> None:
        self.rt.requeue(list(self.rt.trainers))

    async def reconcile(self, body: Body) -> None:
        trainer = Trainer.model_validate(body)
        policies = [(p["metadata"]["name"], QuotaPolicy.model_validate(p).spec) for p in await self.policies.values()]
        labels: dict[str, str] = {}
        if any(p.namespace_selector and p.namespace_selector.match_labels for _, p in policies):
            labels = await self.rt.kube.get_namespace_labels(body["metadata"]["namespace"]) or {}
        decision = decide(trainer.spec, policies, labels)
        written = await self.writer.write(body, decision.status, decision.conditions, rfc3339(self.rt.clock.now()))
        if written and decision.problem is not None:
            self.rt.event(body, "Warning", decision.problem.reason, decision.problem.message)


entry = run_entrypoint("quota", QuotaController)

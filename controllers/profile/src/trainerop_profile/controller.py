"""kopf adapter of the profile controller."""

from typing import Any

import kopf

from trainerop_common.api import Trainer, kind_info
from trainerop_common.api.profile import TrainingProfile
from trainerop_common.cache import Key, ObjectCache
from trainerop_common.clock import rfc3339
from trainerop_common.conditions import Desired
from trainerop_common.runtime import Body, Runtime, run_entrypoint
from trainerop_common.status_writer import StatusWriter

from .decide import CONDITION, OWNED_FIELDS, decide

VALID = "Valid"


class ProfileController:
    name = "profile"

    def __init__(self, runtime: Runtime) -> None:
        self.rt = runtime
        self.profiles = ObjectCache.for_kind(runtime.kube, "TrainingProfile")
        self.writer = StatusWriter(runtime.kube, kind_info("Trainer"), self.name, OWNED_FIELDS, (CONDITION,))
        self.profile_writer = StatusWriter(runtime.kube, kind_info("TrainingProfile"), self.name, (), (VALID,))

    def register(self, registry: kopf.OperatorRegistry, runtime: Runtime) -> None:
        self.profiles.register(registry, self._profile_changed)

    def _profile_changed(self, key: Key, body: dict[str, Any], deleted: bool) -> None:
        namespace, name = key
        users = [k for k, t in self.rt.trainers.items() if k[0] == namespace and t["spec"].get("profile") == name]
        self.rt.requeue(users)
        if not deleted:
            self.rt.spawn(self._mark_valid(body))

    async def _mark_valid(self, body: dict[str, Any]) -> None:
        # The API server has validated the schema; the profile is usable as written.
        await self.profile_writer.write(
            body, {}, (Desired.true(VALID, "Accepted", "profile is valid"),), rfc3339(self.rt.clock.now())
        )

    async def reconcile(self, body: Body) -> None:
        trainer = Trainer.model_validate(body)
        meta = body["metadata"]
        namespace = meta["namespace"]
        raw = await self.profiles.get(namespace, trainer.spec.profile) if trainer.spec.profile else None
        profile = TrainingProfile.model_validate(raw).spec if raw is not None else None
        decision = decide(namespace, trainer.spec.profile, profile, int(meta.get("generation", 0)))
        written = await self.writer.write(body, decision.status, decision.conditions, rfc3339(self.rt.clock.now()))
        if written and decision.problem is not None:
            self.rt.event(body, "Warning", decision.problem.reason, decision.problem.message)


entry = run_entrypoint("profile", ProfileController)

"""kopf adapter of the checkpoint controller."""

from typing import Any

import kopf

from trainerop_common.api import Checkpoint, Trainer, kind_info
from trainerop_common.cache import Key, ObjectCache
from trainerop_common.clock import rfc3339
from trainerop_common.runtime import Body, Runtime, run_entrypoint
from trainerop_common.status_writer import StatusWriter

from .decide import CONDITION, OWNED_FIELDS, Named, decide


class CheckpointController:
    name = "checkpoint"

    def __init__(self, runtime: Runtime) -> None:
        self.rt = runtime
        self.checkpoints = ObjectCache.for_kind(runtime.kube, "Checkpoint")
        self.writer = StatusWriter(runtime.kube, kind_info("Trainer"), self.name, OWNED_FIELDS, (CONDITION,))

    def register(self, registry: kopf.OperatorRegistry, runtime: Runtime) -> None:
        self.checkpoints.register(registry, self._checkpoint_changed)

    def _checkpoint_changed(self, key: Key, body: dict[str, Any], deleted: bool) -> None:
        trainer = body.get("spec", {}).get("trainer")
        if trainer:
            self.rt.requeue([(key[0], trainer)])

    async def reconcile(self, body: Body) -> None:
        trainer = Trainer.model_validate(body)
        namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
        mine = [
            Named(c["metadata"]["name"], Checkpoint.model_validate(c))
            for c in await self.checkpoints.values()
            if c["metadata"].get("namespace") == namespace and c.get("spec", {}).get("trainer") == name
        ]
        decision = decide(name, trainer.spec, mine)
        await self.writer.write(body, decision.status, decision.conditions, rfc3339(self.rt.clock.now()))


entry = run_entrypoint("checkpoint", CheckpointController)

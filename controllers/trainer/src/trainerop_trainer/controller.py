"""kopf adapter of the trainer controller: reads the Trainer, calls decide(), writes status."""

from typing import Any

import kopf

from trainerop_common.api import Trainer, kind_info
from trainerop_common.clock import rfc3339
from trainerop_common.conditions import parse
from trainerop_common.runtime import Body, Runtime, run_entrypoint
from trainerop_common.status_writer import StatusWriter

from .decide import CONDITIONS, OWNED_FIELDS, Observed, decide


class TrainerController:
    name = "trainer"

    def __init__(self, runtime: Runtime) -> None:
        self.rt = runtime
        self.writer = StatusWriter(runtime.kube, kind_info("Trainer"), self.name, OWNED_FIELDS, CONDITIONS)

    def register(self, registry: kopf.OperatorRegistry, runtime: Runtime) -> None:
        """Pods and Services are watched once the controller creates them."""

    async def reconcile(self, body: Body) -> None:
        trainer = Trainer.model_validate(body)
        status: dict[str, Any] = dict(body.get("status") or {})
        observed = Observed(
            name=body["metadata"]["name"],
            generation=int(body["metadata"].get("generation", 0)),
            spec=trainer.spec,
            conditions=parse(status.get("conditions")),
            gates=self.rt.config.gate_conditions,
        )
        decision = decide(observed)
        await self.writer.write(body, decision.status, decision.conditions, rfc3339(self.rt.clock.now()))


entry = run_entrypoint("trainer", TrainerController)

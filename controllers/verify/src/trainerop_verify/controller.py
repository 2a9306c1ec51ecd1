"""kopf adapter of the verify controller (docs/image-verification.md)."""

from typing import Any

import kopf

from trainerop_common.api import Trainer, kind_info
from trainerop_common.cache import Key, ObjectCache
from trainerop_common.clock import rfc3339
from trainerop_common.conditions import Desired
from trainerop_common.outcome import Outcome, StatusSection
from trainerop_common.process import run_entrypoint
from trainerop_common.runtime import Body, Runtime
from trainerop_common.signatures import PublicKeyError
from trainerop_common.status_writer import StatusWriter

from .config import VerifyConfig
from .decide import SECTION, Decision, Inspection, Observed, decide, kept_digests, lookups
from .inspection import Inspector, policy_keys
from .policy import Policy, fingerprint, run_images
from .references import parse_mirrors
from .registry import Registry

VALID = "Valid"
RETRY_CAP_SECONDS = 30.0  # a registry back up is seen within this long (the work queue's backoff goes to 300 s)


def namespace_of(obj: Any) -> str:
    return str(obj["metadata"].get("namespace", ""))


class VerifyController:
    name = "verify"
    section = SECTION

    def __init__(self, runtime: Runtime, config: VerifyConfig) -> None:
        self.rt = runtime
        self.config = config
        self.policies = ObjectCache.for_kind(runtime.kube, "ImagePolicy", index=namespace_of)
        self.registry = Registry(config.registry_ca_file, config.registry_timeout_seconds)
        self.inspector = Inspector(self.registry, parse_mirrors(config.registry_mirrors))
        self.policy_writer = StatusWriter(
            runtime.kube, kind_info("ImagePolicy"), self.name, StatusSection((), (VALID,))
        )

    def register(self, registry: kopf.OperatorRegistry, runtime: Runtime) -> None:
        self.policies.register(registry, self._policy_changed)

        @kopf.on.cleanup(registry=registry)
        async def close_registry_client(**_: Any) -> None:
            await self.registry.close()

    def _policy_changed(self, key: Key, body: dict[str, Any], deleted: bool) -> None:
        self.rt.requeue([k for k in self.rt.trainers if k[0] == key[0]])
        if deleted:
            self.policy_writer.forget_object(body)
        else:
            self.rt.spawn(self._mark_valid(body))

    async def _mark_valid(self, body: dict[str, Any]) -> None:
        policy = Policy.of(body)
        try:
            policy_keys(policy)
            condition = Desired.true(VALID, "Accepted", f"{len(policy.keys)} key(s) read")
        except PublicKeyError as err:
            condition = Desired.false(VALID, "InvalidKey", f"{err}; give a PEM public key as cosign.pub holds it")
        await self.policy_writer.write(body, {}, (condition,), rfc3339(self.rt.clock.now()))

    async def reconcile(self, body: Body) -> Outcome:
        trainer = Trainer.model_validate(body)
        generation = int(body["metadata"].get("generation", 0))
        policies = [Policy.of(raw) for raw in await self.policies.grouped(namespace_of(body))]
        applied = fingerprint(policies)
        images = run_images(trainer.spec)
        # The digests the run was let through with, from its own earlier section (a restart keeps
        # them): checked again against today's policies, never resolved again.
        kept = kept_digests(trainer.status.verify if trainer.status else None)
        inspections: dict[str, Inspection] = {}
        for look in lookups(images, policies, kept):
            inspections[look.image] = await self.inspector.inspect(look.ref, look.policies, look.digest)
        decision = decide(Observed(generation, images, policies, inspections, applied, kept))
        return outcome(decision, self.config.recheck_refused_seconds)


def outcome(decision: Decision, recheck: float) -> Outcome:
    warnings = tuple(("Warning", "ImageNotVerified", text) for text in decision.warnings)
    problem = decision.problem
    return Outcome(
        status=decision.status,
        conditions=decision.conditions,
        on_change=(*((("Warning", problem.reason, problem.message),) if problem else ()), *warnings),
        retry=decision.retry,
        requeue_after=RETRY_CAP_SECONDS if decision.retry else recheck if decision.refused else None,
    )


entry = run_entrypoint("verify", VerifyController, VerifyConfig)

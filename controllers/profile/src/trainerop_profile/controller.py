"""kopf adapter of the profile controller."""

import asyncio
from typing import Any

import kopf

from trainerop_common.api import Trainer, kind_info
from trainerop_common.api.profile import TrainingProfile
from trainerop_common.cache import Key, ObjectCache
from trainerop_common.clock import rfc3339
from trainerop_common.conditions import Desired
from trainerop_common.runtime import Body, Runtime, run_entrypoint
from trainerop_common.status_writer import StatusWriter

from .decide import CONDITION, OWNED_FIELDS, FoundProfile, ProfileKind, decide, needed_secrets

VALID = "Valid"
CLUSTER = ""  # the namespace key of cluster-scoped objects in a cache


class SecretCheck:
    """Which Secrets exist, asked of the API server metadata-only and trusted for
    ``--secret-recheck-seconds``, so a burst of reconciles costs one request per Secret (not one
    per Trainer). None: the controller may not get Secrets in that namespace (RBAC is opt-in per
    namespace where a platform wants it so; docs/profile.md)."""

    def __init__(self, runtime: Runtime) -> None:
        self.rt = runtime
        self._seen: dict[Key, tuple[bool | None, float]] = {}
        self._asking: dict[Key, asyncio.Future[bool | None]] = {}  # lookups in flight, shared

    async def exists(self, namespace: str, name: str) -> bool | None:
        key = (namespace, name)
        known = self._seen.get(key)
        if known is not None and self.rt.clock.now().timestamp() - known[1] < self.rt.config.secret_recheck_seconds:
            return known[0]
        if key not in self._asking:
            # Reconciles of many Trainers run at once: the first asks, the others wait for its answer.
            self._asking[key] = asyncio.ensure_future(self._ask(key))
            self._asking[key].add_done_callback(lambda _: self._asking.pop(key, None))
        return await asyncio.shield(self._asking[key])

    async def _ask(self, key: Key) -> bool | None:
        found = await self.rt.kube.secret_exists(*key)
        now = self.rt.clock.now().timestamp()
        if len(self._seen) > 4096:  # forget what is stale anyway, so the map cannot grow without bound
            ttl = self.rt.config.secret_recheck_seconds
            self._seen = {k: v for k, v in self._seen.items() if now - v[1] < ttl}
        self._seen[key] = (found, now)
        return found


class ProfileController:
    name = "profile"

    def __init__(self, runtime: Runtime) -> None:
        self.rt = runtime
        self.profiles = ObjectCache.for_kind(runtime.kube, "TrainingProfile")
        self.cluster_profiles = ObjectCache.for_kind(runtime.kube, "ClusterTrainingProfile")
        self.secrets = SecretCheck(runtime)
        self.writer = StatusWriter(runtime.kube, kind_info("Trainer"), self.name, OWNED_FIELDS, (CONDITION,))
        self.profile_writers = {
            kind: StatusWriter(runtime.kube, kind_info(kind), self.name, (), (VALID,))
            for kind in ("TrainingProfile", "ClusterTrainingProfile")
        }

    def register(self, registry: kopf.OperatorRegistry, runtime: Runtime) -> None:
        self.profiles.register(registry, self._profile_changed)
        self.cluster_profiles.register(registry, self._profile_changed)

    def _profile_changed(self, key: Key, body: dict[str, Any], deleted: bool) -> None:
        namespace, name = key
        # A cluster-wide profile may serve Trainers in every namespace.
        users = [
            k
            for k, t in self.rt.trainers.items()
            if (namespace == CLUSTER or k[0] == namespace) and t["spec"].get("profile") == name
        ]
        self.rt.requeue(users)
        if not deleted:
            self.rt.spawn(self._mark_valid(body))

    async def _mark_valid(self, body: dict[str, Any]) -> None:
        # The API server has validated the schema (CEL included); the profile is usable as written.
        await self.profile_writers[body["kind"]].write(
            body, {}, (Desired.true(VALID, "Accepted", "profile is valid"),), rfc3339(self.rt.clock.now())
        )

    async def _find(self, namespace: str, name: str) -> FoundProfile | None:
        """The namespace's own profile, else the cluster-wide one of that name."""
        kind: ProfileKind
        for kind, cache, ns in (
            ("TrainingProfile", self.profiles, namespace),
            ("ClusterTrainingProfile", self.cluster_profiles, CLUSTER),
        ):
            raw = await cache.get(ns, name)
            if raw is not None:
                spec = TrainingProfile.model_validate(raw).spec
                return FoundProfile(kind, name, int(raw["metadata"].get("generation", 0)), spec)
        return None

    async def reconcile(self, body: Body) -> None:
        trainer = Trainer.model_validate(body)
        meta = body["metadata"]
        namespace = meta["namespace"]
        found = await self._find(namespace, trainer.spec.profile) if trainer.spec.profile else None
        needed = needed_secrets(found.spec, trainer.spec) if found else {}
        secrets = {s: await self.secrets.exists(namespace, s) for s in needed}
        decision = decide(namespace, trainer.spec, int(meta.get("generation", 0)), found, secrets)
        written = await self.writer.write(body, decision.status, decision.conditions, rfc3339(self.rt.clock.now()))
        if written and decision.problem is not None:
            self.rt.event(body, "Warning", decision.problem.reason, decision.problem.message)
        if decision.missing_secrets:
            # Secrets are not watched (that would load every value into memory): look again later.
            self.rt.requeue_after((namespace, meta["name"]), self.rt.config.secret_recheck_seconds)


entry = run_entrypoint("profile", ProfileController)

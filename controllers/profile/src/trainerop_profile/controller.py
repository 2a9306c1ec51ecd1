"""kopf adapter of the profile controller."""

from typing import Any

import kopf

from trainerop_common.admission import Request, Verdict
from trainerop_common.api import Trainer, kind_info
from trainerop_common.api.profile import TrainingProfile
from trainerop_common.cache import Key, ObjectCache
from trainerop_common.clock import age_seconds, rfc3339
from trainerop_common.conditions import Desired
from trainerop_common.contracts import GRANT_RECHECK_SECONDS, awaiting_grant
from trainerop_common.kube import Kube
from trainerop_common.lookup import CachedLookup
from trainerop_common.outcome import Outcome, StatusSection
from trainerop_common.process import run_entrypoint
from trainerop_common.runtime import Body, Runtime
from trainerop_common.status_writer import StatusWriter

from . import admission
from .config import ProfileConfig
from .decide import SECTION, FoundProfile, Observed, ProfileKind, decide, needed_secrets

VALID = "Valid"
CLUSTER = ""  # the namespace key of cluster-scoped objects in a cache


class ProfileController:
    name = "profile"
    section = SECTION

    def __init__(self, runtime: Runtime, config: ProfileConfig) -> None:
        self.rt = runtime
        self.config = config
        self.profiles = ObjectCache.for_kind(runtime.kube, "TrainingProfile")
        self.cluster_profiles = ObjectCache.for_kind(runtime.kube, "ClusterTrainingProfile")
        # Whether a Secret exists (None: the controller may not look in that namespace; RBAC for it
        # is bindable per namespace, docs/profile.md); asked metadata-only, not watched.
        # None is looked at again within a second: the trainer controller grants the right to look
        # in a namespace when it meets the first Trainer there, at the same moment as this one.
        self.secrets: CachedLookup[Key, bool | None] = CachedLookup(
            lambda key: runtime.kube.secret_exists(*key),
            config.secret_recheck_seconds,
            runtime.clock,
            ttl_for=lambda found: config.secret_recheck_seconds if found is not None else GRANT_RECHECK_SECONDS,
        )
        self.profile_writers = {
            kind: StatusWriter(runtime.kube, kind_info(kind), self.name, StatusSection((), (VALID,)))
            for kind in ("TrainingProfile", "ClusterTrainingProfile")
        }

    def register(self, registry: kopf.OperatorRegistry, runtime: Runtime) -> None:
        self.profiles.register(registry, self._profile_changed)
        self.cluster_profiles.register(registry, self._profile_changed)
        runtime.admit(registry, "default-profile", self.default_profile, mutating=True)
        runtime.admit(registry, "validate-profile", self.validate_profile)

    async def default_profile(self, request: Request) -> Verdict:
        if request.operation != "CREATE":
            return Verdict()
        # (past the read's deadline the review fails, and so the request: it is never left undefaulted)
        labels = await self.rt.admission_read(lambda k: k.get_namespace_labels(request.namespace))
        return admission.default_profile(request, labels)

    async def validate_profile(self, request: Request) -> Verdict:
        """Judged on the cached profiles; a refusal is confirmed with a fresh read first (the cache
        of a replica that peering keeps paused is not current)."""
        name = request.spec.get("profile")
        if not name or not request.changed("profile"):
            return Verdict()
        if await self._find(request.namespace, str(name)) is not None:
            return Verdict()

        async def fresh(kube: Kube) -> tuple[bool, dict[str, str]]:
            found = await kube.get("TrainingProfile", str(name), request.namespace) or await kube.get(
                "ClusterTrainingProfile", str(name)
            )
            return found is not None, (await kube.get_namespace_labels(request.namespace) or {})

        try:
            found, labels = await self.rt.admission_read(fresh)
        except TimeoutError:  # the cache's answer stands
            found, labels = False, {}
        return admission.check_profile(request, found, labels.get(admission.DEFAULT_PROFILE_LABEL))

    def _profile_changed(self, key: Key, body: dict[str, Any], deleted: bool) -> None:
        namespace, name = key
        # A cluster-wide profile may serve Trainers in every namespace.
        users = [
            k
            for k, t in self.rt.trainers.items()
            if (namespace == CLUSTER or k[0] == namespace) and t["spec"].get("profile") == name
        ]
        self.rt.requeue(users)
        if deleted:
            self.profile_writers[body["kind"]].forget_object(body)
        else:
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

    async def reconcile(self, body: Body) -> Outcome:
        trainer = Trainer.model_validate(body)
        meta = body["metadata"]
        namespace = meta["namespace"]
        found = await self._find(namespace, trainer.spec.profile) if trainer.spec.profile else None
        needed = needed_secrets(found.spec, trainer.spec) if found else {}
        secrets = {s: await self.secrets.get((namespace, s)) for s in needed}
        if awaiting_grant(None in secrets.values(), age_seconds(body, self.rt.clock.now())):
            return Outcome(requeue_after=GRANT_RECHECK_SECONDS)  # no answer yet: the gate waits
        decision = decide(Observed(namespace, trainer.spec, int(meta.get("generation", 0)), found, secrets))
        # Secrets are not watched (that would load every value into memory): a missing one is looked for again.
        recheck = self.config.secret_recheck_seconds if decision.missing_secrets else None
        return Outcome.warn_on_change(decision.status, decision.conditions, decision.problem, requeue_after=recheck)


entry = run_entrypoint("profile", ProfileController, ProfileConfig, webhooks=True)

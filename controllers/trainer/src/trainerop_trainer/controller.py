"""kopf adapter of the trainer controller: observes the Trainer and its pods, Services, Leases,
claims and nodes, calls decide(), carries the decision out (actions.py) and returns the outcome
(status, Events, when to look again) for the runtime to apply."""

import contextlib
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import kopf
from prometheus_client import Counter
from pydantic import ValidationError

from trainerop_common.admission import Request, Verdict
from trainerop_common.api import Contribution, Trainer
from trainerop_common.api.trainer import TrainerSpec, TrainerStatus
from trainerop_common.cache import Key, ObjectCache
from trainerop_common.clock import age_seconds
from trainerop_common.conditions import parse
from trainerop_common.contracts import CONTRACTS, REPLICA_TYPE_LABEL, TRAINER_NAME_LABEL, TRAINER_UID_LABEL, asks
from trainerop_common.kube import Kube, urgent_requests
from trainerop_common.nodes import readiness
from trainerop_common.objects import labels_only, metadata_only
from trainerop_common.outcome import Outcome, soonest
from trainerop_common.pod_security import level_of, namespace_level
from trainerop_common.process import run_entrypoint
from trainerop_common.runtime import Body, Runtime

from . import admission, creations
from .actions import Actions
from .config import TrainerConfig
from .decide import SECTION, Decision, Observed, decide, held_counts, once_created
from .guard import guard_essentials, guard_view
from .model import ModelSettings
from .pods import CONTRIBUTION_ORDER, Owner, PodSettings, secret_grants
from .policy import recovering
from .spawn import SpawnRecorder
from .views import (
    NodeLoss,
    RestartBackoff,
    lease_view,
    lost_nodes,
    owner_of,
    pod_essentials,
    pod_view,
    progress_only,
    setback,
)

EPOCHS = Counter("training_epochs_total", "Epochs completed, from progress heartbeats.", ["namespace", "trainer"])


def contributions_of(spec: TrainerSpec, status: TrainerStatus) -> dict[str, Contribution]:
    """The pod contributions (docs/design/contributions.md) of the concerns the spec asks, by
    concern (a section left from before spec.profile or spec.checkpoint was removed counts no more)."""
    sections = {c: getattr(status, c) for c in CONTRIBUTION_ORDER if asks(spec, c)}
    return {c: s.contribution for c, s in sections.items() if s is not None and s.contribution is not None}


class TrainerController:
    name = "trainer"
    section = SECTION

    def __init__(self, runtime: Runtime, config: TrainerConfig) -> None:
        self.rt = runtime
        self.config = config

        def children(kind: str, group: str, plural: str, label: str = REPLICA_TYPE_LABEL, **kw: Any) -> ObjectCache:
            """Objects of ``kind`` the controller created (they carry ``label``)."""
            lister = lambda keep: runtime.kube.list_core(kind, label, keep)  # noqa: E731
            return ObjectCache(lister, group, "v1", plural, {label: kopf.PRESENT}, index=owner_of, **kw)

        self.pods = children("Pod", "", "pods", keep=pod_essentials)
        self.services = children("Service", "", "services", TRAINER_UID_LABEL)  # one per Trainer: no role
        self.guards = children(
            "PodDisruptionBudget", "policy", "poddisruptionbudgets", TRAINER_UID_LABEL, keep=guard_essentials
        )
        self.claims = children("PersistentVolumeClaim", "", "persistentvolumeclaims")
        self.leases = children("Lease", "coordination.k8s.io", "leases")
        self.nodes = ObjectCache(runtime.kube.list_nodes, "", "v1", "nodes")
        # Each namespace's Pod Security level: how its training pods are made and judged.
        self.namespaces = ObjectCache(runtime.kube.list_namespaces, "", "v1", "namespaces", keep=labels_only)
        self._levels: dict[str, str] = {}  # namespace -> the level last seen
        model = ModelSettings(image=config.model_init_image, endpoint=config.hf_endpoint)
        self.settings = PodSettings(init_image=config.init_image, model=model)
        self.backoff = RestartBackoff(config.restart_backoff_seconds, config.restart_backoff_cap_seconds)
        operator_namespace = runtime.config.webhook.operator_namespace
        self.actions = Actions(runtime, lambda namespace: secret_grants(namespace, config.gates, operator_namespace))
        self.spawns = SpawnRecorder(runtime.clock)
        self._readiness: dict[str, str | None] = {}  # node -> Ready status last seen

    def register(self, registry: kopf.OperatorRegistry, runtime: Runtime) -> None:
        self.pods.register(registry, self._pod_changed)
        self.services.register(registry, self._child_changed)
        self.guards.register(registry, self._guard_changed)
        self.nodes.register(registry, self._node_changed)
        self.namespaces.register(registry, self._namespace_changed)
        self.leases.register(registry, self._child_changed)
        self.claims.register(registry, self._child_changed)
        runtime.admit(registry, "validate-trainer", self.admit)
        runtime.admit_creations(registry, "validate-creations", creations.CREATED, self.admit_creation)

    async def admit(self, request: Request) -> Verdict:
        """The validating webhook: node fit when the resources are new, overrides by the namespace's
        Pod Security level, judged on the cached nodes and namespace and confirmed on the API
        server's before refusing; unused overrides pointed out."""
        try:
            spec = TrainerSpec.model_validate(request.spec)
        except ValidationError as err:  # the API server's schema passed it: a newer API than ours
            return Verdict(warnings=(f"the trainer controller does not understand this spec yet: {err}",))
        judge_fit = self.config.admission_node_fit and request.changed("resources")
        cached = await self.namespaces.get("", request.namespace)
        nodes = await self.nodes.values() if judge_fit else None
        verdict = admission.validate(request, spec, nodes, namespace_level(cached))
        if verdict.allowed:  # (a namespace not seen yet is judged as restricted, the strictest)
            return verdict
        with contextlib.suppress(TimeoutError):  # past it, the cached verdict stands
            nodes, level = await self.rt.admission_read(lambda k: self._fresh(k, request))
            verdict = admission.validate(request, spec, nodes, level)
        return verdict

    async def _fresh(self, kube: Kube, request: Request) -> tuple[list[dict[str, Any]] | None, str]:
        """The nodes (when node fit is judged) and the namespace's level, as the API server has them."""
        judge_fit = self.config.admission_node_fit and request.changed("resources")
        nodes = await kube.list_nodes() if judge_fit else None
        return nodes, level_of(await kube.get_namespace_labels(request.namespace))

    async def admit_creation(self, resource: str, obj: Mapping[str, Any]) -> Verdict:
        """The webhook on what this controller's identity creates (creations.py): judged on the
        Trainers the watch holds, and confirmed on the API server's before refusing (a replica
        that does not reconcile, or a Trainer newer than the watch)."""
        namespace = str((obj.get("metadata") or {}).get("namespace") or "")
        ref = creations.trainer_owner(obj)
        name = str(ref.get("name") or "") if ref else ""
        cached = self.rt.trainers  # the home loop's: one get, and a copy of its keys made at once
        owner = cached.get((namespace, name)) if ref else None
        holds = ref is not None or any(ns == namespace for ns, _ in list(cached))
        problems = creations.creation_problems(resource, obj, owner, holds)
        if problems:
            with contextlib.suppress(TimeoutError):  # past it, the cached verdict stands
                owner, holds = await self.rt.admission_read(lambda k: self._trainers_for(k, namespace, name))
                problems = creations.creation_problems(resource, obj, owner, holds)
        if not problems and resource == "pods" and creations.priority(obj) > 0:
            problems = await self._priority_problems(obj)
        return Verdict(problems=problems)

    async def _priority_problems(self, obj: Mapping[str, Any]) -> tuple[str, ...]:
        """A pod above priority 0 may have at most the cluster's default priority (read from the
        API server: only where a pod is above 0)."""
        try:
            default = await self.rt.admission_read(self._default_priority)
        except TimeoutError:
            return ("the cluster's PriorityClasses could not be read in time to judge the pod's priority",)
        return creations.priority_problems(obj, default)

    @staticmethod
    async def _default_priority(kube: Kube) -> int:
        """The value of the PriorityClass marked globalDefault (0: none is)."""
        classes = await kube.list_all("PriorityClass")
        return next((int(c.get("value") or 0) for c in classes if c.get("globalDefault")), 0)

    @staticmethod
    async def _trainers_for(kube: Kube, namespace: str, name: str) -> tuple[dict[str, Any] | None, bool]:
        """The Trainer ``name`` of ``namespace`` (no name: none) and whether the namespace holds any."""
        if name:
            owner = await kube.get("Trainer", name, namespace)
            return owner, owner is not None
        return None, bool(await kube.list_in("Trainer", namespace, metadata_only))

    def _node_changed(self, key: Key, body: dict[str, Any], deleted: bool) -> None:
        """Reconcile the Trainers with pods on a node that went away or changed readiness (not on
        every heartbeat of every node)."""
        node = body["metadata"]["name"]
        ready = None if deleted else readiness(body).ready
        if self._readiness.get(node, "new") == ready:
            return
        if deleted:
            self._readiness.pop(node, None)
        else:
            self._readiness[node] = ready
        owners = {owner_of(p) for p in self.pods.items.values() if (p.get("spec") or {}).get("nodeName") == node}
        requeue = self.rt.requeue_urgently if deleted else self.rt.requeue  # a node gone is lost at once
        requeue([k for k in owners if k in self.rt.trainers])

    def _namespace_changed(self, key: Key, body: dict[str, Any], deleted: bool) -> None:
        """A namespace relabelled to another Pod Security level: its Trainers are judged again (one
        held by an override the old level refused may now go on; new pods follow the new level)."""
        name = body["metadata"]["name"]
        level = namespace_level(body)
        before = self._levels.pop(name, level)
        if deleted:
            return
        self._levels[name] = level
        if before != level:
            self.rt.requeue([k for k in list(self.rt.trainers) if k[0] == name])

    def _pod_changed(self, key: Key, body: dict[str, Any], deleted: bool) -> None:
        if body.get("metadata", {}).get("uid") not in self.actions.removed:  # not its replacement's news
            self.actions.delivered(key, owner_of(body)[1])
        if deleted:
            self.spawns.forget(body.get("metadata", {}).get("uid", ""))
            return self._recover(owner_of(body))  # its replacement waited for it to go
        trainer = self.rt.trainers.get(owner_of(body)) or {}
        contract = CONTRACTS.get(trainer.get("spec", {}).get("framework", "generic"))
        if contract is not None:
            self.spawns.observe(body, contract.container)
        view = pod_view(body, contract.container) if contract is not None else None
        if setback(view):
            return self._recover(owner_of(body))
        progressed = progress_only(view)
        self._child_changed(key, body, deleted, self.config.progress_coalesce_seconds if progressed else 0)

    def _recover(self, owner: Key) -> None:
        """A pod of this Trainer failed or went: reconcile it ahead of those waiting for a turn."""
        if owner in self.rt.trainers:
            self.rt.requeue_urgently([owner])

    def _child_changed(self, key: Key, body: dict[str, Any], deleted: bool, within: float = 0) -> None:
        # Deletions matter most: a replacement can only be created once its predecessor is gone.
        trainer = (body.get("metadata", {}).get("labels") or {}).get(TRAINER_NAME_LABEL)
        if trainer and (key[0], trainer) in self.rt.trainers:
            self.rt.requeue([(key[0], trainer)], within)

    def _guard_changed(self, key: Key, body: dict[str, Any], deleted: bool) -> None:
        """A drain guard deleted is made again; its status (which the disruption controller
        rewrites as the pods come and go) is not read."""
        if deleted:
            self._child_changed(key, body, deleted)

    def _cached_uid(self, key: Key) -> str | None:
        """The UID of the pod the cache holds under ``key``, None without one."""
        pod = self.pods.items.get(key)
        return None if pod is None else pod["metadata"].get("uid")

    async def _children(self, cache: ObjectCache, owner: Owner) -> list[dict[str, Any]]:
        return [
            o
            for o in await cache.grouped((owner.namespace, owner.name))
            if any(ref.get("uid") == owner.uid for ref in o["metadata"].get("ownerReferences") or ())
        ]

    async def _observe(self, body: Body, trainer: Trainer) -> tuple[Observed, NodeLoss]:
        meta = body["metadata"]
        owner = Owner(meta["name"], meta["namespace"], meta["uid"], int(meta.get("generation", 0)))
        services = frozenset(s["metadata"]["name"] for s in await self._children(self.services, owner))
        owner = replace(owner, per_replica_services=bool(services - {owner.name}))
        status = trainer.status or TrainerStatus()
        container = CONTRACTS[trainer.spec.framework].container
        # A pod the API server removed on its delete is gone, whatever the watch has not said yet.
        removed = self.actions.removed
        cached = [p for p in await self._children(self.pods, owner) if p["metadata"].get("uid") not in removed]
        created = self.actions.expected_pods(owner, {p["metadata"]["name"] for p in cached})  # not seen yet
        pods = [v for p in [*cached, *created] if (v := pod_view(p, container)) is not None]
        pods = [replace(v, deleting=True) if v.uid in self.actions.deleted else v for v in pods]
        now = self.rt.clock.now()
        on = {v.node for v in pods if v.node}  # only these nodes' readiness matters to the run
        found = [n for n in [await self.nodes.get("", name) for name in on] if n is not None]
        loss = lost_nodes([readiness(n) for n in found], on, now, self.config.node_lost_seconds)
        observed = Observed(
            owner=owner,
            spec=trainer.spec,
            status=status,
            conditions=parse((body.get("status") or {}).get("conditions")),
            gates=self.config.gates_for(trainer.spec),
            now=now,
            lost_nodes=loss.lost,
            deleted_nodes=loss.deleted,
            force_unreachable=self.config.force_delete_unreachable,
            leases={v.name: v for v in map(lease_view, await self._children(self.leases, owner))},
            claims=frozenset(c["metadata"]["name"] for c in await self._children(self.claims, owner)),
            guard=guard_view(await self._children(self.guards, owner), owner.name),
            cordoned=frozenset(n["metadata"]["name"] for n in found if (n.get("spec") or {}).get("unschedulable")),
            age=age_seconds(body, now),
            gates_grace=self.config.gates_grace_seconds,
            pod_security=await self._level(owner.namespace),
            pods=pods,
            services=services,
            contributions=contributions_of(trainer.spec, status),
            settings=self.settings,
            backoff=self.backoff,
        )
        return observed, loss

    async def _level(self, namespace: str) -> str:
        """The namespace's Pod Security level: the watch's, or the API server's for a namespace the
        watch has not brought yet (a Trainer created with its namespace)."""
        cached = await self.namespaces.get("", namespace)
        if cached is not None:
            return namespace_level(cached)
        return level_of(await self.rt.kube.get_namespace_labels(namespace))

    async def reconcile(self, body: Body) -> Outcome:
        assert self.rt.writer is not None
        if self.rt.writer.is_stale(body) or self.actions.namespace_going(body["metadata"]["namespace"]):
            # Older than our own last write: acting on its status could count a restart the
            # write guard then drops. The event of our write follows. (Or its namespace is
            # being deleted, and the Trainer with it: nothing to do.)
            return Outcome()
        obs, loss = await self._observe(body, Trainer.model_validate(body))
        decision = decide(obs)
        urgent = recovering(obs.status, bool(decision.create_pods or decision.delete_pods))
        with urgent_requests(urgent):
            carried = await self.actions.carry_out(body, obs.owner, decision, obs.pods)
        if self.actions.namespace_going(obs.owner.namespace):
            return Outcome()
        # Pods it created are expected until the watch delivers them: look again when that ends (a
        # sooner timer fires first and must not take this one's place).
        expecting = self.actions.next_lapse(obs.owner)
        if carried.pods_created:  # every pod it asked for exists: the status says so in this write
            decision = once_created(obs, decision)
        since = self.rt.writer.since_written(obs.owner.namespace, obs.owner.name)
        decision = held_counts(obs, body.get("status") or {}, decision, since, self.config.status_counts_seconds)
        self._count_epochs(obs, decision)
        if self.actions.deleted:  # forget deletions whose pods are gone (a lookup per deleted pod)
            self.actions.forget_gone(self._cached_uid)
        if decision.delete_trainer:
            self.rt.event(body, "Normal", "TTLExpired", "spec.runPolicy.ttlSecondsAfterFinished has passed; deleting")
            await self.rt.kube.delete("Trainer", obs.owner.name, obs.owner.namespace)
            return Outcome(events=decision.events)

        async def replace_failed() -> None:  # once the status counts the failures
            await self.actions.replace_failed(obs.owner, decision, obs.pods)

        return Outcome(
            status=decision.status if decision.write_status else None,
            conditions=decision.conditions,
            events=decision.events,
            on_change=decision.on_change,
            requeue_after=soonest(decision.requeue_after, loss.next_check, expecting),
            retry=carried.refused,
            after=replace_failed if decision.restarted else None,
            urgent=urgent,
        )

    @staticmethod
    def _count_epochs(obs: Observed, decision: Decision) -> None:
        before = obs.status.progress.epoch if obs.status.progress else 0
        after = int(decision.status.get("progress", {}).get("epoch", before))
        if after > before:
            EPOCHS.labels(obs.owner.namespace, obs.owner.name).inc(after - before)


entry = run_entrypoint("trainer", TrainerController, TrainerConfig, webhooks=True)

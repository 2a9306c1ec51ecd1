"""kopf adapter of the trainer controller: observe the Trainer and its pods and Services, call
decide(), carry out the decision (Services, then pods, then deletions), write status."""

import contextlib
from collections.abc import Mapping
from typing import Any

import kopf
from lightkube import ApiError
from prometheus_client import Counter, Histogram
from pydantic import ValidationError

from trainerop_common.admission import Request, Verdict
from trainerop_common.api import Contribution, Trainer, kind_info
from trainerop_common.api.trainer import TrainerSpec, TrainerStatus
from trainerop_common.cache import Key, ObjectCache
from trainerop_common.clock import rfc3339
from trainerop_common.conditions import parse
from trainerop_common.contracts import ADMISSION_ANNOTATION, NODE_ANNOTATION
from trainerop_common.runtime import Body, Runtime, run_entrypoint
from trainerop_common.status_writer import StatusWriter
from trainerop_common.tracing import record_span

from . import admission
from .decide import (
    CONDITIONS,
    OWNED_FIELDS,
    LeaseView,
    NodeView,
    Observed,
    PodView,
    RestartBackoff,
    decide,
    lost_nodes,
)
from .pods import INDEX_LABEL, NAME_LABEL, TYPE_LABEL, Owner, PodSettings, spawn_of
from .topology import CONTRACTS, ROLES

EPOCH_ANNOTATION = "trainer.operator.kubeflow.org/epoch"  # written by trainerop_sdk.heartbeat
STEP_ANNOTATION = "trainer.operator.kubeflow.org/step"
EPOCHS = Counter("training_epochs_total", "Epochs completed, from progress heartbeats.", ["namespace", "trainer"])
PODS_CREATED = Counter("trainer_pods_created_total", "Training pods created.", ["role"])
RESTARTS = Counter("trainer_worker_restarts_total", "Pods replaced after a retryable failure.", ["role"])
SPAWN_FRESH_SECONDS = 120.0  # a pod first seen running later than this after its start is not recorded
SPAWN_SECONDS = Histogram(
    "trainer_pod_spawn_seconds",
    "From a training pod's creation to its node (scheduled) and to its training container running (running).",
    ["stage"],
    buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800),
)


def pod_view(body: dict[str, Any], container: str) -> PodView | None:
    """The decision's view of a pod; exit code and start come from the training container
    ``container`` (a sidecar's exit must not decide whether the run is retried)."""
    meta, status = body.get("metadata", {}), body.get("status") or {}
    labels = meta.get("labels") or {}
    role = labels.get(TYPE_LABEL)
    if role not in ROLES:
        return None
    statuses = status.get("containerStatuses") or ()
    main = next((c for c in statuses if c.get("name") == container), statuses[0] if statuses else {})
    state = main.get("state") or {}
    terminated = state.get("terminated")
    # The stall clock starts when the training container starts, not when the pod was accepted
    # (image pulls and the rendezvous wait come before).
    started = (state.get("running") or {}).get("startedAt") or (terminated or {}).get("startedAt")
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or ())
    return PodView(
        name=meta["name"],
        uid=meta.get("uid", ""),
        role=role,
        index=int(labels.get(INDEX_LABEL, "0")),
        phase=status.get("phase") or "Pending",
        ready=ready,
        deleting=bool(meta.get("deletionTimestamp")),
        exit_code=terminated.get("exitCode") if terminated else None,
        reason=(terminated or {}).get("reason") or status.get("reason") or "",
        node=(body.get("spec") or {}).get("nodeName") or "",
        started=started,
        admission=(meta.get("annotations") or {}).get(ADMISSION_ANNOTATION, ""),
        pinned=(meta.get("annotations") or {}).get(NODE_ANNOTATION, ""),
    )


def owner_of(obj: Mapping[str, Any]) -> tuple[str, str]:
    """The (namespace, Trainer name) a child belongs to, from its trainer-name label."""
    meta = obj.get("metadata", {})
    return (str(meta.get("namespace", "")), str((meta.get("labels") or {}).get(NAME_LABEL, "")))


def lease_view(body: dict[str, Any]) -> LeaseView:
    annotations = body["metadata"].get("annotations") or {}

    def number(key: str) -> int:
        value = str(annotations.get(key, "0"))
        return int(value) if value.isdigit() else 0

    return LeaseView(
        name=body["metadata"]["name"],
        renew_time=(body.get("spec") or {}).get("renewTime"),
        epoch=number(EPOCH_ANNOTATION),
        step=number(STEP_ANNOTATION),
    )


def node_view(body: dict[str, Any]) -> NodeView:
    conditions = (body.get("status") or {}).get("conditions") or ()
    ready: dict[str, Any] = next((c for c in conditions if c.get("type") == "Ready"), {})
    return NodeView(body["metadata"]["name"], ready.get("status", "Unknown"), ready.get("lastTransitionTime"))


class TrainerController:
    name = "trainer"

    def __init__(self, runtime: Runtime) -> None:
        self.rt = runtime
        self.writer = StatusWriter(runtime.kube, kind_info("Trainer"), self.name, OWNED_FIELDS, CONDITIONS)

        def children(kind: str, group: str, plural: str) -> ObjectCache:
            """Objects of ``kind`` the controller created (they carry the replica-type label)."""
            return ObjectCache(
                lambda: runtime.kube.list_core(kind, TYPE_LABEL),
                group,
                "v1",
                plural,
                {TYPE_LABEL: kopf.PRESENT},
                index=owner_of,
            )

        self.pods = children("Pod", "", "pods")
        self.services = children("Service", "", "services")
        self.claims = children("PersistentVolumeClaim", "", "persistentvolumeclaims")
        self.leases = children("Lease", "coordination.k8s.io", "leases")
        self.nodes = ObjectCache(runtime.kube.list_nodes, "", "v1", "nodes")
        self.settings = PodSettings(init_image=runtime.config.init_image)
        self.backoff = RestartBackoff(
            runtime.config.restart_backoff_seconds, runtime.config.restart_backoff_cap_seconds
        )
        # UIDs of pods this process deleted: treated as going away until the watch says so, so a
        # stale event cannot make one failure count twice.
        self._deleted: set[str] = set()
        self._readiness: dict[str, str | None] = {}  # node -> Ready status last seen
        self._spawned: set[str] = set()  # UIDs of pods whose spawn latency is recorded
        self._since = runtime.clock.now()
        self._runners: dict[tuple[str, str, str], frozenset[str]] = {}  # Trainer -> Leases its Role covers

    def register(self, registry: kopf.OperatorRegistry, runtime: Runtime) -> None:
        self.pods.register(registry, self._pod_changed)
        self.services.register(registry, self._child_changed)
        self.nodes.register(registry, self._node_changed)
        self.leases.register(registry, self._child_changed)
        self.claims.register(registry, self._child_changed)
        runtime.admit(registry, "validate-trainer", self.admit)

    async def admit(self, request: Request) -> Verdict:
        """The validating webhook: topology for the framework; node fit when the resources are
        new, judged on the cached nodes and confirmed on a fresh list before refusing."""
        try:
            spec = TrainerSpec.model_validate(request.spec)
        except ValidationError as err:  # the API server's schema passed it: a newer API than ours
            return Verdict(warnings=(f"the trainer controller does not understand this spec yet: {err}",))
        judge_fit = self.rt.config.admission_node_fit and request.changed("resources")
        verdict = admission.validate(request, spec, await self.nodes.values() if judge_fit else None)
        if judge_fit and not verdict.allowed:
            with contextlib.suppress(TimeoutError):  # past it, the cached nodes' verdict stands
                verdict = admission.validate(request, spec, await self.rt.admission_read(lambda k: k.list_nodes()))
        return verdict

    def _node_changed(self, key: Key, body: dict[str, Any], deleted: bool) -> None:
        """Reconcile the Trainers with pods on a node that went away or changed readiness (not on
        every heartbeat of every node)."""
        node = body["metadata"]["name"]
        readiness = None if deleted else node_view(body).ready
        if self._readiness.get(node, "new") == readiness:
            return
        if deleted:
            self._readiness.pop(node, None)
        else:
            self._readiness[node] = readiness
        owners = {owner_of(p) for p in self.pods.items.values() if (p.get("spec") or {}).get("nodeName") == node}
        self.rt.requeue([k for k in owners if k in self.rt.trainers])

    def _pod_changed(self, key: Key, body: dict[str, Any], deleted: bool) -> None:
        uid = body.get("metadata", {}).get("uid", "")
        if deleted:
            self._spawned.discard(uid)
        elif uid not in self._spawned:
            self._record_spawn(key[0], uid, body)
        self._child_changed(key, body, deleted)

    def _record_spawn(self, namespace: str, uid: str, body: dict[str, Any]) -> None:
        """Once per pod, when its training container first runs: the pod spawn latency as a span
        (creation → running, with the moment it was scheduled) and histogram samples."""
        trainer = self.rt.trainers.get((namespace, (body["metadata"].get("labels") or {}).get(NAME_LABEL, "")))
        framework = (trainer or {}).get("spec", {}).get("framework", "generic")
        spawn = spawn_of(body, CONTRACTS[framework].container) if framework in CONTRACTS else None
        if spawn is None:
            return
        self._spawned.add(uid)
        if spawn.started < self._since or (self.rt.clock.now() - spawn.started).total_seconds() > SPAWN_FRESH_SECONDS:
            return  # started before this process, or long ago (a standby taking over): recorded before
        if spawn.scheduled is not None:
            SPAWN_SECONDS.labels("scheduled").observe(max(0.0, (spawn.scheduled - spawn.created).total_seconds()))
        SPAWN_SECONDS.labels("running").observe(max(0.0, (spawn.started - spawn.created).total_seconds()))
        labels = body["metadata"].get("labels") or {}
        record_span(
            "pod.spawn",
            spawn.created,
            spawn.started,
            {
                "k8s.namespace.name": namespace,
                "k8s.pod.name": body["metadata"]["name"],
                "trainer_operator.trainer": labels.get(NAME_LABEL, ""),
                "trainer_operator.role": labels.get(TYPE_LABEL, ""),
            },
            {"scheduled": spawn.scheduled} if spawn.scheduled else None,
        )

    def _child_changed(self, key: Key, body: dict[str, Any], deleted: bool) -> None:
        # Deletions matter most: a replacement can only be created once its predecessor is gone.
        trainer = (body.get("metadata", {}).get("labels") or {}).get(NAME_LABEL)
        if trainer and (key[0], trainer) in self.rt.trainers:
            self.rt.requeue([(key[0], trainer)])

    async def _children(self, cache: ObjectCache, namespace: str, trainer: str, uid: str) -> list[dict[str, Any]]:
        return [
            o
            for o in await cache.grouped((namespace, trainer))
            if any(ref.get("uid") == uid for ref in o["metadata"].get("ownerReferences") or ())
        ]

    async def reconcile(self, body: Body) -> None:
        if self.writer.is_stale(body):
            # Older than our own last write: acting on its status could count a restart the
            # write guard then drops. The event of our write follows.
            return
        trainer = Trainer.model_validate(body)
        meta = body["metadata"]
        owner = Owner(meta["name"], meta["namespace"], meta["uid"], int(meta.get("generation", 0)))
        status = TrainerStatus.model_validate(body.get("status") or {})
        views = [
            v
            for p in await self._children(self.pods, owner.namespace, owner.name, owner.uid)
            if (v := pod_view(p, CONTRACTS[trainer.spec.framework].container)) is not None
        ]
        views = [PodView(**{**v.__dict__, "deleting": True}) if v.uid in self._deleted else v for v in views]
        services = {
            s["metadata"]["name"] for s in await self._children(self.services, owner.namespace, owner.name, owner.uid)
        }
        leases = {
            lease.name: lease
            for lease in map(lease_view, await self._children(self.leases, owner.namespace, owner.name, owner.uid))
        }
        now = self.rt.clock.now()
        nodes = [node_view(n) for n in await self.nodes.values()]
        loss = lost_nodes(nodes, {v.node for v in views if v.node}, now, self.rt.config.node_lost_seconds)
        contributions: dict[str, Contribution] = {}
        for concern, section in (
            ("profile", status.profile),
            ("quota", status.quota),
            ("checkpoint", status.checkpoint),
        ):
            if section is not None and section.contribution is not None:
                contributions[concern] = section.contribution
        decision = decide(
            Observed(
                owner=owner,
                spec=trainer.spec,
                status=status,
                conditions=parse((body.get("status") or {}).get("conditions")),
                gates=self.rt.config.gate_conditions,
                now=now,
                lost_nodes=loss.lost,
                leases=leases,
                claims=frozenset(
                    c["metadata"]["name"]
                    for c in await self._children(self.claims, owner.namespace, owner.name, owner.uid)
                ),
                pods=views,
                services=frozenset(services),
                contributions=contributions,
                settings=self.settings,
                backoff=self.backoff,
            )
        )
        kube = self.rt.kube
        refused: list[ApiError] = []

        async def create(obj: dict[str, Any]) -> bool:
            """Create one object; a refusal (quota, admission, invalid override) is reported and
            the rest of the decision still carried out, then retried with backoff."""
            try:
                return await kube.create_core(obj)
            except ApiError as err:
                if err.status.code is not None and err.status.code >= 500:
                    raise
                if "is being terminated" in (err.status.message or ""):
                    return False  # its namespace is going, and the Trainer with it: nothing to retry
                refused.append(err)
                kind, name = obj["kind"], obj["metadata"]["name"]
                self.rt.event(body, "Warning", "CreateRefused", f"{kind} {name} was refused: {err.status.message}")
                return False

        # The runner identity is applied once per Trainer and again only when its Leases change
        # (a scale); a replacement pod does not pay three extra requests.
        runner_key = (owner.namespace, owner.name, owner.uid)
        leases_named = frozenset(
            name for obj in decision.runner if obj["kind"] == "Role" for name in obj["rules"][0]["resourceNames"]
        )
        if decision.runner and self._runners.get(runner_key) != leases_named:
            for obj in decision.runner:
                await kube.apply_core(obj)
            self._runners[runner_key] = leases_named
        for lease in decision.create_leases:
            await create(lease)
        for claim in decision.create_claims:
            await create(claim)
        for service in decision.create_services:
            await create(service)
        created = []
        for pod in decision.create_pods:
            if await create(pod):
                PODS_CREATED.labels(pod["metadata"]["labels"][TYPE_LABEL]).inc()
                created.append(pod["metadata"]["name"])
        if created:
            self.rt.event(body, "Normal", "CreatedPods", "created " + ", ".join(created))
        by_name = {v.name: v for v in views}
        for name in decision.delete_pods:
            force = name in decision.force_delete
            await kube.delete_core("Pod", owner.namespace, name, force=force)
            if name in by_name:  # gone already (404) counts as deleted too: never count it twice
                self._deleted.add(by_name[name].uid)
        for name in set(decision.force_delete) - set(decision.delete_pods):
            await kube.delete_core("Pod", owner.namespace, name, force=True)
        for name in decision.restarted:
            RESTARTS.labels(by_name[name].role if name in by_name else "unknown").inc()
        for name in decision.delete_services:
            await kube.delete_core("Service", owner.namespace, name)
        for name in decision.delete_leases:
            await kube.delete_core("Lease", owner.namespace, name)
        before = status.progress.epoch if status.progress else 0
        after = int(decision.status.get("progress", {}).get("epoch", before))
        if after > before:
            EPOCHS.labels(owner.namespace, owner.name).inc(after - before)
        for type_, reason, message in decision.events:
            self.rt.event(body, type_, reason, message)
        await self.writer.write(body, decision.status, decision.conditions, rfc3339(self.rt.clock.now()))
        if refused:
            raise refused[0]  # the runtime retries with backoff; the Event said why
        key = (owner.namespace, owner.name)
        if decision.delete_trainer:
            self.rt.event(body, "Normal", "TTLExpired", "spec.runPolicy.ttlSecondsAfterFinished has passed; deleting")
            await kube.delete("Trainer", owner.name, owner.namespace)
        else:
            due = [d for d in (decision.requeue_after, loss.next_check) if d is not None]
            if due:
                self.rt.requeue_after(key, min(due))
        if self._deleted:  # forget deletions whose pods are gone (a scan of every cached pod: only when needed)
            self._deleted &= {p["metadata"].get("uid") for p in self.pods.items.values()}


entry = run_entrypoint("trainer", TrainerController)

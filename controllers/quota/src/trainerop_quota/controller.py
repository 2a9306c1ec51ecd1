"""kopf adapter of the quota controller.

Admission is decided for every Trainer at once (``decide.plan``) under one lock, so two
reconciles never admit against the same free capacity. Whatever event comes (a Trainer, a
policy, a node, a pod placed or finished), the controller plans again and writes only the
Trainers whose quota section or condition changes. What it wrote last is kept in memory until the
watch shows it, so a plan never works from a status older than its own last write; after a
restart everything is read back from the Trainers' status (nothing else is kept).
"""

import asyncio
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import kopf
from lightkube import ApiError
from prometheus_client import Gauge, Histogram
from pydantic import ValidationError

from trainerop_common.admission import Request
from trainerop_common.admission import Verdict as Admission
from trainerop_common.api import QuotaPolicy, Trainer, kind_info
from trainerop_common.api.trainer import QuotaStatus, TrainerSpec, TrainerStatus
from trainerop_common.cache import Key, ObjectCache
from trainerop_common.clock import parse_time, rfc3339
from trainerop_common.conditions import Desired, parse
from trainerop_common.contracts import (
    ADMISSION_ANNOTATION,
    REPLICA_INDEX_LABEL,
    REPLICA_TYPE_LABEL,
    TRAINER_UID_LABEL,
)
from trainerop_common.kube import Kube
from trainerop_common.quantity import parse_quantity
from trainerop_common.runtime import Body, Runtime, run_entrypoint
from trainerop_common.status_writer import StatusWriter
from trainerop_common.tracing import record_span

from . import admission
from .capacity import RECLAIM_TAINTS, NodeInfo, PodInfo, capacity_type, pod_requests, quantity_text
from .decide import CONDITION, OWNED_FIELDS, Plan, PolicyInfo, TrainerInfo, Verdict, World, plan, policy_for

ADMITTED = Gauge("quota_admitted_trainers", "Trainers holding a quota admission, by capacity type.", ["capacity_type"])
PENDING = Gauge("quota_pending_trainers", "Trainers under a QuotaPolicy waiting for an admission.")
RENEGOTIATION_SECONDS = Histogram(
    "quota_renegotiation_seconds",
    "From a spot reclaim under an admitted run (notice taint, lost node) to its new admission or revocation.",
    buckets=(0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800),
)
PLAN_SECONDS = Histogram(
    "quota_plan_seconds",
    "Time one admission plan over every Trainer took.",
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)
COST_PER_HOUR = Gauge(
    "quota_cost_per_hour",
    "Estimated cost per hour of the admitted runs at the policy's prices (basis=admitted), and of the "
    "same resources all on-demand (basis=on_demand).",
    ["namespace", "basis"],
)
POLICY_FIELDS = ("admittedTrainers", "pendingTrainers", "used")
RETRY_SECONDS = 5.0
MAX_RETRY_SECONDS = 300.0
log = logging.getLogger("trainerop.quota")


def node_info(body: Mapping[str, Any], now: datetime, grace: float) -> tuple[NodeInfo, float | None]:
    """The node as the plan sees it, and the seconds until a NotReady node counts as lost."""
    meta, spec, status = body["metadata"], body.get("spec") or {}, body.get("status") or {}
    name = meta["name"]
    labels = meta.get("labels") or {}
    ready: dict[str, Any] = next((c for c in status.get("conditions") or () if c.get("type") == "Ready"), {})
    taint = next((t["key"] for t in spec.get("taints") or () if t.get("key") in RECLAIM_TAINTS), None)
    lost, wait = None, None
    if ready and ready.get("status") != "True" and ready.get("lastTransitionTime"):
        left = grace - (now - parse_time(ready["lastTransitionTime"])).total_seconds()
        if left <= 0:
            lost = f"node {name} has been NotReady since {ready['lastTransitionTime']}"
        else:
            wait = left
    info = NodeInfo(
        name=name,
        kind=capacity_type(labels),
        allocatable={k: parse_quantity_or_zero(v) for k, v in (status.get("allocatable") or {}).items()},
        labels=labels,
        schedulable=ready.get("status") == "True" and not spec.get("unschedulable") and taint is None,
        lost=lost,
        reclaimed=f"node {name} is being reclaimed ({taint} taint)" if taint else None,
    )
    return info, wait


def parse_quantity_or_zero(value: Any) -> Decimal:
    try:
        return parse_quantity(value)
    except ValueError:
        return Decimal(0)


def pod_info(body: Mapping[str, Any]) -> PodInfo | None:
    """A pod that holds resources, or one that succeeded (its replica is done); None for a failed one."""
    phase = (body.get("status") or {}).get("phase")
    if phase == "Failed":
        return None
    meta = body["metadata"]
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    return PodInfo(
        node=(body.get("spec") or {}).get("nodeName") or "",
        requests=pod_requests(body),
        trainer_uid=labels.get(TRAINER_UID_LABEL),
        role=labels.get(REPLICA_TYPE_LABEL, ""),
        index=int(index) if (index := str(labels.get(REPLICA_INDEX_LABEL, "0"))).isdigit() else 0,
        admission=annotations.get(ADMISSION_ANNOTATION),
        deleting=bool(meta.get("deletionTimestamp")),
        succeeded=phase == "Succeeded",
    )


def record_renegotiation(body: Mapping[str, Any], verdict: Verdict, now: datetime) -> None:
    """The span ``quota.renegotiation``: from the reclaim notice (or the loss) to this decision."""
    seconds = verdict.renegotiation_seconds or 0.0
    quota = verdict.quota
    record_span(
        "quota.renegotiation",
        now - timedelta(seconds=seconds),
        now,
        {
            "k8s.namespace.name": body["metadata"]["namespace"],
            "trainer.name": body["metadata"]["name"],
            "quota.outcome": verdict.condition.reason,
            "quota.capacity_type": str(quota.get("capacityType") or ""),
            "quota.workers": int(quota.get("workers") or 0),
        },
    )


def pod_fingerprint(body: Mapping[str, Any]) -> str:
    """What of a pod matters to admission: where it runs, whether it finished, whether it goes."""
    return json.dumps(
        [
            (body.get("spec") or {}).get("nodeName") or "",
            (body.get("status") or {}).get("phase") in ("Succeeded", "Failed"),
            (body.get("status") or {}).get("phase") == "Succeeded",
            bool(body.get("metadata", {}).get("deletionTimestamp")),
        ]
    )


def node_fingerprint(body: Mapping[str, Any]) -> str:
    """Labels, allocatable, readiness (not heartbeats), cordon and taints."""
    status, spec = body.get("status") or {}, body.get("spec") or {}
    ready = [
        (c.get("status"), c.get("lastTransitionTime"))
        for c in status.get("conditions") or ()
        if c.get("type") == "Ready"
    ]
    return json.dumps(
        [
            body["metadata"].get("labels"),
            status.get("allocatable"),
            ready,
            spec.get("unschedulable"),
            spec.get("taints"),
        ],
        sort_keys=True,
    )


def trainer_fingerprint(body: Mapping[str, Any]) -> str:
    """The fields of a Trainer a plan reads (not its progress or the other controllers' sections)."""
    meta, status = body["metadata"], body.get("status") or {}
    admitted = [c for c in status.get("conditions") or () if c.get("type") == CONDITION]
    return json.dumps(
        [
            meta.get("generation"),
            meta.get("deletionTimestamp"),
            meta.get("namespace"),
            status.get("phase"),
            (status.get("progress") or {}).get("completionTime"),
            status.get("quota"),
            [(c.get("status"), c.get("reason"), c.get("observedGeneration")) for c in admitted],
            (status.get("profile") or {}).get("contribution"),
            (status.get("checkpoint") or {}).get("lastCommitTime"),
        ],
        sort_keys=True,
    )


def trainer_info(body: Mapping[str, Any], quota: QuotaStatus | None, conditions: Any) -> TrainerInfo:
    meta = body["metadata"]
    trainer = Trainer.model_validate(body)
    status = trainer.status or TrainerStatus()
    finished = None
    if status.phase in ("Succeeded", "Failed"):
        finished = (status.progress.completion_time if status.progress else None) or meta.get("creationTimestamp")
    profile = status.profile.contribution.pod if status.profile and status.profile.contribution else None
    return TrainerInfo(
        uid=meta["uid"],
        namespace=meta["namespace"],
        name=meta["name"],
        generation=int(meta.get("generation") or 0),
        created=meta.get("creationTimestamp") or "",
        spec=trainer.spec,
        quota=quota if quota is not None else (status.quota or QuotaStatus()),
        conditions=parse(conditions),
        profile=profile,
        finished=finished,
        deleting=bool(meta.get("deletionTimestamp")),
        last_commit=status.checkpoint.last_commit_time if status.checkpoint else None,
    )


class QuotaController:
    name = "quota"

    def __init__(self, runtime: Runtime) -> None:
        self.rt = runtime
        kube = runtime.kube
        self.policies = ObjectCache.for_kind(kube, "QuotaPolicy")
        self.nodes = ObjectCache(kube.list_nodes, "", "v1", "nodes")
        self.pods = ObjectCache(lambda: kube.list_core("Pod", ""), "", "v1", "pods")
        self.namespaces = ObjectCache(kube.list_namespaces, "", "v1", "namespaces")
        # Listed in full before the first plan: a plan that missed an admitted Trainer would give
        # its capacity away.
        self.trainers = ObjectCache.for_kind(kube, "Trainer")
        self.writer = StatusWriter(kube, kind_info("Trainer"), self.name, OWNED_FIELDS, (CONDITION,))
        self.policy_writer = StatusWriter(kube, kind_info("QuotaPolicy"), self.name, POLICY_FIELDS, ())
        self.lock = asyncio.Lock()
        # uid -> (quota section, condition) this process last wrote: what the Trainer says once
        # the watch catches up
        self.written: dict[str, tuple[dict[str, Any], Desired, int]] = {}
        self._dirty = False  # something changed since the last plan started
        self._queued = False  # a plan is spawned and has not started yet
        self._timer: asyncio.TimerHandle | None = None
        self._seen: dict[str, str] = {}  # uid -> fingerprint of what the plan reads of it
        self._failures = 0
        self._last_plan = 0.0
        self._last_info: dict[str, TrainerInfo] = {}  # uid -> last valid view (kept if one turns invalid)

    def register(self, registry: kopf.OperatorRegistry, runtime: Runtime) -> None:
        # A plan reads only some fields of each object: events that change none of them (node
        # heartbeats, pod status updates, Trainer progress) do not make it plan again.
        self.policies.register(registry, lambda *_: self.poke())
        self.namespaces.register(registry, lambda *_: self.poke())
        self.nodes.register(registry, self._on_change(node_fingerprint))
        self.pods.register(registry, self._on_change(pod_fingerprint))
        self.trainers.register(registry, self._on_change(trainer_fingerprint))
        runtime.admit(registry, "validate-scheduling", self.admit)

    async def admit(self, request: Request) -> Admission:
        """The validating webhook: judged on the cached policies and namespace labels, and a
        refusal confirmed on fresh reads (a replica paused by peering has stale caches)."""
        try:
            spec = TrainerSpec.model_validate(request.spec)
        except ValidationError as err:  # the API server's schema passed it: a newer API than ours
            return Admission(warnings=(f"the quota controller does not understand this spec yet: {err}",))
        namespace = await self.namespaces.get("", request.namespace)
        labels = (namespace or {}).get("metadata", {}).get("labels") or {}
        verdict = admission.check_scheduling(
            request, spec, policy_for(self.policy_infos(await self.policies.values()), labels)
        )
        if verdict.allowed:
            return verdict

        async def fresh(kube: Kube) -> Admission:
            labels = await kube.get_namespace_labels(request.namespace) or {}
            policies = self.policy_infos(await kube.list_all("QuotaPolicy"))
            return admission.check_scheduling(request, spec, policy_for(policies, labels))

        try:
            return await self.rt.admission_read(fresh)
        except TimeoutError:  # the cache's answer stands
            return verdict

    @staticmethod
    def policy_infos(bodies: Sequence[Mapping[str, Any]]) -> list[PolicyInfo]:
        policies = []
        for p in bodies:
            try:
                policies.append(PolicyInfo(p["metadata"]["name"], QuotaPolicy.model_validate(p).spec))
            except ValidationError as err:  # stored before a schema change: skipped, not fatal to the rest
                log.warning("ignoring QuotaPolicy %s: %s", p["metadata"]["name"], err)
        return policies

    def _on_change(
        self, fingerprint: Callable[[Mapping[str, Any]], str]
    ) -> Callable[[Key, dict[str, Any], bool], None]:
        def changed(key: Key, body: dict[str, Any], deleted: bool) -> None:
            uid = str(body.get("metadata", {}).get("uid", key))
            seen = None if deleted else fingerprint(body)
            if self._seen.get(uid) != seen:
                if seen is None:
                    self._seen.pop(uid, None)
                else:
                    self._seen[uid] = seen
                self.poke()

        return changed

    def poke(self, after: float = 0) -> None:
        """Plan again: soon (one plan for every poke until it starts), or in ``after`` seconds."""
        loop = asyncio.get_running_loop()
        if after > 0:
            due = loop.time() + after
            if self._timer is not None and self._timer.when() <= due:
                return
            if self._timer is not None:
                self._timer.cancel()
            self._timer = loop.call_at(due, self._fire)
            return
        self._dirty = True
        if not self._queued:
            self._queued = True
            self.rt.spawn(self._plan_in_background())

    def _fire(self) -> None:
        self._timer = None
        self.poke()

    async def _plan_in_background(self) -> None:
        try:
            await self.plan_once()
            self._failures = 0
        except Exception:
            delay = min(MAX_RETRY_SECONDS, RETRY_SECONDS * 2**self._failures)
            self._failures += 1
            log.exception("planning failed; planning again in %.0fs", delay)
            self.poke(after=delay)

    async def reconcile(self, body: Body) -> None:
        """The runtime's per-Trainer reconcile (its watch and resync): Trainer changes reach the
        plan through the fingerprinted watch above; a resync plans once for all."""
        if time.monotonic() - self._last_plan >= self.rt.config.resync_seconds:
            self.poke()

    async def plan_once(self) -> None:
        async with self.lock:
            self._queued = False
            if not self._dirty:
                return
            self._dirty = False
            self._last_plan = time.monotonic()
            await self.sync()

    async def world(self) -> tuple[World, list[Body], float | None]:
        now = self.rt.clock.now()
        grace = self.rt.config.node_lost_seconds
        nodes, waits = [], []
        for n in await self.nodes.values():
            node, wait = node_info(n, now, grace)
            nodes.append(node)
            if wait is not None:
                waits.append(wait)
        pods = [p for p in map(pod_info, await self.pods.values()) if p is not None]
        policies = self.policy_infos(await self.policies.values())
        labels = {ns["metadata"]["name"]: ns["metadata"].get("labels") or {} for ns in await self.namespaces.values()}
        bodies: list[Body] = []
        trainers: list[TrainerInfo] = []
        for body in await self.trainers.values():
            uid = body["metadata"]["uid"]
            mine = self.written.get(uid)
            stale = mine is not None and self.writer.is_stale(body)
            conditions = (body.get("status") or {}).get("conditions")
            if stale and mine:
                wrote = mine[1]
                conditions = [
                    {
                        "type": wrote.type,
                        "status": wrote.status,
                        "reason": wrote.reason,
                        "message": wrote.message,
                        "lastTransitionTime": rfc3339(now),
                        "observedGeneration": mine[2],
                    }
                ]
            try:
                info = trainer_info(body, QuotaStatus.model_validate(mine[0]) if stale and mine else None, conditions)
            except ValidationError as err:
                # Its last valid view keeps holding what it held (no decision is written for it).
                log.warning("%s/%s does not parse: %s", body["metadata"]["namespace"], body["metadata"]["name"], err)
                if uid in self._last_info:
                    trainers.append(self._last_info[uid])
                continue
            self._last_info[uid] = info
            bodies.append(body)
            trainers.append(info)
        return World(now, trainers, policies, labels, nodes, pods), bodies, min(waits, default=None)

    async def sync(self) -> None:
        world, bodies, node_wait = await self.world()
        started = time.perf_counter()
        result = plan(world)
        PLAN_SECONDS.observe(time.perf_counter() - started)
        stamp = rfc3339(world.now)
        requeue = [d for d in (node_wait,) if d is not None]
        for body in bodies:
            uid = body["metadata"]["uid"]
            verdict = result.verdicts.get(uid)
            if verdict is None:
                continue
            if verdict.requeue_after is not None:
                requeue.append(verdict.requeue_after)
            owned = {"quota": verdict.quota or None}
            try:
                if not await self.writer.write(body, owned, (verdict.condition,), stamp):
                    continue
            except ApiError as err:  # one Trainer's refusal (or a conflict) must not stop the others
                if err.status.code == 404:
                    continue  # deleted meanwhile: its watch event comes next
                log.warning("writing status.quota of %s/%s failed: %s", *ObjectCache.key(body), err)
                requeue.append(RETRY_SECONDS)
                continue
            self.written[uid] = (verdict.quota, verdict.condition, int(body["metadata"].get("generation") or 0))
            for type_, reason, message in verdict.events:
                self.rt.event(body, type_, reason, message)
            if verdict.renegotiation_seconds is not None:
                RENEGOTIATION_SECONDS.observe(verdict.renegotiation_seconds)
                record_renegotiation(body, verdict, world.now)
        live = {b["metadata"]["uid"] for b in await self.trainers.values()}
        self.written = {uid: w for uid, w in self.written.items() if uid in live}
        self._last_info = {uid: i for uid, i in self._last_info.items() if uid in live}
        await self.write_policies(result, stamp)
        self.export(world, result)
        if requeue:
            self.poke(after=max(min(requeue), 0.5))

    async def write_policies(self, result: Plan, stamp: str) -> None:
        for body in await self.policies.values():
            summary = result.policies.get(body["metadata"]["name"])
            used: dict[str, Any] = {}
            if summary is not None:
                for kind, resources in summary.used.items():
                    key = "spot" if kind == "spot" else "onDemand"
                    used[key] = {n: quantity_text(a) for n, a in sorted(resources.items()) if a > 0}
            owned = {
                "admittedTrainers": summary.admitted if summary else 0,
                "pendingTrainers": summary.pending if summary else 0,
                "used": used or None,
            }
            try:
                await self.policy_writer.write(body, owned, (), stamp)
            except ApiError as err:  # deleted meanwhile, or a conflict: the next plan writes it
                log.warning("writing the status of QuotaPolicy %s failed: %s", body["metadata"]["name"], err)

    def export(self, world: World, result: Plan) -> None:
        admitted = {"spot": 0, "on-demand": 0}
        pending = 0
        cost: dict[tuple[str, str], Decimal] = {}
        for t in world.trainers:
            verdict = result.verdicts.get(t.uid)
            if verdict is None or verdict.condition.reason in ("NoQuotaPolicy", "Released", "Suspended"):
                continue
            quota = QuotaStatus.model_validate(verdict.quota)
            if quota.contribution is not None and quota.contribution.grant is not None and quota.capacity_type:
                admitted[quota.capacity_type] += 1
                if quota.cost is not None:
                    for basis, value in (
                        ("admitted", quota.cost.per_hour),
                        ("on_demand", quota.cost.on_demand_per_hour),
                    ):
                        cost[(t.namespace, basis)] = cost.get((t.namespace, basis), Decimal(0)) + Decimal(value)
            else:
                pending += 1
        for kind, n in admitted.items():
            ADMITTED.labels(kind).set(n)
        PENDING.set(pending)
        COST_PER_HOUR.clear()
        for (namespace, basis), amount in cost.items():
            COST_PER_HOUR.labels(namespace, basis).set(float(amount))


entry = run_entrypoint("quota", QuotaController)

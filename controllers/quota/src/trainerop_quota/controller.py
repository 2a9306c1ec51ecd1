"""kopf adapter of the quota controller.

Admission is decided for every Trainer at once (``decide.plan``), one plan at a time (a runtime
trigger), so two plans never admit against the same free capacity. Whatever event comes (a
Trainer, a policy, a node, a pod placed or finished), the controller plans again and writes only
the Trainers whose quota section or condition changes. What it wrote last is kept in memory until
the watch shows it, so a plan never works from a status older than its own last write; after a
restart everything is read back from the Trainers' status (nothing else is kept).
"""

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import kopf
from lightkube import ApiError
from pydantic import ValidationError

from trainerop_common.admission import Request, Verdict
from trainerop_common.api import QuotaPolicy, kind_info
from trainerop_common.api.trainer import QuotaStatus, TrainerSpec
from trainerop_common.cache import Derived, Key, ObjectCache
from trainerop_common.clock import rfc3339
from trainerop_common.conditions import Desired
from trainerop_common.kube import Kube
from trainerop_common.outcome import Outcome, StatusSection
from trainerop_common.parallel import bounded
from trainerop_common.process import run_entrypoint
from trainerop_common.runtime import Body, Runtime
from trainerop_common.status_writer import StatusWriter

from . import admission
from .capacity import quantity_text
from .config import QuotaConfig
from .decide import SECTION, Decision, Observed, Plan, PolicyInfo, TrainerInfo, plan
from .metrics import PLAN_SECONDS, RENEGOTIATION_SECONDS, export, record_renegotiation
from .model import Ungoverned, policy_for
from .proactive_watch import ProactiveWatch
from .taints import namespace_defaults
from .views import (
    node_fingerprint,
    node_info,
    pod_essentials,
    pod_fingerprint,
    pod_info,
    trainer_fingerprint,
    trainer_info,
)
from .workloads import Workloads

if TYPE_CHECKING:
    from .plugin import PlacementPlugin

POLICY_SECTION = StatusSection(("admittedTrainers", "pendingTrainers", "used"))
RETRY_SECONDS = 5.0
log = logging.getLogger("trainerop.quota")
Written = tuple[Mapping[str, Any], Desired, int]  # the quota section, condition and generation last written


def policy_infos(bodies: Sequence[Mapping[str, Any]]) -> list[PolicyInfo]:
    policies = []
    for p in bodies:
        try:
            policies.append(PolicyInfo(p["metadata"]["name"], QuotaPolicy.model_validate(p).spec))
        except ValidationError as err:  # stored before a schema change: skipped, not fatal to the rest
            log.warning("ignoring QuotaPolicy %s: %s", p["metadata"]["name"], err)
    return policies


def as_written(body: Mapping[str, Any], written: Written, now: str) -> TrainerInfo:
    """A Trainer as this controller's own last write left it (the watch has not shown it yet)."""
    quota, wrote, generation = written
    condition = {
        "type": wrote.type,
        "status": wrote.status,
        "reason": wrote.reason,
        "message": wrote.message,
        "lastTransitionTime": now,
        "observedGeneration": generation,
    }
    return trainer_info(body, QuotaStatus.model_validate(quota), [condition])


def already_said(last: tuple[Body, Decision] | None, body: Body, decision: Decision) -> bool:
    """Whether ``decision`` on ``body`` is what the last write that changed nothing was given: the
    very state (a cache puts a new dict for every change) and an equal decision."""
    return last is not None and last[0] is body and last[1] == decision


def with_namespace_tolerations(trainers: list[TrainerInfo], namespaces: Sequence[Body]) -> list[TrainerInfo]:
    """The runs with their namespace's default tolerations (taints.py), which their pods will get
    from the API server's PodTolerationRestriction admission: only runs of namespaces that have
    some are copied."""
    defaults = {
        ns["metadata"]["name"]: found
        for ns in namespaces
        if (found := namespace_defaults(ns["metadata"].get("annotations")))
    }
    if not defaults:
        return trainers
    return [
        replace(t, namespace_tolerations=defaults[t.namespace])
        if t.namespace in defaults and t.namespace_tolerations != defaults[t.namespace]
        else t
        for t in trainers
    ]


class QuotaController:
    name = "quota"
    section = SECTION

    def __init__(self, runtime: Runtime, config: QuotaConfig) -> None:
        self.rt = runtime
        self.config = config
        kube = runtime.kube
        self.policies = ObjectCache.for_kind(kube, "QuotaPolicy")
        self.nodes = ObjectCache(kube.list_nodes, "", "v1", "nodes")
        # Every pod in the cluster holds capacity: only what the plan reads of each is kept.
        self.pods = ObjectCache(lambda keep: kube.list_core("Pod", "", keep), "", "v1", "pods", keep=pod_essentials)
        self.namespaces = ObjectCache(kube.list_namespaces, "", "v1", "namespaces")
        # Listed in full before the first plan: a plan that missed an admitted Trainer would give
        # its capacity away.
        self.trainers = ObjectCache.for_kind(kube, "Trainer")
        self.policy_writer = StatusWriter(kube, kind_info("QuotaPolicy"), self.name, POLICY_SECTION)
        self.planning = runtime.trigger(self.plan_once, "planning", rest=config.plan_rest)
        self.written: dict[str, Written] = {}  # uid -> what this process last wrote
        self._seen: dict[str, str] = {}  # uid -> fingerprint of what the plan reads of it
        self._last_info: dict[str, TrainerInfo] = {}  # uid -> last valid view (kept if one turns invalid)
        # Each plan reads every pod and Trainer: only those that changed are parsed again.
        self.pod_infos = Derived(pod_info)
        self.trainer_infos = Derived(trainer_info)
        # uid -> (the body, the decision) of the last write that found nothing to change: the same
        # decision on the same state (the cache's very dict) is not planned as a write again.
        self._unchanged: dict[str, tuple[Body, Decision]] = {}
        self.plugin = self._plugin(runtime, config)
        self.kueue = Workloads(runtime, self.planning.poke) if config.kueue else None
        watching = config.enable_proactive_scheduling
        self.proactive = ProactiveWatch(runtime, config, self.nodes) if watching else None

    def _plugin(self, runtime: Runtime, config: QuotaConfig) -> "PlacementPlugin | None":
        """The placement plugin's adapter, when one is configured (gRPC is loaded only then)."""
        if not config.placement_plugin_address:
            return None
        from .plugin import PlacementPlugin  # gRPC only where a plugin is configured

        return PlacementPlugin(runtime, config, self.planning.poke)

    def register(self, registry: kopf.OperatorRegistry, runtime: Runtime) -> None:
        # A plan reads only some fields of each object: events that change none of them (node
        # heartbeats, pod status updates, Trainer progress) do not make it plan again.
        self.policies.register(registry, self._policy_changed)
        self.namespaces.register(registry, lambda *_: self.planning.poke())
        self.nodes.register(registry, self._on_change(node_fingerprint))
        self.pods.register(registry, self._on_change(pod_fingerprint))
        self.trainers.register(registry, self._on_change(trainer_fingerprint))
        if self.kueue is not None:
            self.kueue.register(registry)
        runtime.admit(registry, "validate-scheduling", self.admit)
        runtime.every(runtime.config.resync_seconds, self._resync, "planning every resync period")
        if self.proactive is not None:
            interval = self.config.proactive_interval_seconds
            runtime.every(interval, self.proactive.round, "proactive mode: reading the nodes' exporters")

    async def admit(self, request: Request) -> Verdict:
        """The validating webhook: judged on the cached policies and namespace labels, and a
        refusal confirmed on fresh reads (a replica paused by peering has stale caches)."""
        try:
            spec = TrainerSpec.model_validate(request.spec)
        except ValidationError as err:  # the API server's schema passed it: a newer API than ours
            return Verdict(warnings=(f"the quota controller does not understand this spec yet: {err}",))
        namespace = await self.namespaces.get("", request.namespace)
        labels = (namespace or {}).get("metadata", {}).get("labels") or {}
        verdict = admission.check_scheduling(
            request, spec, policy_for(policy_infos(await self.policies.values()), labels)
        )
        if verdict.allowed:
            return verdict

        async def fresh(kube: Kube) -> Verdict:
            labels = await kube.get_namespace_labels(request.namespace) or {}
            policies = policy_infos(await kube.list_all("QuotaPolicy"))
            return admission.check_scheduling(request, spec, policy_for(policies, labels))

        try:
            return await self.rt.admission_read(fresh)
        except TimeoutError:  # the cache's answer stands
            return verdict

    def _policy_changed(self, key: Key, body: dict[str, Any], deleted: bool) -> None:
        if deleted:
            self.policy_writer.forget_object(body)
        self.planning.poke()

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
                self.planning.poke()

        return changed

    async def reconcile(self, body: Body) -> Outcome:
        """The runtime's per-Trainer reconcile (its watch and resync): Trainer changes reach the
        plan through the fingerprinted watch above; the resync plans once for all (register)."""
        return Outcome()

    async def _resync(self) -> None:
        self.planning.poke()

    async def _trainers(self, now: str) -> tuple[list[TrainerInfo], list[Body]]:
        """Every Trainer as the plan sees it (one this controller wrote lately, as it wrote it), and
        the bodies of those that parse."""
        assert self.rt.writer is not None
        bodies: list[Body] = []
        trainers: list[TrainerInfo] = []
        for body in await self.trainers.values():
            uid = body["metadata"]["uid"]
            mine = self.written.get(uid)
            try:
                info = (
                    as_written(body, mine, now) if mine and self.rt.writer.is_stale(body) else self.trainer_infos(body)
                )
            except ValidationError as err:
                # Its last valid view keeps holding what it held (no decision is written for it).
                log.warning("%s/%s does not parse: %s", body["metadata"]["namespace"], body["metadata"]["name"], err)
                if uid in self._last_info:
                    trainers.append(self._last_info[uid])
                continue
            self._last_info[uid] = info
            bodies.append(body)
            trainers.append(info)
        self.trainer_infos.round_done()
        return trainers, bodies

    async def observe(self) -> tuple[Observed, list[Body], float | None]:
        now = self.rt.clock.now()
        nodes, waits = [], []
        for n in await self.nodes.values():
            node, wait = node_info(n, now, self.config.node_lost_seconds)
            nodes.append(node)
            if wait is not None:
                waits.append(wait)
        policies = policy_infos(await self.policies.values())
        # Pods hold capacity only in the budgets and nodes of runs the plan places: with no policy
        # and --ungoverned AtOnce, the plan reads none of them.
        placing = policies or self.config.ungoverned == "AllOrNothing" or self.kueue is not None
        pods = [p for p in self.pod_infos.over(await self.pods.values()) if p is not None] if placing else []
        namespaces = await self.namespaces.values()
        labels = {ns["metadata"]["name"]: ns["metadata"].get("labels") or {} for ns in namespaces}
        trainers, bodies = await self._trainers(rfc3339(now))
        trainers = with_namespace_tolerations(trainers, namespaces)
        ungoverned: Ungoverned = "AllOrNothing" if self.config.ungoverned == "AllOrNothing" else "AtOnce"
        observed = Observed(
            now, trainers, policies, labels, nodes, pods, self.config.topology_levels, ungoverned=ungoverned
        )
        if self.kueue is not None:
            observed = await self.kueue.observe(observed)
        return observed, bodies, min(waits, default=None)

    async def plan_once(self) -> float | None:
        """One plan for every Trainer, written; when to plan again (a node's grace period, a
        reclaim's checkpoint wait, a write to retry)."""
        obs, bodies, node_wait = await self.observe()
        if self.plugin is not None:
            obs = self.plugin.round(obs, {b["metadata"]["uid"]: b for b in bodies})
        started = time.perf_counter()
        result = plan(obs)
        PLAN_SECONDS.observe(time.perf_counter() - started)
        decided = [(body, d) for body in bodies if (d := result.decisions.get(body["metadata"]["uid"])) is not None]
        again = [d for d in (node_wait, *(d.requeue_after for _, d in decided)) if d is not None]
        again += await self._write_changed(decided, obs)
        if self.kueue is not None and (kueue_again := await self.kueue.write(obs)) is not None:
            again.append(kueue_again)
        live = {b["metadata"]["uid"] for b in await self.trainers.values()}
        self.written = {uid: w for uid, w in self.written.items() if uid in live}
        self._last_info = {uid: i for uid, i in self._last_info.items() if uid in live}
        self._unchanged = {uid: u for uid, u in self._unchanged.items() if uid in live}
        await self.write_policies(result, rfc3339(obs.now))
        export(obs, result)
        return min(again, default=None)

    async def _write_changed(self, decided: list[tuple[Body, Decision]], obs: Observed) -> list[float]:
        """Write the decisions that may change a Trainer (not one already found written on the same
        state); each write is its own, so they are issued together (bounded): a plan that admits a
        burst of new Trainers does not wait one round trip per Trainer on a busy API server."""
        changed = [(b, d) for b, d in decided if not already_said(self._unchanged.get(b["metadata"]["uid"]), b, d)]
        assert self.rt.writer is not None
        self.rt.writer.skipped(len(decided) - len(changed))  # found unchanged: the metric says so
        return [delay for delays in await bounded(self._write(b, d, obs) for b, d in changed) for delay in delays]

    async def _write(self, body: Body, decision: Decision, obs: Observed) -> list[float]:
        """Apply one Trainer's decision; when to plan again for it (a write to retry)."""
        uid = body["metadata"]["uid"]
        outcome = Outcome(
            status={"quota": decision.quota or None}, conditions=(decision.condition,), on_change=decision.events
        )
        try:
            if not await self.rt.conclude(body, outcome):
                self._unchanged[uid] = (body, decision)
                return []
        except ApiError as err:  # one Trainer's refusal (or a conflict) must not stop the others
            log.warning("writing status.quota of %s/%s failed: %s", *ObjectCache.key(body), err)
            return [RETRY_SECONDS]
        self.written[uid] = (
            decision.quota,
            decision.condition,
            int(body["metadata"].get("generation") or 0),
        )
        if decision.renegotiation_seconds is not None:
            RENEGOTIATION_SECONDS.observe(decision.renegotiation_seconds)
            record_renegotiation(body, decision, obs.now)
        return []

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


entry = run_entrypoint("quota", QuotaController, QuotaConfig, webhooks=True)

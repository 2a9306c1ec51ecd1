"""The placement plugin's adapter (docs/placement-plugins.md): asks the plugin, outside the plan's
lock, where a waiting run's replicas should go; the plan then tries its answer first and judges it
like any placement. One question per run and generation, each with a deadline; a timeout or an
error gives the built-in placement and one Warning Event. Imported only when
``--placement-plugin-address`` is set (gRPC is not loaded otherwise)."""

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from grpc import aio
from lightkube import ApiError

from trainerop_common.api.base import PluginChoice
from trainerop_common.names import replica_claim_name
from trainerop_common.runtime import Body, Runtime
from trainerop_common.topology import ROLES, role_override
from trainerop_placement.channel import PlacementClient
from trainerop_placement.v1 import placement_pb2 as pb

from .capacity import Resources
from .config import QuotaConfig
from .hints import MAX_REASON, Requirement, Suggestion, Term, problems
from .ledger import Ledger, shape
from .model import UNGOVERNED, Observed, TrainerInfo, placed_by_plan, policy_for, preference, unadmitted
from .packing import RING_ORDER, Slot, ring_key

log = logging.getLogger("trainerop.quota.plugin")
FAILED_EVENT = "PlacementPluginFailed"


def quantities(resources: Resources) -> dict[str, float]:
    """Amounts in their base unit, as the API carries them (cores, bytes, counts)."""
    return {name: float(amount) for name, amount in sorted(resources.items())}


def replicas(t: TrainerInfo) -> list[pb.Replica]:
    """The run's replicas at its full size, in ring order, with each pod's requests and its own
    volume's claim (spec.storage)."""
    s = shape(t, t.spec.topology.workers, None)
    slots = sorted(s.slots(), key=ring_key)
    return [
        pb.Replica(
            role=r,
            index=i,
            requests=quantities(s.requests[r]),
            node_selector=dict(s.selectors[r].labels),
            volume_claim=replica_claim_name(t.name, r, i) if t.spec.storage is not None else "",
        )
        for r, i in slots
    ]


def mounted_claims(t: TrainerInfo) -> list[str]:
    """The PersistentVolumeClaims the run's pods mount besides their own: the profile's volumes and
    each role's pod template override's, by name."""
    volumes = [*((t.profile.volumes if t.profile else None) or ())]
    for role in ROLES:
        volumes += ((role_override(t.spec, role) or {}).get("spec") or {}).get("volumes") or []
    claims = {str(claim) for v in volumes if (claim := (v.get("persistentVolumeClaim") or {}).get("claimName"))}
    return sorted(claims)


def context(
    t: TrainerInfo, body: Body, obs: Observed, free: Mapping[str, Resources], model_bytes: int
) -> pb.WorkerContext:
    """What the plugin is told of the run and of the cluster (the nodes it may use, their room:
    ``free``, the ledger's free capacity of the round)."""
    policy = policy_for(obs.policies, obs.namespace_labels.get(t.namespace, {})) or UNGOVERNED
    kinds = preference(policy, t.spec)
    nodes = [
        pb.CandidateNode(
            name=n.name,
            labels=dict(n.labels),
            allocatable=quantities(n.allocatable),
            free=quantities({k: v for k, v in free[n.name].items() if v > 0}),
            capacity_type=n.kind,
        )
        for n in obs.nodes
        if n.schedulable and n.kind in kinds
    ]
    meta = body.get("metadata") or {}
    status = body.get("status") or {}
    checkpoint = t.spec.checkpoint
    previous = sorted({p.node for p in obs.pods if p.trainer_uid == t.uid and p.node})
    return pb.WorkerContext(
        trainer=pb.TrainerRef(
            namespace=t.namespace,
            name=t.name,
            uid=t.uid,
            generation=t.generation,
            labels=dict(meta.get("labels") or {}),
            framework=t.spec.framework,
        ),
        model=pb.Model(size_bytes=model_bytes, step=int((status.get("checkpoint") or {}).get("latestStep") or 0)),
        cluster_load=pb.ClusterLoad(nodes=nodes),
        data_locality=pb.DataLocality(
            checkpoint_location=checkpoint.bucket if checkpoint else "",
            previous_nodes=previous,
            volume_claims=mounted_claims(t),
        ),
        replicas=replicas(t),
        capacity_order=list(kinds),
        topology_levels=list(obs.levels),
    )


def suggestion(hint: pb.PlacementHint, generation: int) -> Suggestion:
    """The plan's view of an answer; one whose form is wrong (an unknown role or operator, a weight
    out of range) is a failure, said in its own words."""
    nodes: dict[Slot, str] = {}
    for r in hint.replicas:
        role = next((known for known in RING_ORDER if known == r.role), None)
        if role is None:
            return Suggestion(generation, failed=f"the plugin named role {r.role!r} (one of {', '.join(ROLES)})")
        nodes[(role, r.index)] = r.node
    terms = tuple(
        Term(t.weight, tuple(Requirement(m.key, m.operator, tuple(m.values)) for m in t.match_expressions))
        for t in hint.preferred
    )
    wrong = problems(nodes, terms)
    if wrong:
        return Suggestion(generation, failed=("the plugin's hint is malformed: " + "; ".join(wrong))[:MAX_REASON])
    return Suggestion(generation, nodes, terms, hint.reason[:MAX_REASON])


def model_bytes(checkpoint: Mapping[str, Any] | None) -> int:
    """The latest committed checkpoint's size: the sum of its shards' (0 when unknown)."""
    shards = ((checkpoint or {}).get("spec") or {}).get("shards") or []
    return sum(int(s.get("size") or 0) for s in shards)


def waiting(t: TrainerInfo, obs: Observed) -> bool:
    """A run the plan would try to admit: placed by the plan (not by Kueue) and not admitted."""
    if obs.kueue and t.queue is not None:
        return False
    policy = policy_for(obs.policies, obs.namespace_labels.get(t.namespace, {}))
    return placed_by_plan(t, policy, obs.ungoverned) and unadmitted(t)


def asked_for(t: TrainerInfo, default: PluginChoice) -> bool:
    """Whether the plugin is asked about the run: its profile's choice, else the cluster's."""
    return (t.placement_plugin or default) == "Ask"


class PlacementPlugin:
    """Asks the plugin once per run and generation; keeps the answers for the plans."""

    def __init__(self, runtime: Runtime, config: QuotaConfig, replan: Callable[[], None]) -> None:
        self.rt = runtime
        self.deadline = config.placement_plugin_timeout
        self.default: PluginChoice = "Skip" if config.placement_plugin_default == "Skip" else "Ask"
        self.client = PlacementClient(config.placement_plugin_address, config.placement_plugin_tls_dir)
        self.replan = replan
        self.answers: dict[str, Suggestion] = {}  # uid -> the answer for the generation it names
        self.asking: dict[str, int] = {}  # uid -> the generation asked about

    def round(self, obs: Observed, bodies: Mapping[str, Body]) -> Observed:
        """Ask about each waiting run not asked about at its generation; the plan's view of the
        answers so far and of the questions still open."""
        live = {t.uid for t in obs.trainers}
        self.answers = {uid: s for uid, s in self.answers.items() if uid in live}
        free: dict[str, Resources] | None = None  # the ledger's, built once a round if anyone is asked
        held: set[str] = set()  # runs whose profile has not answered: whether to ask is not known yet
        for t in obs.trainers:
            body = bodies.get(t.uid)
            known = self.answers.get(t.uid)
            if body is None or not waiting(t, obs) or self.asking.get(t.uid) == t.generation:
                continue
            if t.profile_pending:
                held.add(t.uid)
                continue
            if not asked_for(t, self.default):
                continue
            if known is None or known.generation != t.generation:
                self.asking[t.uid] = t.generation
                free = Ledger(obs).free if free is None else free
                self.rt.spawn(self.ask(t, body, obs, free))
        return replace(obs, suggestions=dict(self.answers), asking=frozenset(self.asking) | held)

    async def ask(self, t: TrainerInfo, body: Body, obs: Observed, free: Mapping[str, Resources]) -> None:
        try:
            answer = await self._answer(t, body, obs, free)
        finally:
            if self.asking.get(t.uid) == t.generation:
                del self.asking[t.uid]
        self.answers[t.uid] = answer
        if answer.failed:
            self.rt.event(body, "Warning", FAILED_EVENT, f"{answer.failed}; the built-in placement is used")
        self.replan()

    async def _answer(self, t: TrainerInfo, body: Body, obs: Observed, free: Mapping[str, Resources]) -> Suggestion:
        try:
            question = context(t, body, obs, free, model_bytes(await self.latest_checkpoint(t, body)))
            hint = await self.client.suggest(question, self.deadline)
        except aio.AioRpcError as err:
            failed = f"the placement plugin at {self.client.target} answered {err.code().name}: {err.details()}"
            return Suggestion(t.generation, failed=failed[:MAX_REASON])
        except (OSError, ValueError) as err:  # TLS files, an unsizable run
            return Suggestion(t.generation, failed=f"the placement plugin was not asked: {err}"[:MAX_REASON])
        return suggestion(hint, t.generation)

    async def latest_checkpoint(self, t: TrainerInfo, body: Body) -> Mapping[str, Any] | None:
        latest = ((body.get("status") or {}).get("checkpoint") or {}).get("latest")
        try:
            return await self.rt.kube.get("Checkpoint", latest, t.namespace) if latest else None
        except ApiError as err:  # the plugin is still asked, without the model's size
            log.warning("reading Checkpoint %s/%s for the placement plugin failed: %s", t.namespace, latest, err)
            return None

    async def close(self) -> None:
        await self.client.close()

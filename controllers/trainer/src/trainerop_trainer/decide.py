"""The trainer controller's decision core: pure, table-tested, no I/O.

From the Trainer, the pods and Services it owns and the gates, decide which objects to create
or delete and what the status says. DESIGN §3 (gates, contributions), §5 (contracts) and §6
(failure semantics) are the contract.
"""

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from trainerop_common.api import GROUP, Contribution, Grant, RunPolicyDefaults
from trainerop_common.api.base import Condition, ResourceRequirements
from trainerop_common.api.trainer import Phase, ProgressStatus, ReplicaStatus, TrainerSpec, TrainerStatus
from trainerop_common.clock import parse_time, rfc3339
from trainerop_common.conditions import Desired, find
from trainerop_common.contracts import has_master

from .pods import (
    CONTRIBUTION_ORDER,
    Owner,
    PodSettings,
    claim_manifest,
    claim_name,
    lease_manifest,
    pin,
    pod_manifest,
    runner_manifests,
    service_manifest,
)
from .topology import ROLES, Replica, Role, desired_counts, replicas

CONDITIONS = ("Created", "Running", "Restarting", "Stalled", "Succeeded", "Failed", "Suspended")
OWNED_FIELDS = ("phase", "topology", "progress")
DEFAULT_BACKOFF_LIMIT = 6  # as batch/v1 Job


@dataclass(frozen=True)
class RestartBackoff:
    """Delay before the n-th replacement of a role's pods: the first is immediate, then
    ``base``, 2 x ``base``, ... up to ``cap`` seconds (controller flags)."""

    base: float = 1.0
    cap: float = 60.0

    @property
    def reset_after(self) -> float:
        """A failure this long after the previous one starts the backoff over."""
        return 5 * self.cap

    def delay(self, recent_failures: int) -> float:
        return 0.0 if recent_failures <= 1 else min(self.cap, self.base * 2 ** (recent_failures - 2))


@dataclass(frozen=True)
class RoleHistory:
    restarts: int = 0
    last_failure: str | None = None
    recent: int = 0  # failures in a row, each within reset_after of the previous


History = Mapping[str, RoleHistory]


@dataclass(frozen=True)
class NodeView:
    name: str
    ready: str  # status of the Ready condition: True, False or Unknown
    since: str | None  # its lastTransitionTime


@dataclass(frozen=True)
class NodeLoss:
    lost: dict[str, str]  # node -> why it counts as lost
    next_check: float | None  # seconds until a not-ready node's grace period ends


def lost_nodes(nodes: Sequence[NodeView], pod_nodes: Set[str], now: datetime, grace: float) -> NodeLoss:
    """Nodes the pods are on that count as lost: gone from the API, or not Ready for ``grace`` s."""
    known = {n.name: n for n in nodes}
    lost = {}
    pending = []
    for name in pod_nodes:
        node = known.get(name)
        if node is None:
            lost[name] = f"node {name} no longer exists"
        elif node.ready != "True" and node.since:
            left = grace - (now - parse_time(node.since)).total_seconds()
            if left > 0:
                pending.append(left)
                continue
            state = "NotReady" if node.ready == "False" else "unreachable"
            lost[name] = f"node {name} has been {state} since {node.since}"
    return NodeLoss(lost, min(pending) if pending else None)


@dataclass(frozen=True)
class PodView:
    """What the decision needs to know of one pod."""

    name: str
    uid: str
    role: Role
    index: int
    phase: str = "Pending"  # Pending, Running, Succeeded, Failed, Unknown
    ready: bool = False
    deleting: bool = False
    exit_code: int | None = None
    reason: str = ""
    node: str = ""
    started: str | None = None  # status.startTime
    admission: str = ""  # the quota admission it was created under (ADMISSION_ANNOTATION)
    pinned: str = ""  # the node that admission placed it on (NODE_ANNOTATION)

    @property
    def finished(self) -> bool:
        return self.phase in ("Succeeded", "Failed")


@dataclass(frozen=True)
class LeaseView:
    """A replica's heartbeat Lease: when it was last renewed and the progress it carried."""

    name: str
    renew_time: str | None = None
    epoch: int = 0
    step: int = 0


@dataclass(frozen=True)
class Observed:
    owner: Owner
    spec: TrainerSpec
    status: TrainerStatus
    conditions: Sequence[Condition]
    gates: Sequence[str]  # condition types of the deployed concerns
    now: datetime
    pods: Sequence[PodView] = ()
    services: Set[str] = frozenset()
    contributions: Mapping[str, Contribution] = field(default_factory=dict)  # by concern
    settings: PodSettings = field(default_factory=PodSettings)
    backoff: RestartBackoff = field(default_factory=RestartBackoff)
    lost_nodes: Mapping[str, str] = field(default_factory=dict)  # node name -> why it counts as lost
    leases: Mapping[str, LeaseView] = field(default_factory=dict)  # by pod name
    claims: Set[str] = frozenset()  # names of the replicas' PersistentVolumeClaims


@dataclass(frozen=True)
class Decision:
    status: dict[str, Any]
    conditions: tuple[Desired, ...]
    create_pods: tuple[dict[str, Any], ...] = ()
    create_services: tuple[dict[str, Any], ...] = ()
    delete_pods: tuple[str, ...] = ()
    delete_services: tuple[str, ...] = ()
    restarted: tuple[str, ...] = ()  # pods deleted to be replaced after a retryable failure
    events: tuple[tuple[str, str, str], ...] = ()  # (type, reason, message)
    requeue_after: float | None = None  # seconds until something is due (backoff, deadline, TTL)
    delete_trainer: bool = False  # ttlSecondsAfterFinished has passed
    force_delete: tuple[str, ...] = ()  # pods on lost nodes: no kubelet will confirm their deletion
    create_leases: tuple[dict[str, Any], ...] = ()
    create_claims: tuple[dict[str, Any], ...] = ()
    delete_leases: tuple[str, ...] = ()
    runner: tuple[dict[str, Any], ...] = ()  # the pods' identity, applied whenever pods are created


def worker_selector(name: str) -> str:
    return f"trainer-name={name},{GROUP}/replica-type=worker"


def gate_wait(conditions: Sequence[Condition], gates: Sequence[str], generation: int) -> list[str]:
    """One line per closed gate, saying why it is closed."""
    waiting = []
    for gate in gates:
        cond = find(conditions, gate)
        if cond is None or cond.observed_generation != generation:
            waiting.append(f"{gate} (not yet reported for generation {generation})")
        elif cond.status != "True":
            waiting.append(f"{gate} ({cond.reason}: {cond.message})" if cond.message else f"{gate} ({cond.reason})")
    return waiting


def effective_run_policy(spec: TrainerSpec, contributions: Mapping[str, Contribution]) -> tuple[TrainerSpec, str]:
    """The spec with runPolicy fields the Trainer leaves unset taken from the concerns' defaults
    (in contribution order, a later concern winning), and a note on where the backoff limit
    comes from for messages."""
    defaults: dict[str, tuple[str, object]] = {}
    for concern in CONTRIBUTION_ORDER:
        proposed = contributions[concern].run_policy if concern in contributions else None
        for name, value in (proposed or RunPolicyDefaults()).model_dump(exclude_none=True).items():
            defaults[name] = (concern, value)
    own = spec.run_policy.model_dump(exclude_unset=False)
    fill = {name: value for name, (_, value) in defaults.items() if own.get(name) is None}
    limit_from = (
        "spec.runPolicy.backoffLimit"
        if spec.run_policy.backoff_limit is not None
        else f"the {defaults['backoff_limit'][0]}'s backoffLimit"
        if "backoff_limit" in fill
        else "the default backoffLimit"
    )
    if not fill:
        return spec, limit_from
    return spec.model_copy(update={"run_policy": spec.run_policy.model_copy(update=fill)}), limit_from


def granted(spec: TrainerSpec, contributions: Mapping[str, Contribution]) -> TrainerSpec:
    """The spec as the quota admitted it: at most the granted workers, lowered resources."""
    grant = grant_of(contributions)
    if grant is None:
        return spec
    update: dict[str, Any] = {}
    if grant.workers < spec.topology.workers:
        update["topology"] = spec.topology.model_copy(update={"workers": grant.workers})
    if grant.resources is not None:
        own = spec.resources or ResourceRequirements()
        update["resources"] = ResourceRequirements(
            requests={**(own.requests or {}), **(grant.resources.requests or {})} or None,
            limits={**(own.limits or {}), **(grant.resources.limits or {})} or None,
        )
    return spec.model_copy(update=update) if update else spec


def grant_of(contributions: Mapping[str, Contribution]) -> Grant | None:
    quota = contributions.get("quota")
    return quota.grant if quota is not None else None


def placed_node(grant: Grant | None, role: str, index: int) -> str:
    """The node the quota admission placed a replica on ("" when it did not)."""
    nodes = ((grant.placement if grant else None) or {}).get(role) or []
    return nodes[index] if index < len(nodes) else ""


def outdated(pods: Sequence[PodView], contributions: Mapping[str, Contribution]) -> tuple[list[PodView], str]:
    """Unfinished pods created under an earlier quota admission, or waiting unscheduled on a node
    the admission no longer places them on; and why they go."""
    grant = grant_of(contributions)

    def misplaced(p: PodView) -> bool:
        want = placed_node(grant, p.role, p.index)
        return not p.node and p.phase == "Pending" and bool(p.pinned) and bool(want) and want != p.pinned

    old = [
        p
        for p in pods
        if not p.finished and ((p.admission and p.admission != (grant.id if grant else None)) or misplaced(p))
    ]
    if not old:
        return [], ""
    names = ", ".join(sorted(p.name for p in old))
    if grant is None:
        return old, f"the quota admission was withdrawn: deleting {names}"
    return old, f"the quota admission moved the run ({grant.id}): replacing {names}"


def retryable(spec: TrainerSpec, pod: PodView) -> bool:
    """Kubeflow's rules: Never never retries; ExitCode retries 128-255 (signals, OOM kills) and
    failures without an exit code (evictions, lost nodes); OnFailure and Always retry."""
    policy = spec.run_policy.restart_policy
    if policy == "Never":
        return False
    if policy == "ExitCode":
        # No exit code, or 0 on a failed pod: evicted or stopped from outside, not a bug.
        return pod.exit_code is None or pod.exit_code == 0 or pod.exit_code >= 128
    return True


def describe_failure(pod: PodView) -> str:
    if pod.reason == "NodeLost":
        return f"pod {pod.name} was lost with its node {pod.node}"
    if pod.reason == "Stalled":
        return f"pod {pod.name} stalled (no progress heartbeat)"
    code = f"exit code {pod.exit_code}" if pod.exit_code is not None else "no exit code"
    return f"pod {pod.name} failed with {code}" + (f" ({pod.reason})" if pod.reason else "")


def succeeded(spec: TrainerSpec, pods: Mapping[Replica, PodView]) -> bool:
    """Kubeflow's success policies: the master where there is one (pytorch, xgboost); worker 0
    or all workers for tensorflow; all workers otherwise (jax, generic, elastic pytorch)."""

    def done(r: Replica) -> bool:
        pod = pods.get(r)
        return pod is not None and pod.phase == "Succeeded"

    workers = [Replica("worker", i) for i in range(spec.topology.workers)]
    if has_master(spec):
        return done(Replica("master", 0))
    if spec.framework == "tensorflow" and done(Replica("worker", 0)):
        return True
    return all(done(w) for w in workers)


def counts(spec: TrainerSpec, pods: Sequence[PodView], history: History) -> dict[str, ReplicaStatus]:
    desired = desired_counts(spec)
    out: dict[str, ReplicaStatus] = {}
    for role in ROLES:
        mine = [p for p in pods if p.role == role and not p.deleting]
        past = history.get(role, RoleHistory())
        if not desired[role] and not mine and not past.restarts:
            continue
        out[role] = ReplicaStatus(
            desired=desired[role],
            active=sum(not p.finished for p in mine),
            ready=sum(p.ready and p.phase == "Running" for p in mine),
            succeeded=sum(p.phase == "Succeeded" for p in mine),
            failed=sum(p.phase == "Failed" for p in mine),
            restarts=past.restarts,
            last_failure_time=past.last_failure,
            recent_failures=past.recent,
        )
    return out


def _status(
    obs: Observed,
    phase: Phase,
    pods: Sequence[PodView],
    history: History,
    start: str | None,
    completion: str | None,
) -> dict[str, Any]:
    by_role = counts(obs.spec, pods, history)
    workers = by_role.get("worker", ReplicaStatus())
    topology = {
        "workers": workers.active,
        "readyWorkers": workers.ready,
        "selector": worker_selector(obs.owner.name),
    }
    if by_role:
        topology["replicas"] = {role: c.to_k8s() for role, c in by_role.items()}
    # Always the whole section, rebuilt: the same shape every time (no write for a changed shape),
    # and a cleared startTime (on suspension) really goes away.
    previous = obs.status.progress or ProgressStatus()
    beats = [lease for lease in obs.leases.values() if lease.renew_time]
    progress = ProgressStatus(
        start_time=start,
        completion_time=completion,
        epoch=max((lease.epoch for lease in beats), default=previous.epoch),
        step=max((lease.step for lease in beats), default=previous.step),
        last_heartbeat_time=max((str(lease.renew_time)[:19] + "Z" for lease in beats), default=None)
        or previous.last_heartbeat_time,
    )
    return {"phase": phase, "topology": topology, "progress": progress.to_k8s()}


def _last_sign(obs: Observed, pod: PodView) -> str | None:
    """The later of the pod's start and its last heartbeat."""
    lease = obs.leases.get(pod.name)
    times = [t[:19] + "Z" for t in (pod.started, lease.renew_time if lease else None) if t]
    return max(times) if times else None


def _stalled(obs: Observed, pods: Sequence[PodView]) -> dict[str, str]:
    """Running pods silent for longer than stallTimeoutSeconds -> why."""
    timeout = obs.spec.run_policy.stall_timeout_seconds
    if timeout is None:
        return {}
    out = {}
    for pod in pods:
        if pod.phase != "Running" or pod.deleting:
            continue
        last = _last_sign(obs, pod)
        due = _due(obs, last, timeout)
        if due is not None and due <= 0:
            out[pod.name] = f"pod {pod.name} sent no heartbeat for {timeout}s (last sign of life {last})"
    return out


def _due(obs: Observed, since: str | None, seconds: float | None) -> float | None:
    """Seconds until ``since`` + ``seconds`` (<= 0: due now); None when either is unset."""
    if since is None or seconds is None:
        return None
    return (parse_time(since) + timedelta(seconds=seconds) - obs.now).total_seconds()


def _soonest(*delays: float | None) -> float | None:
    pending = [d for d in delays if d is not None and d > 0]
    return min(pending) if pending else None


def decide(obs: Observed) -> Decision:
    """The decision, with pods of an earlier quota admission deleted first (never counted as
    failures) while the run is neither finished nor suspended."""
    active = obs.status.phase not in ("Succeeded", "Failed") and not obs.spec.run_policy.suspend
    old, why = outdated([p for p in obs.pods if not p.deleting], obs.contributions) if active else ([], "")
    if not old:
        return _decide(obs)
    gone = {p.name for p in old}
    pods = [PodView(**{**p.__dict__, "deleting": True}) if p.name in gone else p for p in obs.pods]
    decision = _decide(replace(obs, pods=pods))
    return replace(
        decision,
        delete_pods=tuple(sorted(set(decision.delete_pods) | gone)),
        events=(("Normal", "QuotaReadmission", why), *decision.events),
    )


def _decide(obs: Observed) -> Decision:
    spec, limit_from = effective_run_policy(granted(obs.spec, obs.contributions), obs.contributions)
    owner = obs.owner
    stamp = rfc3339(obs.now)
    # A pod on a lost node is a failure without exit code (retryable, as an eviction is).
    # One already being deleted is only waiting for a kubelet that will never answer.
    stranded = {p.name for p in obs.pods if p.node in obs.lost_nodes and not p.finished and not p.deleting}
    stuck = {p.name for p in obs.pods if p.node in obs.lost_nodes and p.deleting}
    pods = [
        PodView(**{**p.__dict__, "phase": "Failed", "reason": "NodeLost", "exit_code": None})
        if p.name in stranded
        else p
        for p in obs.pods
    ]
    stalled = _stalled(obs, pods)
    pods = [
        PodView(**{**p.__dict__, "phase": "Failed", "reason": "Stalled", "exit_code": None}) if p.name in stalled else p
        for p in pods
    ]
    live = [p for p in pods if not p.deleting]
    by_replica = {Replica(p.role, p.index): p for p in live}
    # Cleaning up looks at what the pods really are: a stalled or stranded pod still holds its GPUs.
    really_finished = {p.name for p in obs.pods if p.finished}
    forced = stranded | stuck

    def clean(candidates: Sequence[PodView], policy: str) -> tuple[str, ...]:
        return tuple(
            sorted(
                p.name for p in candidates if policy == "All" or (policy == "Running" and p.name not in really_finished)
            )
        )

    previous = obs.status.topology.replicas if obs.status.topology and obs.status.topology.replicas else {}
    history: dict[str, RoleHistory] = {
        r: RoleHistory(c.restarts, c.last_failure_time, c.recent_failures) for r, c in previous.items()
    }
    restarts_total = sum(h.restarts for h in history.values())
    progress = obs.status.progress
    start = progress.start_time if progress else None
    completion = progress.completion_time if progress else None
    finished_phase = obs.status.phase if obs.status.phase in ("Succeeded", "Failed") else None
    not_suspended = Desired.false("Suspended", "NotSuspended")

    # A finished run stays finished; clean its pods as cleanPodPolicy says, delete it after its TTL.
    if finished_phase is not None:
        doomed = clean(live, spec.run_policy.clean_pod_policy)
        kept = [c for c in CONDITIONS if find(obs.conditions, c) is not None]
        ttl = _due(obs, completion, spec.run_policy.ttl_seconds_after_finished)
        return Decision(
            status=_status(obs, finished_phase, live, history, start, completion),
            conditions=tuple(_keep(obs.conditions, kept)),
            delete_pods=doomed,
            force_delete=tuple(sorted(forced & set(doomed) | stuck)),
            requeue_after=_soonest(ttl),
            delete_trainer=ttl is not None and ttl <= 0,
        )

    if spec.run_policy.suspend:
        return Decision(
            status=_status(obs, "Suspended", live, history, None, None),
            conditions=(
                Desired.false("Created", "Suspended", "spec.runPolicy.suspend is true; set it to false to start"),
                Desired.true("Suspended", "SuspendedByUser", "spec.runPolicy.suspend is true; its pods are deleted"),
            ),
            delete_pods=tuple(p.name for p in live),
            force_delete=tuple(sorted(forced)),
            events=(("Normal", "Suspended", f"spec.runPolicy.suspend is true: deleting {len(live)} pods"),)
            if live
            else (),
        )
    was = find(obs.conditions, "Suspended")
    if was is not None and (was.status == "True" or was.reason == "Resumed"):
        not_suspended = Desired.false("Suspended", "Resumed", "spec.runPolicy.suspend was set to false")

    waiting = gate_wait(obs.conditions, obs.gates, owner.generation)
    if waiting and not live:
        return Decision(
            status=_status(obs, "Pending", live, history, start, None),
            conditions=(
                Desired.false("Created", "WaitingForGates", "waiting for " + "; ".join(waiting)),
                not_suspended,
            ),
        )

    # The run finishes in this decision: its TTL counts from now, whatever event comes next.
    ttl_after_finish = (
        float(spec.run_policy.ttl_seconds_after_finished)
        if spec.run_policy.ttl_seconds_after_finished is not None
        else None
    )

    def fail(reason: str, message: str) -> Decision:
        doomed = clean(live, spec.run_policy.clean_pod_policy)
        return Decision(
            status=_status(obs, "Failed", live, history, start, stamp),
            conditions=(
                Desired.true("Created", "PodsCreated", "all pods were created"),
                Desired.false("Running", reason, message),
                Desired.true("Failed", reason, message),
                not_suspended,
            ),
            delete_pods=doomed,
            force_delete=tuple(sorted(forced & set(doomed) | stuck)),
            events=(("Warning", reason, message),),
            requeue_after=ttl_after_finish,
        )

    deadline = _due(obs, start, spec.run_policy.active_deadline_seconds)
    if deadline is not None and deadline <= 0:
        return fail(
            "DeadlineExceeded",
            f"the run was active longer than spec.runPolicy.activeDeadlineSeconds "
            f"({spec.run_policy.active_deadline_seconds}s since {start})",
        )

    # Failures: replace a retryable one (counted, within the backoff limit), fail on the rest.
    failed = sorted((p for p in live if p.phase == "Failed"), key=lambda p: (p.role, p.index))
    limit = spec.run_policy.backoff_limit if spec.run_policy.backoff_limit is not None else DEFAULT_BACKOFF_LIMIT
    permanent = next((p for p in failed if not retryable(spec, p)), None)
    if permanent is not None:
        return fail(
            "PodFailed",
            f"{describe_failure(permanent)}, which restartPolicy {spec.run_policy.restart_policy} does not retry"
            + (" (exit codes 1-127 are permanent)" if spec.run_policy.restart_policy == "ExitCode" else "")
            + "; fix the cause and create the Trainer again",
        )
    if failed and restarts_total + len(failed) > limit:
        return fail(
            "BackoffLimitExceeded",
            f"{describe_failure(failed[0])} after {restarts_total} restarts; {limit_from} is {limit}",
        )

    if succeeded(spec, by_replica):
        done_message = "the run finished successfully"
        doomed = clean(live, spec.run_policy.clean_pod_policy)
        return Decision(
            status=_status(obs, "Succeeded", live, history, start, stamp),
            conditions=(
                Desired.true("Created", "PodsCreated", "all pods were created"),
                Desired.false("Running", "Succeeded", done_message),
                Desired.true("Succeeded", "Succeeded", done_message),
                not_suspended,
            ),
            delete_pods=doomed,
            force_delete=tuple(sorted(forced & set(doomed) | stuck)),
            events=(("Normal", "Succeeded", done_message),),
            requeue_after=ttl_after_finish,
        )

    events: list[tuple[str, str, str]] = []
    restart: list[PodView] = []
    for pod in failed:
        if pod.role != "ps" and spec.run_policy.restart_scope == "Gang":
            # The whole gang restarts together; parameter servers keep their state and stay.
            restart = [p for p in live if p.role != "ps" or p.phase == "Failed"]
            break
        restart.append(pod)
    restart_names = {p.name for p in restart}
    for pod in failed:
        past = history.get(pod.role, RoleHistory())
        quiet = _due(obs, past.last_failure, obs.backoff.reset_after)
        recent = 1 if quiet is None or quiet <= 0 else past.recent + 1
        history[pod.role] = RoleHistory(past.restarts + 1, stamp, recent)
        events.append(("Warning", "RestartingPod", f"{describe_failure(pod)}; replacing it (same name and DNS)"))
    if len(restart) > len(failed):
        events.append(("Normal", "GangRestart", f"restartScope is Gang: restarting {len(restart)} pods"))

    remaining = [p for p in live if p.name not in restart_names]

    desired = replicas(spec)
    wanted = set(desired)
    existing_names = {p.name for p in pods}  # deleting pods still hold their names
    missing = [r for r in desired if r.name(owner.name) not in existing_names]
    # A role's replacements wait out its restart backoff.
    backoff_wait = {
        role: _due(obs, h.last_failure, obs.backoff.delay(h.recent))
        for role, h in history.items()
        if h.recent and h.last_failure is not None
    }
    held = [r for r in missing if (backoff_wait.get(r.role) or 0) > 0]
    # A gang starts again only once every old pod of it is gone: a new pod must not meet a
    # predecessor (seen on the real node: JAX's coordinator aborts the whole job when a task of
    # the earlier incarnation connects to it). Parameter servers are not part of the gang.
    gang_wait = (
        [r for r in missing if r.role != "ps" and r not in held]
        if spec.run_policy.restart_scope == "Gang" and (restart or any(p.deleting and p.role != "ps" for p in pods))
        else []
    )
    # No new pod (not even a replacement) until every gate is open for this generation.
    pod_contributions = {concern: c.pod for concern, c in obs.contributions.items()}
    grant = grant_of(obs.contributions)
    create = (
        []
        if waiting
        else [
            pin(pod, node) if (node := placed_node(grant, r.role, r.index)) else pod
            for r in missing
            if r not in held and r not in gang_wait
            for pod in [pod_manifest(owner, spec, r, pod_contributions, obs.settings)]
        ]
    )

    surplus = [p.name for p in remaining if Replica(p.role, p.index) not in wanted]
    wanted_services = {r.name(owner.name) for r in desired}
    services = (
        [] if waiting else [service_manifest(owner, spec, r) for r in desired if r.name(owner.name) not in obs.services]
    )
    extra_services = sorted(s for s in obs.services if s not in wanted_services)

    running = [p for p in remaining if Replica(p.role, p.index) in wanted]
    # Running: every replica has its pod and each runs or has already finished its part.
    all_running = (
        len(running) == len(desired)
        and all(p.phase in ("Running", "Succeeded") for p in running)
        and any(p.phase == "Running" for p in running)
    )
    # A replaced pod's predecessor may still be terminating: that replica is still restarting.
    terminating = [p.name for p in obs.pods if p.deleting and Replica(p.role, p.index) in wanted]
    phase: Phase = (
        "Restarting" if restart or held or gang_wait or terminating else "Running" if all_running else "Pending"
    )
    if all_running and start is None:
        start = stamp
    before = find(obs.conditions, "Created")
    if waiting and missing:
        created = Desired(
            "Created",
            before.status if before else "False",
            "WaitingForGates",
            f"{len(missing)} pods wait for " + "; ".join(waiting),
        )
    elif not missing or (before is not None and before.status == "True"):
        created = Desired.true("Created", "PodsCreated", f"all {len(desired)} pods were created")
    else:
        created = Desired.false("Created", "CreatingPods", f"creating {len(missing)} of {len(desired)} pods")
    conditions = [
        created,
        Desired.true("Running", "AllPodsRunning", f"{len(desired)} pods running")
        if phase == "Running"
        else Desired.false(
            "Running", "PodsNotRunning", f"{sum(p.phase == 'Running' for p in running)} of {len(desired)} pods running"
        ),
        not_suspended,
    ]
    stall_timeout = spec.run_policy.stall_timeout_seconds
    if stalled:
        conditions.append(Desired.true("Stalled", "NoHeartbeat", "; ".join(stalled.values())))
    elif stall_timeout is not None and find(obs.conditions, "Stalled") is not None:
        conditions.append(
            Desired.false("Stalled", "HeartbeatsOnTime", "no running pod has been silent for stallTimeoutSeconds")
        )
    if restart or held or gang_wait or terminating:
        if failed:
            why, reason = "; ".join(describe_failure(p) for p in failed), "PodFailed"
        elif held:
            why = f"waiting out the restart backoff before replacing {', '.join(r.name(owner.name) for r in held)}"
            reason = "RestartBackoff"
        elif gang_wait:
            why = f"restartScope is Gang: waiting for {', '.join(terminating) or 'the old pods'} to terminate"
            reason = "Replacing"
        else:
            why, reason = f"waiting for {', '.join(terminating)} to terminate before replacing it", "Replacing"
        conditions.append(Desired.true("Restarting", reason, why))
    elif find(obs.conditions, "Restarting") is not None:
        conditions.append(Desired.false("Restarting", "Recovered", "every pod is back"))
    if surplus:
        events.append(
            (
                "Normal",
                "ScaledDown",
                (
                    f"the quota admits {spec.topology.workers} of {obs.spec.topology.workers} workers: deleting "
                    if spec.topology.workers < obs.spec.topology.workers
                    else f"topology.workers is {spec.topology.workers}: deleting "
                )
                + ", ".join(sorted(surplus)),
            )
        )
    lease_names = [r.name(owner.name) for r in desired]
    return Decision(
        status=_status(obs, phase, remaining, history, start, None),
        conditions=tuple(conditions),
        create_pods=tuple(create),
        create_leases=tuple(
            lease_manifest(owner, r) for r in desired if r.name(owner.name) not in obs.leases and not waiting
        ),
        delete_leases=tuple(sorted(name for name in obs.leases if name not in lease_names)),
        # Claims stay when the run scales down (as a StatefulSet's do) and go with the Trainer.
        create_claims=tuple(
            claim_manifest(owner, spec, r)
            for r in desired
            if spec.storage is not None and claim_name(owner, r) not in obs.claims and not waiting
        ),
        runner=tuple(runner_manifests(owner, lease_names)) if create else (),
        create_services=tuple(services),
        delete_pods=tuple(sorted(restart_names | set(surplus))),
        delete_services=tuple(extra_services),
        restarted=tuple(sorted(restart_names)),
        force_delete=tuple(sorted((stranded & restart_names) | stuck)),
        events=tuple(events),
        requeue_after=_soonest(
            *backoff_wait.values(),
            _due(obs, start, spec.run_policy.active_deadline_seconds),
            *(_due(obs, _last_sign(obs, p), stall_timeout) for p in remaining if p.phase == "Running"),
        ),
    )


def _keep(conditions: Sequence[Condition], types: Sequence[str]) -> list[Desired]:
    out = []
    for t in types:
        c = find(conditions, t)
        if c is not None:
            out.append(Desired(c.type, c.status, c.reason, c.message))
    return out

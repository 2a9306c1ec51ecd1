"""The trainer controller's decision core: pure, table-tested, no I/O.

From the Trainer, the pods and Services it owns and the gates, decide which objects to create
or delete and what the status says. DESIGN §3 (gates, contributions), §5 (contracts) and §6
(failure semantics) are the contract.
"""

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field
from typing import Any

from trainerop_common.api import GROUP, PodContribution
from trainerop_common.api.base import Condition
from trainerop_common.api.trainer import Phase, ReplicaStatus, TrainerSpec, TrainerStatus
from trainerop_common.conditions import Desired, find

from .pods import Owner, PodSettings, pod_manifest, service_manifest
from .topology import ROLES, Replica, Role, desired_counts, has_master, replicas

CONDITIONS = ("Created", "Running", "Restarting", "Stalled", "Succeeded", "Failed", "Suspended")
OWNED_FIELDS = ("phase", "topology", "progress")
DEFAULT_BACKOFF_LIMIT = 6  # as batch/v1 Job


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

    @property
    def finished(self) -> bool:
        return self.phase in ("Succeeded", "Failed")


@dataclass(frozen=True)
class Observed:
    owner: Owner
    spec: TrainerSpec
    status: TrainerStatus
    conditions: Sequence[Condition]
    gates: Sequence[str]  # condition types of the deployed concerns
    now: str
    pods: Sequence[PodView] = ()
    services: Set[str] = frozenset()
    contributions: Mapping[str, PodContribution] = field(default_factory=dict)
    settings: PodSettings = field(default_factory=PodSettings)


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


def retryable(spec: TrainerSpec, pod: PodView) -> bool:
    """Kubeflow's rules: Never never retries; ExitCode retries 128-255 (signals, OOM kills) and
    failures without an exit code (evictions, lost nodes); OnFailure and Always retry."""
    policy = spec.run_policy.restart_policy
    if policy == "Never":
        return False
    if policy == "ExitCode":
        return pod.exit_code is None or pod.exit_code >= 128
    return True


def describe_failure(pod: PodView) -> str:
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


def counts(spec: TrainerSpec, pods: Sequence[PodView], restarts: Mapping[str, int]) -> dict[str, ReplicaStatus]:
    desired = desired_counts(spec)
    out: dict[str, ReplicaStatus] = {}
    for role in ROLES:
        mine = [p for p in pods if p.role == role and not p.deleting]
        if not desired[role] and not mine and not restarts.get(role):
            continue
        out[role] = ReplicaStatus(
            desired=desired[role],
            active=sum(not p.finished for p in mine),
            ready=sum(p.ready and p.phase == "Running" for p in mine),
            succeeded=sum(p.phase == "Succeeded" for p in mine),
            failed=sum(p.phase == "Failed" for p in mine),
            restarts=restarts.get(role, 0),
        )
    return out


def _status(
    obs: Observed,
    phase: Phase,
    pods: Sequence[PodView],
    restarts: Mapping[str, int],
    start: str | None,
    completion: str | None,
) -> dict[str, Any]:
    by_role = counts(obs.spec, pods, restarts)
    workers = by_role.get("worker", ReplicaStatus())
    topology = {
        "workers": workers.active,
        "readyWorkers": workers.ready,
        "selector": worker_selector(obs.owner.name),
    }
    if by_role:
        topology["replicas"] = {role: c.to_k8s() for role, c in by_role.items()}
    progress = dict(obs.status.progress.to_k8s()) if obs.status.progress else {}
    progress |= {"startTime": start} if start else {}
    progress |= {"completionTime": completion} if completion else {}
    status: dict[str, Any] = {"phase": phase, "topology": topology}
    if progress:
        status["progress"] = progress
    return status


def decide(obs: Observed) -> Decision:
    spec, owner = obs.spec, obs.owner
    live = [p for p in obs.pods if not p.deleting]
    by_replica = {Replica(p.role, p.index): p for p in live}
    previous = obs.status.topology.replicas if obs.status.topology and obs.status.topology.replicas else {}
    restarts = {role: c.restarts for role, c in previous.items()}
    progress = obs.status.progress
    start = progress.start_time if progress else None
    completion = progress.completion_time if progress else None
    finished_phase = obs.status.phase if obs.status.phase in ("Succeeded", "Failed") else None

    # A finished run stays finished; clean its pods as cleanPodPolicy says.
    if finished_phase is not None:
        policy = spec.run_policy.clean_pod_policy
        doomed = [p.name for p in live if policy == "All" or (policy == "Running" and not p.finished)]
        kept = [c for c in CONDITIONS if find(obs.conditions, c) is not None]
        return Decision(
            status=_status(obs, finished_phase, live, restarts, start, completion),
            conditions=tuple(_keep(obs.conditions, kept)),
            delete_pods=tuple(doomed),
        )

    if spec.run_policy.suspend:
        return Decision(
            status=_status(obs, "Suspended", live, restarts, None, None),
            conditions=(
                Desired.false("Created", "Suspended", "spec.runPolicy.suspend is true; set it to false to start"),
                Desired.true("Suspended", "SuspendedByUser", "spec.runPolicy.suspend is true; its pods are deleted"),
            ),
            delete_pods=tuple(p.name for p in live),
        )

    waiting = gate_wait(obs.conditions, obs.gates, owner.generation)
    if waiting and not live:
        return Decision(
            status=_status(obs, "Pending", live, restarts, start, None),
            conditions=(
                Desired.false("Created", "WaitingForGates", "waiting for " + "; ".join(waiting)),
                Desired.false("Suspended", "NotSuspended"),
            ),
        )

    desired = replicas(spec)
    wanted = set(desired)
    events: list[tuple[str, str, str]] = []

    # Failures: replace a retryable one (counted, within the backoff limit), fail on the rest.
    failed = sorted((p for p in live if p.phase == "Failed"), key=lambda p: (p.role, p.index))
    limit = spec.run_policy.backoff_limit if spec.run_policy.backoff_limit is not None else DEFAULT_BACKOFF_LIMIT
    permanent = next((p for p in failed if not retryable(spec, p)), None)
    if permanent is None and failed and sum(restarts.values()) + len(failed) > limit:
        permanent = failed[0]
        reason, message = (
            "BackoffLimitExceeded",
            (
                f"{describe_failure(permanent)} after {sum(restarts.values())} restarts; "
                f"spec.runPolicy.backoffLimit is {limit}"
            ),
        )
    elif permanent is not None:
        reason, message = (
            "PodFailed",
            (
                f"{describe_failure(permanent)}, which restartPolicy {spec.run_policy.restart_policy} does not retry"
                + (" (exit codes 1-127 are permanent)" if spec.run_policy.restart_policy == "ExitCode" else "")
                + "; fix the cause and create the Trainer again"
            ),
        )
    if permanent is not None:
        events.append(("Warning", reason, message))
        return Decision(
            status=_status(obs, "Failed", live, restarts, start, obs.now),
            conditions=(
                Desired.true("Created", "PodsCreated", "all pods were created"),
                Desired.false("Running", reason, message),
                Desired.true("Failed", reason, message),
                Desired.false("Suspended", "NotSuspended"),
            ),
            delete_pods=tuple(p.name for p in live if spec.run_policy.clean_pod_policy != "None" and not p.finished),
            events=tuple(events),
        )

    restart: list[PodView] = []
    for pod in failed:
        if pod.role != "ps" and spec.run_policy.restart_scope == "Gang":
            # The whole gang restarts together; parameter servers keep their state and stay.
            restart = [p for p in live if p.role != "ps" or p.phase == "Failed"]
            break
        restart.append(pod)
    restart_names = {p.name for p in restart}
    new_restarts = dict(restarts)
    for pod in failed:
        new_restarts[pod.role] = new_restarts.get(pod.role, 0) + 1
        events.append(("Warning", "RestartingPod", f"{describe_failure(pod)}; replacing it (same name and DNS)"))
    if len(restart) > len(failed):
        events.append(("Normal", "GangRestart", f"restartScope is Gang: restarting {len(restart)} pods"))

    remaining = [p for p in live if p.name not in restart_names]
    if succeeded(spec, by_replica):
        done_message = "the run finished successfully"
        return Decision(
            status=_status(obs, "Succeeded", remaining, new_restarts, start, obs.now),
            conditions=(
                Desired.true("Created", "PodsCreated", "all pods were created"),
                Desired.false("Running", "Succeeded", done_message),
                Desired.true("Succeeded", "Succeeded", done_message),
                Desired.false("Suspended", "NotSuspended"),
            ),
            delete_pods=tuple(
                p.name for p in remaining if spec.run_policy.clean_pod_policy != "None" and not p.finished
            ),
        )

    existing_names = {p.name for p in obs.pods}  # deleting pods still hold their names
    missing = [r for r in desired if r.name(owner.name) not in existing_names]
    # No new pod (not even a replacement) until every gate is open for this generation.
    create = (
        []
        if waiting
        else [pod_manifest(owner, spec, r, obs.contributions, _resume_from(obs), obs.settings) for r in missing]
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
    if restart:
        phase: Phase = "Restarting"
    elif all_running:
        phase = "Running"
    else:
        phase = "Pending"
    if all_running and start is None:
        start = obs.now
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
        Desired.false("Suspended", "NotSuspended"),
    ]
    if restart or find(obs.conditions, "Restarting") is not None:
        conditions.append(
            Desired.true("Restarting", "PodFailed", "; ".join(describe_failure(p) for p in failed))
            if restart
            else Desired.false("Restarting", "Recovered", "every pod is back")
        )
    return Decision(
        status=_status(obs, phase, remaining, new_restarts, start, None),
        conditions=tuple(conditions),
        create_pods=tuple(create),
        create_services=tuple(services),
        delete_pods=tuple(sorted(restart_names | set(surplus))),
        delete_services=tuple(extra_services),
        restarted=tuple(sorted(restart_names)),
        events=tuple(events),
    )


def _resume_from(obs: Observed) -> str:
    # Written by the checkpoint controller into this Trainer's status (the protocol's channel).
    checkpoint = obs.status.checkpoint
    return (checkpoint.resume_from or "") if checkpoint else ""


def _keep(conditions: Sequence[Condition], types: Sequence[str]) -> list[Desired]:
    out = []
    for t in types:
        c = find(conditions, t)
        if c is not None:
            out.append(Desired(c.type, c.status, c.reason, c.message))
    return out

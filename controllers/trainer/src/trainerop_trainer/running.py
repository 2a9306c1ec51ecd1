"""The run goes on (pure): failed pods are replaced (alone, or with their gang) after their role's
restart backoff, missing replicas get their pods (pinned where the quota placed them) once every
gate is open, surplus ones go, and the conditions say how far it is."""

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from trainerop_common.api import PodContribution
from trainerop_common.api.trainer import Phase
from trainerop_common.conditions import Desired, find
from trainerop_common.outcome import Event

from .guard import guard_change
from .pods import claim_manifest, claim_name, pin, pod_manifest, role_contributions, runner_manifests, service_manifest
from .policy import describe_failure, earlier_admission, grant_of, placed_node
from .run import Decision, Observed, Run, last_sign, next_due
from .topology import Replica, replicas
from .views import PodView, RoleHistory


@dataclass
class Restarts:
    """The failed pods and what goes with them: their gang, their roles' history, the Events."""

    failed: list[PodView]
    restart: list[PodView] = field(default_factory=list)
    history: dict[str, RoleHistory] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)

    @property
    def names(self) -> set[str]:
        return {p.name for p in self.restart}


# Roles a gang restart leaves running.
OUTSIDE_THE_RING = ("ps", "evaluator")


def restarts(run: Run) -> Restarts:
    """Replace each retryable failure (within the backoff limit, judged before): the pod alone, or
    with restartScope Gang every pod of the training ring, not the parameter servers (they keep
    their state) or the evaluators (outside the ring): a failure of one of those replaces it alone."""
    failed = sorted((p for p in run.live if p.phase == "Failed"), key=lambda p: (p.role, p.index))
    out = Restarts(failed, history=dict(run.history))
    gang = run.spec.run_policy.restart_scope == "Gang"
    for pod in failed:
        if pod.role not in OUTSIDE_THE_RING and gang:
            out.restart = [p for p in run.live if p.role not in OUTSIDE_THE_RING or p.phase == "Failed"]
            break
        out.restart.append(pod)
    backoff = run.obs.backoff
    for pod in run.uncounted(failed):  # each failure is counted once, in the write before its deletion
        past = out.history.get(pod.role, RoleHistory())
        quiet = run.due(past.last_failure, backoff.reset_after)
        recent = 1 if quiet is None or quiet <= 0 else past.recent + 1
        out.history[pod.role] = RoleHistory(past.restarts + 1, run.now, recent, past.counted | {pod.uid})
        out.events.append(("Warning", "RestartingPod", f"{describe_failure(pod)}; replacing it (same name and DNS)"))
    if len(out.restart) > len(failed):
        out.events.append(("Normal", "GangRestart", f"restartScope is Gang: restarting {len(out.restart)} pods"))
    return out


@dataclass(frozen=True)
class Replacements:
    """The replicas without a pod, and which of them get one now."""

    desired: list[Replica]
    missing: list[Replica]
    held: list[Replica]  # waiting out their role's restart backoff
    gang_wait: list[Replica]  # waiting for every old pod of their gang to be gone
    backoff_wait: list[float | None]  # seconds until each role's backoff ends
    create: list[dict[str, Any]]


def replacements(run: Run, r: Restarts, waiting: Sequence[str]) -> Replacements:
    owner = run.obs.owner
    desired = replicas(run.spec)
    existing = {p.name for p in run.pods}  # deleting pods still hold their names
    missing = [x for x in desired if x.name(owner.name) not in existing]
    backoff = {
        role: run.due(h.last_failure, run.obs.backoff.delay(h.recent))
        for role, h in r.history.items()
        if h.recent and h.last_failure is not None
    }
    held = [x for x in missing if (backoff.get(x.role) or 0) > 0]
    # A gang starts again only once every old pod of it is gone: a new pod must not meet a
    # predecessor (seen on the real node: JAX's coordinator aborts the whole job when a task of
    # the earlier incarnation connects to it). Parameter servers are not part of the gang.
    gang_restarting = r.restart or any(p.deleting and p.role != "ps" for p in run.pods)
    gang = run.spec.run_policy.restart_scope == "Gang" and gang_restarting
    gang_wait = [x for x in missing if x.role != "ps" and x not in held] if gang else []
    # No new pod (not even a replacement) until every gate is open for this generation.
    grant = grant_of(run.obs.contributions)
    create = []
    by_role: dict[str, dict[str, PodContribution]] = {}  # merged once per role, not per replica
    for x in [] if waiting else missing:
        if x not in held and x not in gang_wait:
            if x.role not in by_role:
                by_role[x.role] = role_contributions(run.obs.contributions, x.role)
            pod = pod_manifest(owner, run.spec, x, by_role[x.role], run.obs.settings, run.obs.pod_security)
            node = placed_node(grant, x.role, x.index)
            create.append(pin(pod, node) if node else pod)
    return Replacements(desired, missing, held, gang_wait, list(backoff.values()), create)


def created(run: Run, plan: Replacements, waiting: Sequence[str]) -> Desired:
    before = find(run.obs.conditions, "Created")
    n, total = len(plan.missing), len(plan.desired)
    if waiting and n:
        return Desired(
            "Created",
            before.status if before else "False",
            "WaitingForGates",
            f"{n} pods wait for " + "; ".join(waiting),
        )
    if not n or (before is not None and before.status == "True"):
        return Desired.true("Created", "PodsCreated", f"all {total} pods were created")
    return Desired.false("Created", "CreatingPods", f"creating {n} of {total} pods")


def restarting(run: Run, r: Restarts, plan: Replacements, terminating: Sequence[str]) -> Desired | None:
    """Restarting, and why: a failure, a backoff, a gang waiting for its old pods, a predecessor."""
    owner = run.obs.owner
    if r.failed:
        return Desired.true("Restarting", "PodFailed", "; ".join(describe_failure(p) for p in r.failed))
    if plan.held:
        names = ", ".join(x.name(owner.name) for x in plan.held)
        return Desired.true("Restarting", "RestartBackoff", f"waiting out the restart backoff before replacing {names}")
    if plan.gang_wait:
        old = ", ".join(terminating) or "the old pods"
        return Desired.true("Restarting", "Replacing", f"restartScope is Gang: waiting for {old} to terminate")
    held = sorted(p for p in run.stuck - run.forceable if any(q.name == p and q.deleting for q in run.obs.pods))
    if held:
        nodes = ", ".join(sorted({p.node for p in run.obs.pods if p.name in held}))
        return Desired.true(
            "Restarting",
            "WaitingForLostNode",
            f"{', '.join(held)} may still run on {nodes}, which stopped answering: replaced once the node confirms "
            f"it stopped or the node is deleted (kubectl delete node {nodes}, if the machine is gone)",
        )
    if terminating:
        return Desired.true(
            "Restarting", "Replacing", f"waiting for {', '.join(terminating)} to terminate before replacing it"
        )
    return None


def conditions(
    run: Run, r: Restarts, plan: Replacements, waiting: Sequence[str], phase: Phase, on: list[PodView]
) -> list[Desired]:
    total = len(plan.desired)
    found = run.obs.conditions
    out = [
        created(run, plan, waiting),
        Desired.true("Running", "AllPodsRunning", f"{total} pods running")
        if phase == "Running"
        else Desired.false(
            "Running", "PodsNotRunning", f"{sum(p.phase == 'Running' for p in on)} of {total} pods running"
        ),
        run.not_suspended,
    ]
    if run.stalled:
        out.append(Desired.true("Stalled", "NoHeartbeat", "; ".join(run.stalled.values())))
    elif run.spec.run_policy.stall_timeout_seconds is not None and find(found, "Stalled") is not None:
        out.append(
            Desired.false("Stalled", "HeartbeatsOnTime", "no running pod has been silent for stallTimeoutSeconds")
        )
    terminating = [p.name for p in run.obs.pods if p.deleting and Replica(p.role, p.index) in set(plan.desired)]
    why = restarting(run, r, plan, terminating) if phase == "Restarting" else None
    if why is not None:
        out.append(why)
    elif find(found, "Restarting") is not None:
        out.append(Desired.false("Restarting", "Recovered", "every pod is back"))
    return out


def scaled_down(run: Run, surplus: Sequence[str]) -> list[Event]:
    if not surplus:
        return []
    workers, asked = run.spec.topology.workers, run.obs.spec.topology.workers
    why = f"the quota admits {workers} of {asked} workers" if workers < asked else f"topology.workers is {workers}"
    return [("Normal", "ScaledDown", f"{why}: deleting " + ", ".join(sorted(surplus)))]


def guarded(obs: Observed) -> bool:
    """Whether a drain waits for the run to save first (guard.py): it checkpoints, and the quota
    places it on nodes (its grant's placement), so it moves it after the save. (Kueue's grants, and
    one kept after the run's QuotaPolicy went, place nothing: no cordon moves those runs.)"""
    grant = grant_of(obs.contributions)
    return obs.spec.checkpoint is not None and grant is not None and bool(grant.placement)


def running(run: Run, waiting: Sequence[str]) -> Decision:
    owner = run.obs.owner
    r = restarts(run)
    plan = replacements(run, r, waiting)
    remaining = [p for p in run.live if p.name not in r.names]
    wanted = set(plan.desired)
    surplus = [p.name for p in remaining if Replica(p.role, p.index) not in wanted]
    on = [p for p in remaining if Replica(p.role, p.index) in wanted]
    # Running: every replica has its pod and each runs or has already finished its part.
    all_running = (
        len(on) == len(plan.desired)
        and all(p.phase in ("Running", "Succeeded") for p in on)
        and any(p.phase == "Running" for p in on)
    )
    # A replaced pod's predecessor may still be terminating: that replica is still restarting.
    terminating = any(p.deleting and Replica(p.role, p.index) in wanted for p in run.obs.pods)
    phase: Phase = (
        "Restarting"
        if r.restart or plan.held or plan.gang_wait or terminating
        else "Running"
        if all_running
        else "Pending"
    )
    start = run.now if all_running and run.start is None else run.start
    names = [x.name(owner.name) for x in plan.desired]
    stall = run.spec.run_policy.stall_timeout_seconds
    moving = bool(earlier_admission(run.obs.pods, run.obs.contributions))  # its old pods still there
    found = (run.obs.guard, run.obs.now)
    return Decision(
        status=run.status(phase, remaining, start, None, r.history),
        conditions=tuple(conditions(run, r, plan, waiting, phase, on)),
        create_pods=tuple(plan.create),
        delete_leases=tuple(sorted(name for name in run.obs.leases if name not in names)),
        # Claims stay when the run scales down (as a StatefulSet's do) and go with the Trainer.
        create_claims=tuple(
            claim_manifest(owner, run.spec, x)
            for x in plan.desired
            if run.spec.storage is not None and claim_name(owner, x) not in run.obs.claims and not waiting
        ),
        runner=tuple(runner_manifests(owner.namespace)) if plan.create else (),
        create_services=() if waiting or owner.name in run.obs.services else (service_manifest(owner, run.spec),),
        guard=None if waiting else guard_change(owner, guarded(run.obs), moving, len(plan.desired), *found),
        delete_pods=tuple(sorted(r.names | set(surplus))),
        # A Service per replica is what earlier versions made: kept while its replica exists (its pods
        # resolve the old names), gone with a scale-down.
        delete_services=tuple(sorted(s for s in run.obs.services if s not in {owner.name, *names})),
        restarted=tuple(sorted(r.names)),
        force_delete=tuple(sorted(((run.stranded & r.names) | run.stuck) & run.forceable)),
        events=tuple(r.events + scaled_down(run, surplus)),
        requeue_after=next_due(
            *plan.backoff_wait,
            run.due(start, run.spec.run_policy.active_deadline_seconds),
            *(run.due(last_sign(run.obs, p), stall) for p in remaining if p.phase == "Running"),
        ),
    )

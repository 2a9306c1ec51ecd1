"""The trainer controller's decision core: pure, table-tested, no I/O.

From the Trainer, the pods and Services it owns and the gates, decide which objects to create
or delete and what the status says (docs/trainer.md; docs/design/status-protocol.md for gates,
docs/design/contributions.md for what other concerns put into the pods).

:func:`assess` says what the run is now (:class:`Run`); then the first stage that applies decides:
a finished run stays finished, a suspended one has no pods, closed gates hold a run without pods,
a failure the policy does not retry (or one too many) fails it, success ends it; otherwise the run
goes on (:mod:`trainerop_trainer.running`).
"""

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from trainerop_common.api.trainer import Phase
from trainerop_common.conditions import Desired, find
from trainerop_common.contracts import CONTRACTS
from trainerop_common.outcome import Event, soonest
from trainerop_common.topology import restart_policy

from .glance import summarized
from .guard import GuardChange, drain_wait, guard_change
from .model import CONDITION as MODEL_CONDITION
from .model import model_condition, model_problem, run_model
from .overrides import override_problems
from .policy import (
    backoff_limit,
    counts_hold,
    describe_failure,
    earlier_admission,
    effective_run_policy,
    gate_wait,
    outdated,
    retryable,
    succeeded,
    unanswered_grace,
)
from .report import kept
from .run import CONDITIONS, SECTION, Decision, Observed, Run, assess, next_due
from .running import guarded, running
from .topology import Replica
from .views import LeaseView, PodView, RestartBackoff, pod_view


def once_created(obs: Observed, decision: Decision) -> Decision:
    """The decision with the status it leads to: its pods are created before the status is written,
    so the status says what the run is once they exist (``Created`` true, the pods pending), in the
    same write, not in one more after the watch delivers them. Not after a restart: the status then
    carries the new failure history, which deciding again from the old status would drop."""
    if not decision.create_pods or decision.restarted:
        return decision
    container = CONTRACTS[obs.spec.framework].container
    created = [v for pod in decision.create_pods if (v := pod_view(pod, container)) is not None]
    after = decide(replace(obs, pods=[*obs.pods, *created]))
    return replace(
        decision,
        status=after.status,
        conditions=after.conditions,
        requeue_after=soonest(decision.requeue_after, after.requeue_after),
    )


def held_counts(
    obs: Observed, body_status: Mapping[str, Any], decision: Decision, since_written: float | None, every: float
) -> Decision:
    """The decision with its status write held when it only moves pod counts and the trainer
    wrote this Trainer less than ``every`` seconds ago (policy.counts_hold); it is looked at
    again when the hold ends. A decision that creates or deletes anything is never held."""
    d = decision
    acts = d.create_pods or d.delete_pods or d.create_services or d.delete_services or d.create_claims or d.guard
    if acts or d.delete_leases or d.delete_trainer or d.events or d.on_change or not d.write_status:
        return decision
    mine = [c for c in obs.conditions if c.type in CONDITIONS]
    generation = obs.owner.generation
    hold = counts_hold(body_status, mine, decision.status, decision.conditions, generation, since_written, every)
    if hold is None:
        return decision
    return replace(decision, write_status=False, requeue_after=soonest(decision.requeue_after, hold))


def decide(obs: Observed) -> Decision:
    """The decision, with pods of an earlier quota admission deleted first (never counted as
    failures) while the run is neither finished nor suspended — but those on a cordoned node of
    a guarded run, left to the drain's eviction for a while (guard.py)."""
    active = obs.status.phase not in ("Succeeded", "Failed") and not obs.spec.run_policy.suspend
    old, why = outdated([p for p in obs.pods if not p.deleting], obs.contributions) if active else ([], "")
    if not old:
        decision = _decide(obs)
        return with_model(obs, summarized(obs, decision if active else replace(decision, guard=unguarded(obs))))
    gone = {p.name for p in old}
    moving = guarded(obs) and bool(earlier_admission(old, obs.contributions))  # not a pod merely re-placed
    wait = drain_wait(obs.guard, obs.now) if moving else 0.0
    left = {p.name for p in old if p.node in obs.cordoned} if wait > 0 else set()
    obs = replace(obs, pods=[replace(p, deleting=True) if p.name in gone else p for p in obs.pods])
    decision = _decide(obs)
    moved = replace(
        decision,
        delete_pods=tuple(sorted((set(decision.delete_pods) | gone) - left)),
        events=(("Normal", "QuotaReadmission", why), *decision.events),
        requeue_after=soonest(decision.requeue_after, wait if left else None),
        # lowered while the run moves, whatever stage decided: the drain may take the pods left to it
        guard=guard_change(obs.owner, True, True, 0, obs.guard, obs.now) if moving else decision.guard,
    )
    return with_model(obs, summarized(obs, moved))


def with_model(obs: Observed, decision: Decision) -> Decision:
    """The decision with the run's ModelVerified condition (model.py), and a Warning Event when it
    newly says the model was refused."""
    if not decision.write_status:
        return decision
    condition, refusal = model_condition(run_model(obs.spec, obs.status), obs.pods, obs.conditions)
    kept_conditions = tuple(c for c in decision.conditions if c.type != MODEL_CONDITION)
    warning = (("Warning", refusal.reason, refusal.message),) if refusal is not None else ()
    return replace(
        decision,
        conditions=kept_conditions + ((condition,) if condition is not None else ()),
        on_change=(*decision.on_change, *warning),
    )


def unguarded(obs: Observed) -> GuardChange | None:
    """A finished or suspended run's guard: 0 (pods a clean policy keeps guard nothing to save for)."""
    return guard_change(obs.owner, False, False, 0, obs.guard, obs.now)


def _decide(obs: Observed) -> Decision:
    run = assess(obs)
    waiting = gate_wait(obs.conditions, obs.gates, obs.owner.generation)
    return (
        finished(run)
        or suspended(run)
        or refused(run)
        or held_at_gates(run, waiting)
        or failed(run)
        or succeeded_now(run)
        or running(run, waiting)
    )


def finished(run: Run) -> Decision | None:
    """A finished run stays finished; its pods go as cleanPodPolicy says, the Trainer after its TTL."""
    phase = run.obs.status.phase
    if phase not in ("Succeeded", "Failed"):
        return None
    doomed = run.clean(run.live)
    ttl = run.due(run.completion, run.spec.run_policy.ttl_seconds_after_finished)
    return Decision(
        status=run.status(phase, run.live, run.start, run.completion),
        conditions=tuple(kept(run.obs.conditions, [c for c in CONDITIONS if find(run.obs.conditions, c)])),
        delete_pods=doomed,
        force_delete=run.forced(doomed),
        requeue_after=next_due(ttl),
        delete_trainer=ttl is not None and ttl <= 0,
    )


def suspended(run: Run) -> Decision | None:
    if not run.spec.run_policy.suspend:
        return None
    live = run.live
    note = f"spec.runPolicy.suspend is true: deleting {len(live)} pods"
    return Decision(
        status=run.status("Suspended", live, None, None),
        conditions=(
            Desired.false("Created", "Suspended", "spec.runPolicy.suspend is true; set it to false to start"),
            Desired.true("Suspended", "SuspendedByUser", "spec.runPolicy.suspend is true; its pods are deleted"),
        ),
        delete_pods=tuple(p.name for p in live),
        force_delete=tuple(sorted(run.stranded | run.stuck)),
        events=(("Normal", "Suspended", note),) if live else (),
    )


def refused(run: Run) -> Decision | None:
    """Overrides that set what they may not, or a model source that cannot be fetched (stored
    before the rule, or with the webhook away): no pod is created from them; pods already running
    go on."""
    problems = override_problems(run.obs.spec, run.obs.pod_security)
    own = run.obs.spec.model is not None
    model = model_problem(run.spec.model, "spec.model" if own else f"profile {run.obs.spec.profile}'s spec.model")
    if not problems and model is None:
        return None
    reason = "OverrideNotAllowed" if problems else "InvalidModel"
    message = "; ".join([*problems, *([model] if model else [])]) + "; remove or change those fields"
    return Decision(
        status=run.status("Pending" if not run.live else run.obs.status.phase or "Pending", run.live, run.start, None),
        conditions=(Desired.false("Created", reason, message), run.not_suspended),
        on_change=(("Warning", reason, message),),
    )


def held_at_gates(run: Run, waiting: Sequence[str]) -> Decision | None:
    """Closed gates hold a run that has no pods yet (a run with pods goes on; no new pod starts).
    A new Trainer whose gates have not answered yet gets no status for a moment: most often its
    first status is then the pods created (policy.unanswered_grace)."""
    if not waiting or run.live:
        return None
    obs = run.obs
    first = obs.status.phase is None  # the trainer has written nothing for it yet
    grace = unanswered_grace(obs.conditions, obs.gates, obs.owner.generation, obs.age, obs.gates_grace)
    if first and grace is not None:
        return Decision(status={}, conditions=(), write_status=False, requeue_after=grace)
    return Decision(
        status=run.status("Pending", run.live, run.start, None),
        conditions=(
            Desired.false("Created", "WaitingForGates", "waiting for " + "; ".join(waiting)),
            run.not_suspended,
        ),
    )


def _end(run: Run, phase: Phase, reason: str, message: str, event: Event) -> Decision:
    """The run ends now (its TTL counts from now): its pods go as cleanPodPolicy says."""
    doomed = run.clean(run.live)
    ttl = run.spec.run_policy.ttl_seconds_after_finished
    ending = Desired.true(phase, reason, message)
    return Decision(
        status=run.status(phase, run.live, run.start, run.now),
        conditions=(
            Desired.true("Created", "PodsCreated", "all pods were created"),
            Desired.false("Running", reason, message),
            ending,
            run.not_suspended,
        ),
        delete_pods=doomed,
        force_delete=run.forced(doomed),
        events=(event,),
        requeue_after=float(ttl) if ttl is not None else None,
    )


def failed(run: Run) -> Decision | None:
    """The run fails: past its deadline, a failure its restart policy does not retry, or more
    restarts than its backoff limit."""
    policy = run.spec.run_policy
    deadline = run.due(run.start, policy.active_deadline_seconds)
    failures = sorted((p for p in run.live if p.phase == "Failed"), key=lambda p: (p.role, p.index))
    permanent = next((p for p in failures if not retryable(run.spec, p)), None)
    restarts = sum(h.restarts for h in run.history.values())
    limit = backoff_limit(run.spec)
    if deadline is not None and deadline <= 0:
        reason = "DeadlineExceeded"
        message = (
            f"the run was active longer than spec.runPolicy.activeDeadlineSeconds "
            f"({policy.active_deadline_seconds}s since {run.start})"
        )
    elif permanent is not None:
        reason = "PodFailed"
        rule = restart_policy(run.spec, permanent.role)  # the role's own, else the run's
        message = (
            f"{describe_failure(permanent)}, which restartPolicy {rule} does not retry"
            + (" (exit codes 1-127 are permanent)" if rule == "ExitCode" else "")
            + "; fix the cause and create the Trainer again"
        )
    elif failures and restarts + len(run.uncounted(failures)) > limit:
        reason = "BackoffLimitExceeded"
        message = f"{describe_failure(failures[0])} after {restarts} restarts; {run.limit_from} is {limit}"
    else:
        return None
    return _end(run, "Failed", reason, message, ("Warning", reason, message))


def succeeded_now(run: Run) -> Decision | None:
    if not succeeded(run.spec, {Replica(p.role, p.index): p for p in run.live}):
        return None
    message = "the run finished successfully"
    return _end(run, "Succeeded", "Succeeded", message, ("Normal", "Succeeded", message))


__all__ = [
    "CONDITIONS",
    "SECTION",
    "Decision",
    "LeaseView",
    "Observed",
    "PodView",
    "RestartBackoff",
    "Run",
    "assess",
    "decide",
    "effective_run_policy",
    "once_created",
]

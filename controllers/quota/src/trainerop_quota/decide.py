"""The quota controller's decision core: pure, table-tested, no I/O.

``plan(obs)`` decides for every Trainer at once, because admission is a shared resource:

1. Trainers already admitted keep their admission (no preemption) and their reservation is
   counted first. One whose pods sit on a lost or reclaimed spot node is re-checked: if its
   pods still fit on its capacity type it stays; otherwise it is renegotiated — at once when its
   pods are gone, after a checkpoint commits (or the policy's grace runs out) when they still run.
2. Renegotiations, then waiting Trainers by priority then age (best-effort FIFO: a smaller run
   behind a big one may start first), get the first capacity type in their preference order
   where the namespace's budget and the nodes hold the whole minimum gang: the most workers
   within the elastic bounds, at full size before lowered resources. Nothing fits: they wait,
   with no pod started (all-or-nothing).

Node fit is simulated pod by pod (best fit) on the free capacity the pods already on each node
leave; an admitted run's pods that are not yet on a node are placed first.
"""

from dataclasses import replace

from trainerop_common.api.trainer import RenegotiationStatus

from . import kueue
from .admit import admit, released, ungoverned
from .ledger import invalid
from .model import (
    CONDITION,
    SECTION,
    UNGOVERNED,
    Decision,
    Observed,
    Plan,
    PolicyInfo,
    PolicySummary,
    TrainerInfo,
    condition,
    over,
    placed_by_plan,
    policy_for,
    priority,
    unadmitted,
)
from .planner import Planner
from .renegotiate import hold_current, keep, move

__all__ = ["CONDITION", "SECTION", "Decision", "Observed", "Plan", "PolicyInfo", "TrainerInfo", "plan"]


def plan(obs: Observed) -> Plan:
    p = Planner(obs)
    governed = sort_out(p, obs)
    admitted = sorted(
        ((t, policy) for t, policy in governed if not unadmitted(t)),
        key=lambda tp: (tp[0].quota.admitted_time or "", tp[0].namespace, tp[0].name),
    )
    held = {t.uid: hold_current(p, t, policy) for t, policy in admitted}
    renegotiate: list[tuple[TrainerInfo, PolicyInfo, RenegotiationStatus]] = []
    for t, policy in admitted:
        moving = keep(p, t, policy, held[t.uid])
        if moving is not None:
            renegotiate.append((t, policy, moving))

    waiting = [(t, policy) for t, policy in governed if unadmitted(t)]
    for t, policy, why in renegotiate:
        move(p, t, policy, why)
    waiting.sort(key=lambda tp: (-(priority(tp[1], tp[0].spec) or 0), tp[0].created, tp[0].namespace, tp[0].name))
    for t, policy in waiting:
        # else planned once the placement plugin answers, or once its profile has (the profile's
        # node selector, tolerations, resources and packing say where the run may go)
        if t.uid not in obs.asking and not t.profile_pending:
            admit(p, t, policy)
    for t, policy in governed:
        if policy.implicit and t.uid in p.decisions:
            p.decisions[t.uid] = as_ungoverned(p.decisions[t.uid])

    summaries = {name: s for name, s in sorted(p.summaries.items()) if name != UNGOVERNED.name}
    return Plan(p.decisions, {n: PolicySummary(s["admitted"], s["pending"], s["used"]) for n, s in summaries.items()})


def sort_out(p: Planner, obs: Observed) -> list[tuple[TrainerInfo, PolicyInfo]]:
    """Decide the runs that reserve nothing (over, suspended, admitted at once without a policy,
    unsizable); return the others with the policy they are planned under (``UNGOVERNED`` where
    none covers them and runs are admitted all-or-nothing)."""
    governed: list[tuple[TrainerInfo, PolicyInfo]] = []
    by_namespace: dict[str, PolicyInfo | None] = {}  # the governing policy, found once per namespace
    for t in obs.trainers:
        if t.namespace not in obs.namespace_labels:
            continue  # its namespace is not seen yet: no decision without its labels
        if t.namespace not in by_namespace:
            by_namespace[t.namespace] = policy_for(obs.policies, obs.namespace_labels[t.namespace])
        policy = by_namespace[t.namespace]
        queue = t.queue if obs.kueue else None
        if queue is not None and (job := kueue.job_workload(t, obs.workloads)) is not None:
            p.decisions[t.uid] = kueue.decide_by_job(t, job)  # Kueue admits its job: the same run
        elif queue is not None and (
            over(t) or invalid(t) is None
        ):  # Kueue decides (docs/design/placement.md, decision 6)
            w = obs.workloads.get(t.uid)
            nodes = (p.sites, obs.levels) if w is not None and w.topology_assigned else ({}, ())
            p.decisions[t.uid] = kueue.decide(t, queue, w, obs.flavors, obs.priorities, nodes)
        elif over(t):
            p.decisions[t.uid] = released(p, t, policy)
        elif queue is None and not placed_by_plan(t, policy, obs.ungoverned):
            p.decisions[t.uid] = ungoverned(p, t)
        elif (problem := invalid(t)) is not None:
            p.decisions[t.uid] = Decision(
                p.pending_status(t, policy or UNGOVERNED, t.quota.priority),
                condition("False", "InvalidResources", problem),
            )
            p.summary(policy or UNGOVERNED)["pending"] += 1
        else:
            governed.append((t, policy or UNGOVERNED))
    return governed


def as_ungoverned(d: Decision) -> Decision:
    """A run no QuotaPolicy covers, admitted all-or-nothing: its condition says NoQuotaPolicy as
    before (a run admitted at once said so), and no Admitted Event is posted for it (one more
    write for every run of a cluster without quota)."""
    if d.condition.reason != "Admitted":
        return d
    kept = tuple(e for e in d.events if e[1] != "Admitted")
    return replace(d, condition=replace(d.condition, reason="NoQuotaPolicy"), events=kept)

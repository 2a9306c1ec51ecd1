"""Admitted runs during a plan (pure): pass 1 takes what each holds from the ledger before any run
grows, moves or is admitted; pass 2 re-places replicas that lost their place, grows a run that was
scaled up or has elastic room, and renegotiates one whose pods sit on a lost or reclaimed spot
node — at once when its pods are gone, after a checkpoint commits (or the policy's grace runs out)
when they still run: shrink within the elastic bounds, else move, else revoke."""

from dataclasses import replace
from datetime import datetime, timedelta
from decimal import Decimal

from trainerop_common.api.trainer import RenegotiationStatus
from trainerop_common.clock import parse_time, rfc3339
from trainerop_common.contracts import save_request_id
from trainerop_common.nodes import gone_reason
from trainerop_common.topology import worker_bounds

from .ledger import Option, hints_of, options, shape
from .model import MAX_NODES_NAMED, Decision, PolicyInfo, TrainerInfo, condition, preference, priority
from .planner import NEAR_WEIGHT, Held, Places, Planner


def hold_current(p: Planner, t: TrainerInfo, policy: PolicyInfo) -> Held:
    """Pass 1 for an admitted run: what it holds now — its pods on healthy nodes, and its admitted
    nodes that still have room for its other replicas — taken from the ledger before any run
    grows, moves or is admitted."""
    grant, kind = t.grant, t.quota.capacity_type
    assert grant is not None
    assert kind is not None
    option = Option(kind, grant.workers, grant.resources, 100 if grant.resources is None else 0)
    s = shape(t, option.workers, option.resources)
    bound = p.bound(t, grant.id)
    hints = hints_of(grant)
    slots = set(s.slots())
    held = Held(option, s, bound, hints, {k: v for k, v in bound.items() if k in slots})
    for slot in s.slots():
        if slot in held.placed:
            continue
        role = slot[0]
        hint = hints.get(slot)
        if hint and p.ledger.take(hint, kind, s.requests[role], s.selectors[role]):
            held.placed[slot] = hint
            held.credits.append((hint, s.requests[role]))
        else:
            held.missing.append(slot)
    p.count(t, policy, kind, s.reserved, +1)
    return held


def keep(p: Planner, t: TrainerInfo, policy: PolicyInfo, held: Held) -> RenegotiationStatus | None:
    """Pass 2 for an admitted run: new places for replicas that lost theirs, growth, a scale;
    returns why it must be renegotiated (after taking its reservation back), else records it."""
    assert t.grant is not None
    lost, reclaimed = endangered(p, t, held)
    if reclaimed and not lost and t.spec.checkpoint is not None:
        # save first, then move all of it, even where its own capacity has room for the replicas
        # on the reclaimed nodes (docs/design/disruption.md)
        return reclaim(p, t, policy, held, lost, reclaimed)
    replace_missing(p, held)
    if held.missing and (lost or reclaimed):
        return reclaim(p, t, policy, held, lost, reclaimed)
    for slot in held.missing:  # waiting for room (a foreign pod took its node): still owed
        p.ledger.owe(held.option.kind, held.shape.requests[slot[0]])
    prio = priority(policy, t.spec) or 0
    lo, hi = worker_bounds(t.spec)
    if held.option.workers > hi:  # scaled down: the smaller run always fits where it was
        p.unhold(t, policy, held)
        smaller = replace(held.option, workers=hi)
        placement = p.reserve(t, policy, smaller, Places(held.bound, held.hints))
        p.decisions[t.uid] = p.admitted_decision(t, policy, prio, smaller, placement, None, "Admitted")
        return None
    for workers in range(hi, held.option.workers, -1):  # grow (a scale, or elastic room)
        if grow(p, t, policy, held, workers):
            break
    reason = "WaitingForCapacity" if held.option.workers < lo else "Admitted"
    p.record(t, policy, prio, held, None, reason)
    return None


def endangered(p: Planner, t: TrainerInfo, held: Held) -> tuple[list[str], list[str]]:
    """The lost nodes under the run (a replica with no pod left anywhere whose admitted node is
    gone — its pod went with the node, or never started — needs a new place as much as a pod on a
    lost node), and the nodes being reclaimed."""
    lost, reclaimed = p.endangered(t)
    gone = {
        held.hints[slot]
        for slot in held.missing
        if slot in held.hints
        and not p.alive(t, slot)
        and (held.hints[slot] not in p.nodes or held.hints[slot] in p.lost)
    }
    return sorted(set(lost) | gone), reclaimed


def replace_missing(p: Planner, held: Held) -> None:
    """Places on other nodes of the same capacity type for the replicas that have none, if all fit."""
    if not held.missing:
        return
    s = held.shape
    wants = [(slot, s.requests[slot[0]], s.selectors[slot[0]], None) for slot in held.missing]
    kept = list(held.placed.values())
    near = dict.fromkeys(kept, NEAR_WEIGHT)  # a replacement goes where its run is (its domain, if required)
    ok, where = p.ledger.place(held.option.kind, wants, False, (), s.packing, near, kept)
    if ok:
        p.ledger.place(held.option.kind, wants, True, (), s.packing, near, kept)
        held.placed.update(where)
        held.credits.extend((where[slot], s.requests[slot[0]]) for slot in held.missing)
        held.missing.clear()


def reclaim(
    p: Planner, t: TrainerInfo, policy: PolicyInfo, held: Held, lost: list[str], reclaimed: list[str]
) -> RenegotiationStatus | None:
    """A run whose replicas lost their nodes (or whose spot nodes are reclaimed) and have no other
    place: renegotiated now — or, reclaimed under a run with checkpoints, once one commits or the
    policy's grace runs out (recorded meanwhile, returns None)."""
    before = t.quota.renegotiation
    since = before.since if before is not None else p.now
    nodes = sorted(set(lost) | set(reclaimed))[:MAX_NODES_NAMED]
    why = "; ".join([p.lost.get(n) or gone_reason(n) for n in lost] + [p.leaving(n) for n in reclaimed])
    grace = policy.spec.reclaim.checkpoint_grace_seconds
    left = (parse_time(since) + timedelta(seconds=grace) - p.obs.now).total_seconds()
    checkpoints = t.spec.checkpoint is not None
    notice = before.reason if before is not None else notice_of(p, reclaimed)
    save = save_state(t, notice, since, p.obs.now)
    if not lost and checkpoints and save == "waiting" and left > 0:
        message = f"{why}; waiting up to {grace}s for a checkpoint to commit before the run moves"
        deadline = rfc3339(parse_time(since) + timedelta(seconds=grace))
        waiting = RenegotiationStatus(
            reason=notice,
            message=message,
            since=since,
            nodes=nodes,
            waiting_for_checkpoint=True,
            deadline=deadline,
        )
        # (a checkpoint already committed since counts once the checkpoint controller had its time to ask)
        asking = ASK_SECONDS - (p.obs.now - parse_time(since)).total_seconds()
        again = min(left, asking) if t.last_commit is not None and t.last_commit > since and asking > 0 else left
        p.record(t, policy, priority(policy, t.spec) or 0, held, waiting, "ReclaimPending", requeue=again)
        return None
    if lost:
        detail = "its pods there are gone"
    elif checkpoints:
        detail = SAVE_DETAIL.get(save, "the checkpoint grace period ran out")
    else:
        detail = "the run has no checkpoints to wait for"
    p.unhold(t, policy, held)
    reason = "NodeLost" if lost else notice
    return RenegotiationStatus(reason=reason, message=f"{why}; {detail}", since=since, nodes=nodes)


SAVE_FIRST = ("SpotReclaimed", "NodePredicted", "NodeDrained")  # a run with checkpoints saves, then moves


def notice_of(p: Planner, reclaimed: list[str]) -> str:
    """The reason of a reclaim (kept while its save is awaited: the save request answering it is
    named after it): nodes proactive mode predicts will degrade, nodes being drained, else nodes
    their provider takes back."""
    if reclaimed and all(p.nodes[n].predicted for n in reclaimed):
        return "NodePredicted"
    if reclaimed and all(n in p.drained for n in reclaimed):
        return "NodeDrained"
    return "SpotReclaimed"


SAVE_DETAIL = {
    "Committed": "the checkpoint the ranks were asked for committed",
    "Missed": "the checkpoint the ranks were asked for was missed",
    "committed": "a checkpoint committed since",
}


ASK_SECONDS = 30.0  # the checkpoint controller's time to ask the ranks for the save a reclaim waits for


def save_state(t: TrainerInfo, notice: str, since: str, now: datetime) -> str:
    """Where the save a reclaim (``notice``) since ``since`` waits for stands: the checkpoint controller's
    request for it (docs/checkpoints.md), Committed or Missed (no wait helps then), else
    "waiting"; with no request for it ``ASK_SECONDS`` after the notice (a checkpoint controller
    that does not ask), "committed" once any checkpoint committed after the notice. (Not at once:
    an interval's checkpoint that commits just after the notice would move the run before the
    ranks are asked, from a step before the one they would save.)"""
    if t.save is not None and t.save[0] == save_request_id(notice, since):
        return t.save[1] if t.save[1] != "Requested" else "waiting"
    asked_by = parse_time(since) + timedelta(seconds=ASK_SECONDS)
    committed = t.last_commit is not None and t.last_commit > since
    return "committed" if committed and now >= asked_by else "waiting"


def grow(p: Planner, t: TrainerInfo, policy: PolicyInfo, held: Held, workers: int) -> bool:
    """Add workers to an admitted run in place (same capacity, pod size and admission)."""
    bigger = shape(t, workers, held.option.resources)
    extra = {n: a - held.shape.reserved.get(n, Decimal(0)) for n, a in bigger.reserved.items()}
    if not p.ledger.within_budget(policy, t.namespace, held.option.kind, extra):
        return False
    wants = bigger.wants({**held.placed, **dict.fromkeys(held.missing, "")}, {})
    kept = list(held.placed.values())
    near = dict.fromkeys(kept, NEAR_WEIGHT)
    ok, where = p.ledger.place(held.option.kind, wants, False, (), bigger.packing, near, kept)
    if not ok:
        return False
    p.ledger.place(held.option.kind, wants, True, (), bigger.packing, near, kept)
    p.count(t, policy, held.option.kind, extra, +1)
    p.summary(policy)["admitted"] -= 1  # the same run, grown
    held.placed.update(where)
    held.credits.extend((where[w[0]], w[1]) for w in wants)
    held.option, held.shape = replace(held.option, workers=workers), bigger
    return True


def move(p: Planner, t: TrainerInfo, policy: PolicyInfo, why: RenegotiationStatus) -> None:
    """Shrink within the elastic bounds on the same capacity, else move, else revoke."""
    grant, kind = t.grant, t.quota.capacity_type
    assert grant is not None
    assert kind is not None
    prio = priority(policy, t.spec) or 0
    kinds = (kind, *(k for k in preference(policy, t.spec) if k != kind))
    seconds = (p.obs.now - parse_time(why.since)).total_seconds()
    # after a save (or its wait) every pod is replaced and resumes from the newest checkpoint: a
    # new admission, even on the same capacity (a pod left running on a reclaimed node would not)
    saved_first = why.reason in SAVE_FIRST and t.spec.checkpoint is not None
    for option in options(t, policy, kinds):
        same = option.kind == kind and option.resources == grant.resources and not saved_first
        replacing = p.bound(t, grant.id) if saved_first and option.kind == kind else {}
        places = Places(p.bound(t, grant.id), hints_of(grant)) if same else Places(replacing=replacing)
        if not p.try_option(t, policy, option, places):
            continue
        grant_id = grant.id if same else f"{option.kind}-{t.quota.renegotiations + 1}"
        where = p.reserve(t, policy, option, places)
        s = shape(t, option.workers, option.resources)
        status = p.admitted(t, policy, prio, option, grant_id, where, t.quota.renegotiations + 1, None)
        if same:
            what = f"shrunk to {option.workers} workers on {kind}"
        elif saved_first:
            what = f"every pod moved ({option.kind}, {option.workers} workers), resuming from the newest checkpoint"
        else:
            what = f"moved to {option.kind} with {option.workers} workers"
        message = f"{why.message}: {what}; {p.admitted_message(policy, option, s)}"
        p.decisions[t.uid] = Decision(
            status,
            condition("True", "Renegotiated", message),
            (("Normal", "Renegotiated", f"{why.message}: {what}{p.lowered(option)}"),),
            renegotiation_seconds=seconds,
        )
        return
    status = p.pending_status(t, policy, prio)
    status["renegotiations"] = t.quota.renegotiations + 1
    message = f"{why.message}; no capacity holds the run's minimum any more: its pods are stopped and it queues again"
    p.summary(policy)["pending"] += 1
    p.decisions[t.uid] = Decision(
        status,
        condition("False", "CapacityLost", message),
        (("Warning", "CapacityLost", message),),
        renegotiation_seconds=seconds,
    )

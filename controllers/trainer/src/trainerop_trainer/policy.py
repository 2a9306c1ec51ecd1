"""The trainer's rules (pure, table-tested): gates, the run policy the concerns fill in, the quota
admission's grant and placement, which failures are retried, when a run has succeeded."""

import re
from collections.abc import Mapping, Sequence
from typing import Any

from trainerop_common.api import Contribution, Grant, RunPolicyDefaults
from trainerop_common.api.base import Condition
from trainerop_common.api.trainer import TrainerSpec, TrainerStatus
from trainerop_common.conditions import Desired, find
from trainerop_common.models import VERIFIED
from trainerop_common.topology import leader, restart_policy

from .pods import CONTRIBUTION_ORDER
from .topology import Replica
from .views import PodView

DEFAULT_BACKOFF_LIMIT = 6  # as batch/v1 Job


def gate_answers(conditions: Sequence[Condition], gates: Sequence[str], generation: int) -> tuple[list[str], bool]:
    """One line per gate that answered no this generation, saying why; and whether some gate has
    not answered this generation yet."""
    refused, silent = [], False
    for gate in gates:
        cond = find(conditions, gate)
        if cond is None or cond.observed_generation != generation:
            silent = True
        elif cond.status != "True":
            refused.append(f"{gate} ({cond.reason}: {cond.message})" if cond.message else f"{gate} ({cond.reason})")
    return refused, silent


def gate_wait(conditions: Sequence[Condition], gates: Sequence[str], generation: int) -> list[str]:
    """One line per gate that answered no, saying why, and one for those that have not answered
    this generation yet. That line names every gate, not the ones still silent: it stays the same
    while the answers come in, so the trainer does not rewrite its status as each gate opens."""
    refused, silent = gate_answers(conditions, gates, generation)
    if silent:
        refused.append(f"the gates' answers for generation {generation} ({', '.join(gates)})")
    return refused


def unanswered_grace(
    conditions: Sequence[Condition], gates: Sequence[str], generation: int, age: float | None, grace: float
) -> float | None:
    """Seconds a new Trainer's first status may wait for gates that have not answered yet (None:
    say at once that it waits). The concerns usually answer within a moment, and the trainer then
    writes the pods it created as its first status, rather than "waiting for the gates" first and
    that a moment later. A gate that answered no is said at once; so is a wait past ``grace``
    seconds of the Trainer's age (``age`` None: unknown)."""
    refused, silent = gate_answers(conditions, gates, generation)
    if refused or not silent or age is None or age >= grace:
        return None
    return min(grace, grace - age)  # a clock behind the API server's reads a negative age


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
    if spec.run_policy.backoff_limit is not None:
        limit_from = "spec.runPolicy.backoffLimit"
    elif "backoff_limit" in fill:
        limit_from = f"the {defaults['backoff_limit'][0]}'s backoffLimit"
    else:
        limit_from = "the default backoffLimit"
    if not fill:
        return spec, limit_from
    return spec.model_copy(update={"run_policy": spec.run_policy.model_copy(update=fill)}), limit_from


def backoff_limit(spec: TrainerSpec) -> int:
    limit = spec.run_policy.backoff_limit
    return limit if limit is not None else DEFAULT_BACKOFF_LIMIT


def grant_of(contributions: Mapping[str, Contribution]) -> Grant | None:
    quota = contributions.get("quota")
    return quota.grant if quota is not None else None


def placed_node(grant: Grant | None, role: str, index: int) -> str:
    """The node the quota admission placed a replica on ("" when it did not)."""
    nodes = ((grant.placement if grant else None) or {}).get(role) or []
    return nodes[index] if index < len(nodes) else ""


def earlier_admission(pods: Sequence[PodView], contributions: Mapping[str, Contribution]) -> list[PodView]:
    """Unfinished pods created under another quota admission than the current one."""
    grant = grant_of(contributions)
    current = grant.id if grant else None
    return [p for p in pods if not p.finished and p.admission and p.admission != current]


def outdated(pods: Sequence[PodView], contributions: Mapping[str, Contribution]) -> tuple[list[PodView], str]:
    """Unfinished pods created under an earlier quota admission, or waiting unscheduled on a node
    the admission no longer places them on; and why they go."""
    grant = grant_of(contributions)

    def misplaced(p: PodView) -> bool:
        want = placed_node(grant, p.role, p.index)
        return not p.node and p.phase == "Pending" and bool(p.pinned) and bool(want) and want != p.pinned

    earlier = {p.name for p in earlier_admission(pods, contributions)}
    old = [p for p in pods if p.name in earlier or (not p.finished and misplaced(p))]
    if not old:
        return [], ""
    names = ", ".join(sorted(p.name for p in old))
    if grant is None:
        return old, f"the quota admission was withdrawn: deleting {names}"
    return old, f"the quota admission moved the run ({grant.id}): replacing {names}"


def retryable(spec: TrainerSpec, pod: PodView) -> bool:
    """Kubeflow's rules, with the pod's role's policy: Never never retries; ExitCode retries
    128-255 (signals, OOM kills) and failures without an exit code (evictions, lost nodes);
    OnFailure and Always retry."""
    policy = restart_policy(spec, pod.role)
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
    if pod.model is not None and pod.model[0] != VERIFIED:
        return f"pod {pod.name}'s model initializer failed: {pod.model[0]}: {pod.model[1]}"
    code = f"exit code {pod.exit_code}" if pod.exit_code is not None else "no exit code"
    return f"pod {pod.name} failed with {code}" + (f" ({pod.reason})" if pod.reason else "")


def succeeded(spec: TrainerSpec, pods: Mapping[Replica, PodView]) -> bool:
    """Kubeflow's success policies: the master or the chief where the run has one (TFJob ignores
    AllWorkers then); else, with successPolicy AllWorkers, every worker; else every worker, or
    worker 0 for tensorflow."""

    def done(r: Replica) -> bool:
        pod = pods.get(r)
        return pod is not None and pod.phase == "Succeeded"

    first = leader(spec)
    if first is not None:
        return done(Replica(first, 0))
    every_worker = spec.topology.workers > 0 and all(done(Replica("worker", i)) for i in range(spec.topology.workers))
    if spec.run_policy.success_policy == "AllWorkers":
        return every_worker
    return every_worker or (spec.framework == "tensorflow" and done(Replica("worker", 0)))


# The pod counts that move as pods start, become ready or stop one by one (status.topology), the
# conditions whose message counts them ("2 of 4 pods running"), and the count a summary's message
# (status.message) starts with ("3 of 5 pods unschedulable: ...", glance.summary).
MOVING_COUNTS = ("workers", "readyWorkers")
MOVING_ROLE_COUNTS = ("active", "ready")
COUNTING_MESSAGES = frozenset({"Running"})
POD_COUNT = re.compile(r"^\d+ of \d+ pods ")


def _without_counts(section: Mapping[str, Any]) -> dict[str, Any]:
    topology = {k: v for k, v in (section.get("topology") or {}).items() if k not in MOVING_COUNTS}
    if "replicas" in topology:
        topology["replicas"] = {
            role: {k: v for k, v in counts.items() if k not in MOVING_ROLE_COUNTS}
            for role, counts in topology["replicas"].items()
        }
    out = {**section, "topology": topology}
    if "message" in out:
        out["message"] = POD_COUNT.sub("", str(out["message"]))
    return out


def _said(conditions: Sequence[Condition | Desired], counts: bool) -> set[tuple[str, str, str, str]]:
    """Each condition's type, status, reason and message (without the counting ones' message)."""
    return {
        (c.type, c.status, c.reason, "" if c.type in COUNTING_MESSAGES and not counts else c.message)
        for c in conditions
    }


def counts_hold(
    live: Mapping[str, Any],
    live_conditions: Sequence[Condition],
    wanted: Mapping[str, Any],
    wanted_conditions: Sequence[Desired],
    generation: int,
    since_written: float | None,
    every: float,
) -> float | None:
    """Seconds to hold a status write that only moves pod counts (None: write now, or there is
    nothing to write). Such a write goes out at most once per ``every`` seconds per Trainer, so
    pods starting one by one make one write rather than one each; any other change (phase, a
    condition's status, reason or message other than a count, a new generation, restarts,
    failures, progress) is written at once. ``live`` and ``wanted`` are the trainer's own status
    fields, ``live_conditions`` its own conditions as they are; ``since_written``: seconds since
    its last write."""
    if since_written is None or since_written >= every:
        return None
    if any(c.observed_generation != generation for c in live_conditions):
        return None
    if _said(live_conditions, counts=False) != _said(wanted_conditions, counts=False):
        return None
    mine = {k: live.get(k) for k in wanted}
    if _without_counts(mine) != _without_counts(wanted):
        return None
    if mine == wanted and _said(live_conditions, counts=True) == _said(wanted_conditions, counts=True):
        return None  # nothing to write: the writer skips it
    return every - since_written


def recovering(status: TrainerStatus, acting: bool) -> bool:
    """Whether a reconcile's requests go ahead of new runs' first pods in the client's rate limit
    (kube.urgent_requests): a run that has started and not finished, restarting or ``acting`` on
    its pods (the status counting a failure, the failed pod's deletion, its replacement). Its
    other writes (progress, counts) wait their turn: thousands of running Trainers' heartbeats
    must not hold back everyone else's creates."""
    started = status.progress is not None and status.progress.start_time is not None
    return started and status.phase not in ("Succeeded", "Failed") and (acting or status.phase == "Restarting")

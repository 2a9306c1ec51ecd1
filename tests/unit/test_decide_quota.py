"""The quota plan: admission order, capacity types, budgets, renegotiation, cost (pure)."""

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.factories import trainer_body, trainer_spec
from trainerop_common.api.quota import PlacementScore, QuotaPolicySpec
from trainerop_common.api.trainer import QuotaStatus, TrainerSpec
from trainerop_common.clock import parse_time, rfc3339
from trainerop_common.conditions import Desired
from trainerop_common.contracts import save_request_id
from trainerop_quota.capacity import NodeInfo, PodInfo, capacity_type, placement, role_requests
from trainerop_quota.decide import Decision, Observed, PolicyInfo, TrainerInfo, plan
from trainerop_quota.hints import Suggestion
from trainerop_quota.model import Ungoverned
from trainerop_quota.taints import Taint, Tolerates
from trainerop_quota.views import node_info, trainer_fingerprint, trainer_info

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
GPU = "nvidia.com/gpu"


def node(name: str, kind: str = "spot", gpus: int = 8, **extra: Any) -> NodeInfo:
    return NodeInfo(
        name=name,
        kind=kind,  # type: ignore[arg-type]
        allocatable={GPU: Decimal(gpus), "cpu": Decimal(96), "memory": Decimal(2**40), "pods": Decimal(110)},
        **extra,
    )


def spec(workers: int = 2, gpus: int = 8, elastic: tuple[int, int] | None = None, **extra: Any) -> TrainerSpec:
    topology: dict[str, Any] = {"workers": workers}
    if elastic:
        topology["elastic"] = {"minWorkers": elastic[0], "maxWorkers": elastic[1]}
    resources = {"requests": {"cpu": 4, "memory": "16Gi"}, "limits": {GPU: gpus}}
    return trainer_spec(resources=resources, topology=topology, **extra)


def trainer(
    name: str, s: TrainerSpec | None = None, age: int = 0, namespace: str = "team-a", **extra: Any
) -> TrainerInfo:
    return TrainerInfo(
        uid=f"uid-{name}",
        namespace=namespace,
        name=name,
        generation=1,
        created=rfc3339(NOW - timedelta(seconds=1000 - age)),
        spec=s or spec(),
        **extra,
    )


def policy(**spec_: Any) -> PolicyInfo:
    body = {"budgets": {"spot": {GPU: 64}, "onDemand": {GPU: 64}}, **spec_}
    return PolicyInfo("team", QuotaPolicySpec.model_validate(body))


def world(
    trainers: list[TrainerInfo],
    nodes: list[NodeInfo],
    pods: list[PodInfo] | None = None,
    policies: list[PolicyInfo] | None = None,
    now: datetime = NOW,
    levels: tuple[str, ...] = (),
    ungoverned: Ungoverned = "AllOrNothing",
) -> Observed:
    return Observed(
        ungoverned=ungoverned,
        now=now,
        trainers=trainers,
        policies=[policy()] if policies is None else policies,
        namespace_labels={"team-a": {"team": "a"}, "team-b": {"team": "b"}},
        nodes=nodes,
        pods=list(pods or []),
        levels=levels,
    )


def feed_back(t: TrainerInfo, v: Decision) -> TrainerInfo:
    """The Trainer as it looks once the verdict is written."""
    cond = v.condition
    return TrainerInfo(
        **{
            **t.__dict__,
            "quota": QuotaStatus.model_validate(v.quota),
            "conditions": [
                _condition(cond, t.generation),
            ],
        }
    )


def _condition(d: Desired, generation: int) -> Any:
    from trainerop_common.api.base import Condition

    return Condition(
        type=d.type,
        status=d.status,
        reason=d.reason,
        message=d.message,
        last_transition_time=rfc3339(NOW),
        observed_generation=generation,
    )


def running(t: TrainerInfo, v: Decision, nodes: list[str] | None = None) -> list[PodInfo]:
    """The run's worker pods on ``nodes``, else where the grant placed them."""
    q = QuotaStatus.model_validate(v.quota)
    assert q.contribution is not None
    grant = q.contribution.grant
    assert grant is not None
    assert grant.placement is not None
    per_pod = role_requests(t.spec, "worker", None, grant.resources)
    return [
        PodInfo(node=n, requests=per_pod, trainer_uid=t.uid, role="worker", index=i, admission=grant.id)
        for i, n in enumerate(nodes or grant.placement["worker"])
    ]


def admitted(v: Decision) -> tuple[str, int, str] | None:
    q = QuotaStatus.model_validate(v.quota)
    if q.contribution is None or q.contribution.grant is None:
        return None
    return (q.capacity_type or "", q.contribution.grant.workers, q.contribution.grant.id)


SPOT2_OD2 = [node("s1"), node("s2"), node("o1", "on-demand"), node("o2", "on-demand")]


# One run (8 GPUs a worker) on 2 spot and 2 on-demand nodes of 8 GPUs, under one QuotaPolicy
# (64 GPUs of each budget unless said): what the plan decides.
ADMISSION_TABLE: list[tuple[str, TrainerSpec, list[PolicyInfo], str, tuple[str, int, str] | None]] = [
    # situation, the run, the policies -> QuotaAdmitted reason, (capacity, workers, grant id) admitted
    # By default a run no policy covers is placed all-or-nothing, as under a policy with no
    # budgets and OnDemandFirst (--ungoverned AllOrNothing).
    ("no policy covers the namespace", spec(), [], "NoQuotaPolicy", ("on-demand", 2, "on-demand-0")),
    ("spot first: spot has room", spec(), [policy()], "Admitted", ("spot", 2, "spot-0")),
    ("on-demand first", spec(), [policy(preference="OnDemandFirst")], "Admitted", ("on-demand", 2, "on-demand-0")),
    (
        "the spot budget is too small: on-demand",
        spec(),
        [policy(budgets={"spot": {GPU: 8}, "onDemand": {GPU: 64}})],
        "Admitted",
        ("on-demand", 2, "on-demand-0"),
    ),
    (
        "spot only, over its budget",
        spec(),
        [policy(preference="SpotOnly", budgets={"spot": {GPU: 8}})],
        "ExceedsQuota",
        None,
    ),
    ("3 workers fit neither capacity type", spec(workers=3), [policy()], "WaitingForCapacity", None),
    ("elastic 1-3: the most that fit", spec(workers=3, elastic=(1, 3)), [policy()], "Admitted", ("spot", 2, "spot-0")),
    (
        "a priority class the policy lacks",
        spec(scheduling={"priorityClassName": "vip"}),
        [policy()],
        "PriorityClassNotFound",
        None,
    ),
    ("suspended", spec(runPolicy={"suspend": True}), [policy()], "Suspended", None),
]


@pytest.mark.parametrize(
    ("run", "policies", "reason", "grant"),
    [row[1:] for row in ADMISSION_TABLE],
    ids=[row[0] for row in ADMISSION_TABLE],
)
def test_what_the_plan_admits(
    run: TrainerSpec, policies: list[PolicyInfo], reason: str, grant: tuple[str, int, str] | None
) -> None:
    t = trainer("a", run)
    v = plan(world([t], SPOT2_OD2, policies=policies)).decisions[t.uid]
    assert (v.condition.reason, admitted(v)) == (reason, grant)


def test_no_policy_admits_at_once_without_a_contribution_with_ungoverned_at_once() -> None:
    t = trainer("a")
    v = plan(world([t], SPOT2_OD2, policies=[], ungoverned="AtOnce")).decisions[t.uid]
    assert (v.condition.status, v.condition.reason) == ("True", "NoQuotaPolicy")
    assert v.quota == {}


def test_spot_first_admission_places_the_run_on_spot() -> None:
    t = trainer("a")
    v = plan(world([t], SPOT2_OD2)).decisions[t.uid]
    assert (v.condition.status, v.condition.reason) == ("True", "Admitted")
    assert admitted(v) == ("spot", 2, "spot-0")
    pod = QuotaStatus.model_validate(v.quota).contribution.pod  # type: ignore[union-attr]
    assert pod == placement("spot").model_copy(
        update={"annotations": {"trainer.operator.kubeflow.org/admission": "spot-0"}}
    )
    assert "admitted on spot: 2 workers, 2 pods (8 cpu, 32Gi memory, 16 nvidia.com/gpu)" in v.condition.message
    assert v.events[0][1] == "Admitted"


def test_falls_back_to_on_demand_when_spot_is_full() -> None:
    other = [PodInfo(node="s1", requests={GPU: Decimal(8)}), PodInfo(node="s2", requests={GPU: Decimal(1)})]
    t = trainer("a")
    v = plan(world([t], SPOT2_OD2, other)).decisions[t.uid]
    assert admitted(v) == ("on-demand", 2, "on-demand-0")
    assert "(spot has no room for it)" in v.events[0][2]


def test_waits_without_a_partial_start_when_nothing_holds_the_gang() -> None:
    t = trainer("a", spec(workers=3))
    v = plan(world([t], SPOT2_OD2)).decisions[t.uid]  # 2 nodes of each kind: 3 workers fit on neither
    assert (v.condition.status, v.condition.reason) == ("False", "WaitingForCapacity")
    assert admitted(v) is None
    assert "spot: not enough free nodes; on-demand: not enough free nodes" in v.condition.message


def test_more_than_the_budget_is_refused_with_the_fix() -> None:
    t = trainer("a", spec(workers=3))
    v = plan(world([t], SPOT2_OD2, policies=[policy(budgets={"spot": {GPU: 16}})])).decisions[t.uid]
    assert (v.condition.status, v.condition.reason) == ("False", "ExceedsQuota")
    assert "spot: more than the budget (16 nvidia.com/gpu)" in v.condition.message
    assert "lower topology.workers" in v.condition.message
    assert v.events[0][0] == "Warning"


def test_budget_in_use_sends_the_next_run_to_on_demand() -> None:
    a, b = trainer("a"), trainer("b", age=1)
    nodes = [*SPOT2_OD2, node("s3"), node("s4")]
    p = plan(world([a, b], nodes, policies=[policy(budgets={"spot": {GPU: 16}, "onDemand": {GPU: 16}})]))
    assert admitted(p.decisions[a.uid]) == ("spot", 2, "spot-0")
    assert admitted(p.decisions[b.uid]) == ("on-demand", 2, "on-demand-0")
    assert p.policies["team"].admitted == 2
    assert p.policies["team"].used["spot"][GPU] == 16


def test_budgets_are_per_namespace() -> None:
    a, b = trainer("a"), trainer("b", age=1, namespace="team-b")
    nodes = [*SPOT2_OD2, node("s3"), node("s4")]
    p = plan(world([a, b], nodes, policies=[policy(budgets={"spot": {GPU: 16}})]))
    assert admitted(p.decisions[a.uid]) == admitted(p.decisions[b.uid]) == ("spot", 2, "spot-0")


def test_elastic_runs_get_the_most_workers_that_fit() -> None:
    t = trainer("a", spec(workers=4, elastic=(1, 4)))
    v = plan(world([t], SPOT2_OD2, policies=[policy(preference="SpotOnly")])).decisions[t.uid]
    assert admitted(v) == ("spot", 2, "spot-0")


@pytest.mark.parametrize(
    ("classes", "names", "first"),
    [
        ([], (None, None), "old"),  # FIFO
        ([{"name": "high", "value": 100}], (None, "high"), "new"),  # priority beats age
        ([{"name": "low", "value": -5}], ("low", None), "new"),
    ],
)
def test_priority_then_fifo(classes: list[dict[str, Any]], names: tuple[str | None, str | None], first: str) -> None:
    def sched(name: str | None) -> dict[str, Any]:
        return {"scheduling": {"priorityClassName": name}} if name else {}

    old = trainer("old", spec(**sched(names[0])))
    new = trainer("new", spec(**sched(names[1])), age=5)
    p = plan(world([new, old], [node("s1"), node("s2")], policies=[policy(priorityClasses=classes)]))
    winner = old if first == "old" else new
    loser = new if first == "old" else old
    assert admitted(p.decisions[winner.uid]) is not None
    assert p.decisions[loser.uid].condition.reason == "WaitingForCapacity"


def test_an_unknown_priority_class_is_named() -> None:
    t = trainer("a", spec(scheduling={"priorityClassName": "urgent"}))
    v = plan(world([t], SPOT2_OD2, policies=[policy(priorityClasses=[{"name": "high", "value": 1}])])).decisions[t.uid]
    assert (v.condition.reason, v.condition.status) == ("PriorityClassNotFound", "False")
    assert "'urgent'" in v.condition.message
    assert "high" in v.condition.message


def test_the_trainer_preference_wins_within_the_budgets() -> None:
    t = trainer("a", spec(scheduling={"preference": "OnDemandFirst"}))
    assert admitted(plan(world([t], SPOT2_OD2)).decisions[t.uid]) == ("on-demand", 2, "on-demand-0")
    spot_only = policy(budgets={"spot": {GPU: 64}})
    assert admitted(plan(world([t], SPOT2_OD2, policies=[spot_only])).decisions[t.uid]) == ("spot", 2, "spot-0")


def test_node_selectors_of_the_profile_narrow_the_nodes() -> None:
    from trainerop_common.api.base import PodContribution

    t = trainer("a", profile=PodContribution(node_selector={"gpu-type": "h100"}))
    nodes = [
        node("s1", labels={"gpu-type": "a100"}),
        node("s2", labels={"gpu-type": "h100"}),
        node("s3", labels={"gpu-type": "h100"}),
    ]
    assert admitted(plan(world([t], nodes)).decisions[t.uid]) == ("spot", 2, "spot-0")
    assert plan(world([t], nodes[:2])).decisions[t.uid].condition.reason == "WaitingForCapacity"


def test_lowered_resources_where_the_policy_allows() -> None:
    cpu_heavy = trainer_spec(resources={"requests": {"cpu": 80}, "limits": {"cpu": 80}})
    t = trainer("a", cpu_heavy)
    busy = [PodInfo(node="s1", requests={"cpu": Decimal(40)})]
    adjust = policy(adjustment={"resources": ["cpu"], "minPercent": 50}, preference="SpotOnly")
    v = plan(world([t], [node("s1")], busy, policies=[adjust])).decisions[t.uid]
    q = QuotaStatus.model_validate(v.quota)
    assert q.contribution
    assert q.contribution.grant
    assert q.contribution.grant.resources
    assert q.contribution.grant.resources.requests == {"cpu": "40"}  # 50 % of 80 fits the 56 free
    assert "(per-pod cpu lowered to 50%)" in v.events[0][2]
    assert (
        plan(world([t], [node("s1")], busy, policies=[policy(preference="SpotOnly")])).decisions[t.uid].condition.reason
        == "WaitingForCapacity"
    )


def test_a_plan_fed_its_own_result_changes_nothing() -> None:
    ts = [trainer(f"t{i}", age=i) for i in range(6)]
    nodes = [*SPOT2_OD2, node("s3"), node("o3", "on-demand")]
    first = plan(world(ts, nodes))
    again = [feed_back(t, first.decisions[t.uid]) for t in ts]
    second = plan(world(again, nodes))
    for t in ts:
        assert second.decisions[t.uid].quota == first.decisions[t.uid].quota
        assert second.decisions[t.uid].condition == first.decisions[t.uid].condition
    # and once the admitted runs' pods are placed, still nothing changes
    pods = [pod for t in ts if admitted(first.decisions[t.uid]) for pod in running(t, first.decisions[t.uid])]
    third = plan(world(again, nodes, pods))
    assert {u: v.quota for u, v in third.decisions.items()} == {u: v.quota for u, v in first.decisions.items()}


def _admit_on_spot(
    t: TrainerInfo, nodes: list[NodeInfo], pol: PolicyInfo | None = None
) -> tuple[TrainerInfo, list[PodInfo]]:
    v = plan(world([t], nodes, policies=[pol or policy()])).decisions[t.uid]
    assert admitted(v) == ("spot", t.spec.topology.workers, "spot-0")
    return feed_back(t, v), running(t, v)


def test_a_lost_spot_node_moves_the_run_to_on_demand() -> None:
    t, pods = _admit_on_spot(trainer("a"), SPOT2_OD2)
    after = [node("s1"), node("o1", "on-demand"), node("o2", "on-demand")]  # s2 is gone
    v = plan(world([t], after, pods)).decisions[t.uid]
    assert (v.condition.status, v.condition.reason) == ("True", "Renegotiated")
    assert admitted(v) == ("on-demand", 2, "on-demand-1")
    assert QuotaStatus.model_validate(v.quota).renegotiations == 1
    assert "node s2 no longer exists" in v.condition.message
    assert v.renegotiation_seconds == 0
    assert v.events[0][1] == "Renegotiated"


def test_an_elastic_run_shrinks_on_spot_before_it_moves() -> None:
    t, pods = _admit_on_spot(trainer("a", spec(workers=2, elastic=(1, 2))), SPOT2_OD2)
    after = [node("s1"), node("o1", "on-demand"), node("o2", "on-demand")]
    v = plan(world([t], after, pods)).decisions[t.uid]
    assert admitted(v) == ("spot", 1, "spot-0")  # same admission id: the surviving pod stays
    assert "shrunk to 1 workers on spot" in v.condition.message


def test_a_pod_on_a_lost_node_that_fits_elsewhere_keeps_the_admission() -> None:
    t, pods = _admit_on_spot(trainer("a"), [*SPOT2_OD2, node("s3")])
    after = [node("s1"), node("s3"), node("o1", "on-demand")]
    v = plan(world([t], after, pods)).decisions[t.uid]
    assert admitted(v) == ("spot", 2, "spot-0")
    assert v.condition.reason == "Admitted"


def test_nothing_left_revokes_and_queues_again() -> None:
    t, pods = _admit_on_spot(trainer("a"), SPOT2_OD2, policy(preference="SpotOnly"))
    v = plan(world([t], [node("s1")], pods, policies=[policy(preference="SpotOnly")])).decisions[t.uid]
    assert (v.condition.status, v.condition.reason) == ("False", "CapacityLost")
    assert admitted(v) is None
    assert v.events[0][0] == "Warning"


def _reclaim(node_name: str) -> NodeInfo:
    return node(
        node_name, schedulable=False, reclaimed=f"node {node_name} is being reclaimed (karpenter.sh/disrupted taint)"
    )


def test_a_reclaim_notice_waits_for_a_checkpoint_then_moves() -> None:
    ckpt = spec(checkpoint={"bucket": "pvc-backups"})
    t, pods = _admit_on_spot(trainer("a", ckpt), SPOT2_OD2)
    notice = [node("s1"), _reclaim("s2"), node("o1", "on-demand"), node("o2", "on-demand")]
    v = plan(world([t], notice, pods)).decisions[t.uid]
    assert (v.condition.status, v.condition.reason) == ("True", "ReclaimPending")
    assert admitted(v) == ("spot", 2, "spot-0")
    q = QuotaStatus.model_validate(v.quota)
    assert q.renegotiation is not None
    assert q.renegotiation.waiting_for_checkpoint
    # the checkpoint controller asks the ranks to save by then (the policy's checkpointGraceSeconds)
    assert q.renegotiation.deadline == rfc3339(parse_time(q.renegotiation.since) + timedelta(seconds=300))
    assert v.requeue_after == 300
    assert v.events[0][1] == "SpotReclaimed"
    waiting = feed_back(t, v)

    later = NOW + timedelta(seconds=30)
    still = plan(world([waiting], notice, pods, now=later)).decisions[t.uid]
    assert still.quota == v.quota
    assert still.condition == v.condition
    assert still.events == ()

    # An interval's checkpoint committed just after the notice, before the checkpoint controller
    # could ask the ranks (ASK_SECONDS, 30): the wait goes on (one in the notice's second never counts)
    soon = NOW + timedelta(seconds=10)
    for commit in (NOW, soon):
        early = replace(waiting, last_commit=rfc3339(commit))
        held_on = plan(world([early], notice, pods, now=soon)).decisions[t.uid]
        assert (held_on.condition.reason, held_on.quota) == ("ReclaimPending", v.quota)
        assert held_on.requeue_after == (20 if commit == soon else 290)
    committed = TrainerInfo(**{**waiting.__dict__, "last_commit": rfc3339(later)})
    moved = plan(world([committed], notice, pods, now=later)).decisions[t.uid]
    assert admitted(moved) == ("on-demand", 2, "on-demand-1")
    assert "a checkpoint committed since" in moved.condition.message
    assert moved.renegotiation_seconds == 30

    timeout = plan(world([waiting], notice, pods, now=NOW + timedelta(seconds=301))).decisions[t.uid]
    assert admitted(timeout) == ("on-demand", 2, "on-demand-1")
    assert "grace period ran out" in timeout.condition.message

    # The checkpoint controller asked the ranks for a save (docs/checkpoints.md): the move waits
    # for that one, not for any commit, and goes as soon as it is answered either way.
    asked = save_request_id("SpotReclaimed", QuotaStatus.model_validate(v.quota).renegotiation.since)  # type: ignore[union-attr]
    requested = replace(committed, save=(asked, "Requested"))
    held = plan(world([requested], notice, pods, now=later)).decisions[t.uid]
    assert (held.condition.reason, held.quota) == ("ReclaimPending", v.quota)
    for phase, detail in (
        ("Committed", "the checkpoint the ranks were asked for committed"),
        ("Missed", "the checkpoint the ranks were asked for was missed"),
    ):
        answered = plan(world([replace(waiting, save=(asked, phase))], notice, pods, now=later)).decisions[t.uid]
        assert admitted(answered) == ("on-demand", 2, "on-demand-1")
        assert detail in answered.condition.message
    # a request for another trigger (a user's) is not this wait's answer
    other = replace(waiting, save=("Requested@2026-01-01T00:00:00Z", "Committed"))
    assert plan(world([other], notice, pods, now=later)).decisions[t.uid].condition.reason == "ReclaimPending"


def test_a_reclaim_notice_moves_a_run_without_checkpoints_at_once() -> None:
    t, pods = _admit_on_spot(trainer("a"), SPOT2_OD2)
    v = plan(
        world([t], [node("s1"), _reclaim("s2"), node("o1", "on-demand"), node("o2", "on-demand")], pods)
    ).decisions[t.uid]
    assert admitted(v) == ("on-demand", 2, "on-demand-1")
    assert "the run has no checkpoints to wait for" in v.condition.message


def test_cost_against_all_on_demand() -> None:
    prices = {"onDemand": {GPU: "3.00", "cpu": "0.05"}, "spot": {GPU: "1.00", "cpu": "0.02"}}
    t = trainer("a")
    v = plan(world([t], SPOT2_OD2, policies=[policy(prices=prices)])).decisions[t.uid]
    cost = QuotaStatus.model_validate(v.quota).cost
    assert cost is not None
    assert (cost.per_hour, cost.on_demand_per_hour) == ("16.16", "48.40")  # 16 GPUs + 8 cpus
    assert cost.savings_percent == 67
    # An hour later the run moves: the first hour is accrued at the spot rate.
    t2, pods = feed_back(t, v), running(t, v, ["s1", "s2"])
    later = plan(
        world(
            [t2],
            [node("s1"), node("o1", "on-demand"), node("o2", "on-demand")],
            pods,
            policies=[policy(prices=prices)],
            now=NOW + timedelta(hours=1),
        )
    ).decisions[t.uid]
    moved = QuotaStatus.model_validate(later.quota).cost
    assert moved is not None
    assert (moved.accrued, moved.on_demand_accrued, moved.per_hour, moved.savings_percent) == (
        "16.16",
        "48.40",
        "48.40",
        0,
    )


def test_suspended_and_finished_runs_hold_nothing() -> None:
    suspended = trainer("s", spec(runPolicy={"suspend": True}))
    done = trainer("d", finished=rfc3339(NOW))
    waiting = trainer("w", age=9)
    p = plan(world([suspended, done, waiting], [node("s1"), node("s2")]))
    assert p.decisions[suspended.uid].condition.reason == "Suspended"
    assert admitted(p.decisions[waiting.uid]) == ("spot", 2, "spot-0")


def test_capacity_types_from_well_known_labels() -> None:
    assert capacity_type({"karpenter.sh/capacity-type": "spot"}) == "spot"
    assert capacity_type({"cloud.google.com/gke-spot": "true"}) == "spot"
    assert capacity_type({"eks.amazonaws.com/capacityType": "SPOT"}) == "spot"
    assert capacity_type({"eks.amazonaws.com/capacityType": "ON_DEMAND"}) == "on-demand"
    assert capacity_type({}) == "on-demand"


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.tuples(st.integers(1, 4), st.sampled_from([1, 2, 4, 8]), st.booleans()), min_size=1, max_size=14),
    spot=st.integers(0, 5),
    on_demand=st.integers(0, 5),
    budget=st.integers(8, 64),
)
def test_no_plan_over_commits_a_budget_or_a_node(
    sizes: list[tuple[int, int, bool]], spot: int, on_demand: int, budget: int
) -> None:
    nodes = [node(f"s{i}") for i in range(spot)] + [node(f"o{i}", "on-demand") for i in range(on_demand)]
    ts = [
        trainer(
            f"t{i}",
            spec(workers=w, gpus=g, elastic=(1, w) if e else None),
            age=i,
            namespace=("team-a", "team-b")[i % 2],
        )
        for i, (w, g, e) in enumerate(sizes)
    ]
    pol = policy(budgets={"spot": {GPU: budget}, "onDemand": {GPU: budget // 2}})
    result = plan(world(ts, nodes, policies=[pol]))
    used: dict[tuple[str, str], int] = {}
    per_kind: dict[str, int] = {}
    for t in ts:
        a = admitted(result.decisions[t.uid])
        if a is None:
            continue
        kind, workers, _ = a
        gpus = workers * int(t.spec.resources.limits[GPU])  # type: ignore[union-attr,index]
        used[(t.namespace, kind)] = used.get((t.namespace, kind), 0) + gpus
        per_kind[kind] = per_kind.get(kind, 0) + gpus
        lo = t.spec.topology.elastic.min_workers if t.spec.topology.elastic else t.spec.topology.workers
        assert lo <= workers <= t.spec.topology.workers
    for (_, kind), gpus in used.items():
        assert gpus <= (budget if kind == "spot" else budget // 2)
    assert per_kind.get("spot", 0) <= 8 * spot
    assert per_kind.get("on-demand", 0) <= 8 * on_demand


def test_a_renegotiated_run_keeps_saying_why_until_it_changes() -> None:
    t, pods = _admit_on_spot(trainer("a"), SPOT2_OD2)
    after = [node("s1"), node("o1", "on-demand"), node("o2", "on-demand")]
    moved = plan(world([t], after, pods)).decisions[t.uid]
    settled = feed_back(t, moved)
    again = plan(world([settled], after, running(t, moved))).decisions[t.uid]
    assert (again.quota, again.condition, again.events) == (moved.quota, moved.condition, ())


def test_each_replica_gets_a_node_and_keeps_it() -> None:
    t = trainer("a")
    first = plan(world([t], SPOT2_OD2)).decisions[t.uid]
    grant = QuotaStatus.model_validate(first.quota).contribution.grant  # type: ignore[union-attr]
    assert grant is not None
    assert grant.placement is not None
    assert sorted(grant.placement["worker"]) == ["s1", "s2"]
    again = plan(world([feed_back(t, first)], SPOT2_OD2)).decisions[t.uid]
    assert again.quota == first.quota


def test_a_scale_that_does_not_fit_keeps_the_old_admission_until_it_does() -> None:
    t, pods = _admit_on_spot(trainer("a"), SPOT2_OD2, policy(preference="SpotOnly"))
    bigger = TrainerInfo(**{**t.__dict__, "spec": spec(workers=3), "generation": 2})
    v = plan(world([bigger], SPOT2_OD2, pods, policies=[policy(preference="SpotOnly")])).decisions[t.uid]
    assert (v.condition.status, v.condition.reason) == ("False", "WaitingForCapacity")
    assert admitted(v) == ("spot", 2, "spot-0")
    waiting = feed_back(bigger, v)
    still = plan(world([waiting], SPOT2_OD2, pods, policies=[policy(preference="SpotOnly")])).decisions[t.uid]
    assert (still.quota, still.condition) == (v.quota, v.condition)
    grown = plan(world([waiting], [*SPOT2_OD2, node("s3")], pods, policies=[policy(preference="SpotOnly")])).decisions[
        t.uid
    ]
    assert admitted(grown) == ("spot", 3, "spot-0")
    assert grown.condition.reason == "Admitted"


def test_an_elastic_run_grows_when_room_appears() -> None:
    only_spot = [policy(preference="SpotOnly")]
    t = trainer("a", spec(workers=3, elastic=(1, 3)))
    small = plan(world([t], SPOT2_OD2, policies=only_spot)).decisions[t.uid]
    assert admitted(small) == ("spot", 2, "spot-0")
    more = plan(world([feed_back(t, small)], [*SPOT2_OD2, node("s3")], running(t, small), policies=only_spot))
    assert admitted(more.decisions[t.uid]) == ("spot", 3, "spot-0")


def test_a_namespace_not_seen_yet_gets_no_decision() -> None:
    t = trainer("a", namespace="team-new")
    assert t.uid not in plan(world([t], SPOT2_OD2)).decisions


def test_pods_running_before_the_policy_keep_their_place() -> None:
    t = trainer("a")
    per_pod = role_requests(t.spec, "worker", None)
    before = [
        PodInfo(node=n, requests=per_pod, trainer_uid=t.uid, role="worker", index=i) for i, n in enumerate(["s1", "s2"])
    ]
    v = plan(world([t], [node("s1"), node("s2")], before)).decisions[t.uid]
    assert admitted(v) == ("spot", 2, "spot-0")
    grant = QuotaStatus.model_validate(v.quota).contribution.grant  # type: ignore[union-attr]
    assert grant is not None
    assert grant.placement == {"worker": ["s1", "s2"]}


def test_capacity_lost_stays_until_something_changes() -> None:
    only_spot = policy(preference="SpotOnly")
    t, pods = _admit_on_spot(trainer("a"), SPOT2_OD2, only_spot)
    lost = plan(world([t], [node("s1")], pods, policies=[only_spot])).decisions[t.uid]
    assert lost.condition.reason == "CapacityLost"
    again = plan(world([feed_back(t, lost)], [node("s1")], pods[:1], policies=[only_spot])).decisions[t.uid]
    assert (again.quota, again.condition, again.events) == (lost.quota, lost.condition, ())


def test_a_finished_run_is_released() -> None:
    t, pods = _admit_on_spot(trainer("a"), SPOT2_OD2)
    done = TrainerInfo(**{**t.__dict__, "finished": rfc3339(NOW)})
    v = plan(world([done], SPOT2_OD2, pods)).decisions[t.uid]
    assert (v.condition.status, v.condition.reason) == ("True", "Released")
    assert admitted(v) is None
    assert "capacityType" not in v.quota


def test_pods_that_cannot_be_sized_are_named() -> None:
    override = {
        "worker": {"spec": {"containers": [{"name": "sidecar", "resources": {"requests": {"cpu": "2 cores"}}}]}}
    }
    t = trainer("a", spec(podTemplateOverrides=override))
    v = plan(world([t], SPOT2_OD2)).decisions[t.uid]
    assert (v.condition.status, v.condition.reason) == ("False", "InvalidResources")
    assert "'2 cores'" in v.condition.message


def test_spot_dearer_than_on_demand_saves_nothing() -> None:
    prices = {"onDemand": {GPU: "1.00"}, "spot": {GPU: "2.00"}}
    t = trainer("a")
    cost = QuotaStatus.model_validate(
        plan(world([t], SPOT2_OD2, policies=[policy(prices=prices)])).decisions[t.uid].quota
    ).cost
    assert cost is not None
    assert cost.savings_percent == 0


def test_a_replica_whose_pod_went_with_its_node_is_placed_again() -> None:
    """The node is deleted and its pods with it (pod GC): nothing is left on the lost node, but the
    admitted place of that replica is gone, so it gets another one (or the run is renegotiated)."""
    t, pods = _admit_on_spot(trainer("a"), [*SPOT2_OD2, node("s3")])
    grant = t.grant
    assert grant is not None
    assert grant.placement is not None
    survivor, gone = grant.placement["worker"]
    still = [p for p in pods if p.node == survivor]
    nodes = [n for n in [*SPOT2_OD2, node("s3")] if n.name != gone]
    v = plan(world([t], nodes, still)).decisions[t.uid]
    new = QuotaStatus.model_validate(v.quota).contribution.grant  # type: ignore[union-attr]
    assert new is not None
    assert new.id == "spot-0"
    assert new.placement is not None
    assert new.placement["worker"][0] == survivor
    assert new.placement["worker"][1] not in (gone, survivor)
    full = [n for n in nodes if n.kind == "on-demand" or n.name == survivor]
    moved = plan(world([t], full, still)).decisions[t.uid]
    assert admitted(moved) == ("on-demand", 2, "on-demand-1")
    assert f"node {gone} no longer exists" in moved.condition.message


def test_a_shrink_that_loses_replica_0_gives_it_the_place_of_the_removed_one() -> None:
    t, pods = _admit_on_spot(trainer("a", spec(workers=2, elastic=(1, 2))), SPOT2_OD2)
    assert t.grant is not None
    assert t.grant.placement == {"worker": ["s1", "s2"]}
    v = plan(world([t], [node("s2"), node("o1", "on-demand")], pods)).decisions[t.uid]
    grant = QuotaStatus.model_validate(v.quota).contribution.grant  # type: ignore[union-attr]
    assert grant is not None
    assert (grant.id, grant.workers, grant.placement) == ("spot-0", 1, {"worker": ["s2"]})


def _grant(v: Decision) -> Any:
    q = QuotaStatus.model_validate(v.quota)
    assert q.contribution is not None
    assert q.contribution.grant is not None
    return q.contribution.grant


def test_a_growing_run_never_takes_the_node_of_a_newer_one() -> None:
    only_spot = [policy(preference="SpotOnly")]
    e = trainer("e", spec(workers=1))
    first = plan(world([e], [node("s1"), node("s2")], policies=only_spot)).decisions[e.uid]
    e_pods = running(e, first)
    e = feed_back(e, first)
    f = trainer("f", spec(workers=1), age=5)
    both = plan(world([e, f], [node("s1"), node("s2")], e_pods, policies=only_spot))
    f = feed_back(f, both.decisions[f.uid])  # admitted, its pod not on its node yet
    f_node = _grant(both.decisions[f.uid]).placement["worker"][0]
    bigger = TrainerInfo(**{**e.__dict__, "spec": spec(workers=2), "generation": 2})
    after = plan(world([bigger, f], [node("s1"), node("s2")], e_pods, policies=only_spot))
    assert after.decisions[e.uid].condition.reason == "WaitingForCapacity"
    assert _grant(after.decisions[e.uid]).workers == 1
    assert _grant(after.decisions[f.uid]).placement == {"worker": [f_node]}


def test_a_replica_that_succeeded_needs_no_place_when_its_node_goes() -> None:
    t, pods = _admit_on_spot(trainer("a"), SPOT2_OD2)
    done = [PodInfo(**{**pods[1].__dict__, "succeeded": True}), pods[0]]
    node_of_done = pods[1].node
    after = [n for n in SPOT2_OD2 if n.name != node_of_done]
    v = plan(world([t], after, done)).decisions[t.uid]
    assert v.condition.reason == "Admitted"
    assert admitted(v) == ("spot", 2, "spot-0")


def test_an_elastic_run_is_not_shrunk_when_a_foreign_pod_takes_a_replicas_node() -> None:
    only_spot = [policy(preference="SpotOnly")]
    t = trainer("a", spec(workers=2, elastic=(1, 2)))
    v = plan(world([t], [node("s1"), node("s2")], policies=only_spot)).decisions[t.uid]
    pods = running(t, v)
    t = feed_back(t, v)
    # worker-0 was replaced and waits; a foreign pod took its node meanwhile
    foreign = PodInfo(node=pods[0].node, requests={GPU: Decimal(8)})
    waiting = PodInfo(**{**pods[0].__dict__, "node": ""})
    again = plan(world([t], [node("s1"), node("s2")], [waiting, pods[1], foreign], policies=only_spot))
    assert _grant(again.decisions[t.uid]).workers == 2
    assert again.decisions[t.uid].condition.reason == "Admitted"


def test_pods_being_deleted_keep_their_replicas_places() -> None:
    t, pods = _admit_on_spot(trainer("a"), [*SPOT2_OD2, node("s3"), node("s4")])
    deleting = [PodInfo(**{**p.__dict__, "deleting": True}) for p in pods]
    v = plan(world([t], [*SPOT2_OD2, node("s3"), node("s4")], deleting)).decisions[t.uid]
    assert _grant(v).placement == t.grant.placement  # type: ignore[union-attr]
    waiting = trainer("b", age=9)
    both = plan(world([t, waiting], [*SPOT2_OD2, node("s3"), node("s4")], deleting))
    assert admitted(both.decisions[waiting.uid]) == ("spot", 2, "spot-0")


def test_a_run_whose_policy_went_keeps_its_grant_without_placement() -> None:
    t, _ = _admit_on_spot(trainer("a"), SPOT2_OD2)
    v = plan(world([t], SPOT2_OD2, policies=[], ungoverned="AtOnce")).decisions[t.uid]
    assert v.condition.reason == "NoQuotaPolicy"
    grant = _grant(v)
    assert (grant.id, grant.workers, grant.placement) == ("spot-0", 2, None)


def test_a_decision_already_found_written_is_not_planned_again_on_the_same_state() -> None:
    from trainerop_quota.controller import already_said

    body: dict[str, Any] = {"metadata": {"uid": "u"}, "status": {}}
    admitted = Decision({"capacityType": "spot"}, Desired.true("QuotaAdmitted", "Admitted", "on spot"))
    cases = [
        (None, body, admitted, False),  # nothing found written yet
        ((body, admitted), body, admitted, True),  # the very state, an equal decision
        ((body, admitted), dict(body), admitted, False),  # a new state of the Trainer (the cache's new dict)
        ((body, admitted), body, Decision({}, Desired.false("QuotaAdmitted", "Pending", "waits")), False),
    ]
    for last, now_body, decision, expected in cases:
        assert already_said(last, now_body, decision) is expected


def test_the_plan_reads_the_profile_only_of_a_trainer_that_names_one() -> None:
    """spec.profile removed: its section stays until the profile controller takes it back, and
    the plan must not size or place the pods by it meanwhile (contracts.asks)."""
    section = {"contribution": {"generation": 1, "pod": {"nodeSelector": {"gpu-type": "a100"}}}}
    named = trainer_body(status={"profile": section}, epochs=1, image="i", topology={"workers": 1}, profile="p")
    removed = trainer_body(status={"profile": section}, epochs=1, image="i", topology={"workers": 1})
    profile = trainer_info(named).profile
    assert profile is not None and profile.node_selector == {"gpu-type": "a100"}  # noqa: PT018
    assert trainer_info(removed).profile is None


CLIQUE, ZONE = "nvidia.com/gpu.clique", "topology.kubernetes.io/zone"


def cliques(**sizes: int) -> list[NodeInfo]:
    """On-demand nodes of 8 GPUs in cliques of one zone: ``a=3`` is a0, a1, a2."""
    return [node(f"{c}{i}", "on-demand", labels={CLIQUE: c, ZONE: "z"}) for c, n in sizes.items() for i in range(n)]


def grant_of(v: Decision) -> tuple[list[str], Any]:
    q = QuotaStatus.model_validate(v.quota)
    grant = q.contribution.grant if q.contribution else None
    assert grant is not None
    assert grant.placement is not None
    return sorted(grant.placement["worker"]), q.placement_score


def test_a_run_goes_into_the_smallest_clique_that_holds_it() -> None:
    t = trainer("a", spec(workers=2))
    on_demand = [policy(preference="OnDemandOnly")]
    v = plan(world([t], cliques(a=3, b=2), policies=on_demand, levels=(CLIQUE, ZONE))).decisions[t.uid]
    assert grant_of(v) == (["b0", "b1"], PlacementScore(level=CLIQUE, domains=1, cross_neighbours=0))


@pytest.mark.parametrize(
    ("mode", "reason", "score"),
    [
        ("Required", "WaitingForCapacity", None),
        ("Preferred", "Admitted", PlacementScore(level=ZONE, domains=2, cross_neighbours=2)),
    ],
)
def test_a_run_no_clique_holds(mode: str, reason: str, score: PlacementScore | None) -> None:
    packing = {"level": CLIQUE, "mode": mode}
    t = trainer("a", spec(workers=4, scheduling={"preference": "OnDemandOnly", "packing": packing}))
    v = plan(world([t], cliques(a=3, b=2), levels=(CLIQUE, ZONE))).decisions[t.uid]
    assert v.condition.reason == reason
    if score is None:
        assert f"on-demand: no single {CLIQUE} holds the run" in v.condition.message
    else:
        assert grant_of(v)[1] == score


def test_a_lost_replica_is_replaced_in_its_clique() -> None:
    t = trainer("a", spec(workers=3, scheduling={"preference": "OnDemandOnly"}))
    nodes = cliques(a=5, b=1)  # only a holds three
    first = plan(world([t], nodes, levels=(CLIQUE, ZONE))).decisions[t.uid]
    placed, _ = grant_of(first)
    assert {n[0] for n in placed} == {"a"}
    lost = placed[0]
    after = [n for n in nodes if n.name != lost]
    pods = [pod for pod in running(t, first) if pod.node != lost]
    decision = plan(world([feed_back(t, first)], after, pods, levels=(CLIQUE, ZONE))).decisions[t.uid]
    assert decision.condition.reason == "Admitted"
    # a has two free nodes left, b one: best fit alone would take b
    replacement = set(grant_of(decision)[0]) - set(placed)
    assert len(replacement) == 1
    assert replacement <= {"a0", "a1", "a2", "a3", "a4"}
    assert grant_of(decision)[1] == PlacementScore(level=CLIQUE, domains=1)


def required(workers: int) -> TrainerSpec:
    packing = {"level": CLIQUE, "mode": "Required"}
    return spec(workers=workers, scheduling={"preference": "OnDemandOnly", "packing": packing})


def test_a_run_that_requires_its_clique_is_not_split_by_a_replacement() -> None:
    t = trainer("a", required(3))
    nodes = cliques(a=3, b=3)
    first = plan(world([t], nodes, levels=(CLIQUE, ZONE))).decisions[t.uid]
    placed, _ = grant_of(first)
    assert placed == ["a0", "a1", "a2"]
    after = [n for n in nodes if n.name != "a0"]  # a is full without it; b would hold the one replica
    pods = [pod for pod in running(t, first) if pod.node != "a0"]
    lost = plan(world([feed_back(t, first)], after, pods, levels=(CLIQUE, ZONE)))
    stopped = lost.decisions[t.uid]
    assert stopped.condition.reason == "CapacityLost"
    again = plan(world([feed_back(t, stopped)], after, levels=(CLIQUE, ZONE))).decisions[t.uid]
    assert again.condition.reason == "Admitted"
    assert grant_of(again) == (["b0", "b1", "b2"], PlacementScore(level=CLIQUE, domains=1))


# the plugin's node for each worker -> where a run of two that requires one clique goes, and how
# many hints were followed (cliques a of one node, b and c of two)
REQUIRED_HINTS = [
    ({0: "b0", 1: "c0"}, ["b0", "b1"], 1),  # split: the first hint's clique
    ({0: "c1", 1: "b0"}, ["c0", "c1"], 1),
    ({0: "a0", 1: "a0"}, ["b0", "b1"], 0),  # a cannot hold both: as if not hinted (the smallest that holds)
    ({0: "c0", 1: "c1"}, ["c0", "c1"], 2),
]


@pytest.mark.parametrize(("hints", "placed", "followed"), REQUIRED_HINTS)
def test_a_plugin_s_hints_do_not_split_a_run_that_requires_its_clique(
    hints: dict[int, str], placed: list[str], followed: int
) -> None:
    t = trainer("a", required(2))
    suggestion = Suggestion(generation=t.generation, nodes={("worker", i): n for i, n in hints.items()})
    observed = replace(world([t], cliques(a=1, b=2, c=2), levels=(CLIQUE, ZONE)), suggestions={t.uid: suggestion})
    where, score = grant_of(plan(observed).decisions[t.uid])
    assert (where, score.level, score.domains) == (placed, CLIQUE, 1)
    assert (score.plugin.suggested, score.plugin.followed) == (2, followed)


def ungoverned_world(trainers: list[TrainerInfo], nodes: list[NodeInfo], pods: list[PodInfo] | None = None) -> Observed:
    return world(trainers, nodes, pods, policies=[])  # --ungoverned AllOrNothing, the default


# No QuotaPolicy, --ungoverned AllOrNothing: the run (2 workers of 8 GPUs) on SPOT2_OD2 ->
# condition status and reason, (capacity, workers, grant id) admitted, Events posted
UNGOVERNED_TABLE: list[tuple[str, TrainerSpec, list[PodInfo], tuple[str, str], tuple[str, int, str] | None, int]] = [
    ("room on on-demand", spec(), [], ("True", "NoQuotaPolicy"), ("on-demand", 2, "on-demand-0"), 0),
    (
        "on-demand full: spot",
        spec(),
        [PodInfo(node="o1", requests={GPU: Decimal(8)})],
        ("True", "NoQuotaPolicy"),
        ("spot", 2, "spot-0"),
        0,
    ),
    ("3 workers fit nowhere", spec(workers=3), [], ("False", "WaitingForCapacity"), None, 1),
    (
        "a priority class means nothing without a policy",
        spec(scheduling={"priorityClassName": "vip"}),
        [],
        ("True", "NoQuotaPolicy"),
        ("on-demand", 2, "on-demand-0"),
        0,
    ),
]


@pytest.mark.parametrize(
    ("run", "pods", "condition", "grant", "events"),
    [row[1:] for row in UNGOVERNED_TABLE],
    ids=[row[0] for row in UNGOVERNED_TABLE],
)
def test_without_a_policy_runs_are_still_admitted_whole(
    run: TrainerSpec,
    pods: list[PodInfo],
    condition: tuple[str, str],
    grant: tuple[str, int, str] | None,
    events: int,
) -> None:
    t = trainer("a", run)
    v = plan(ungoverned_world([t], SPOT2_OD2, pods)).decisions[t.uid]
    assert ((v.condition.status, v.condition.reason), admitted(v), len(v.events)) == (condition, grant, events)
    assert "policy" not in v.quota
    if grant is not None:
        assert v.condition.message.endswith("no QuotaPolicy covers this namespace")


def test_twenty_gangs_on_a_nearly_full_cluster_never_hold_gpus_they_cannot_use() -> None:
    """Issue 23's new user: 20 Trainers of 5 one-GPU pods on nodes with 17 GPUs free in all.
    Three are admitted whole; the others wait with nothing reserved (no half gang)."""
    nodes = [node(f"n{i}", "on-demand") for i in range(4)]
    busy = [PodInfo(node=f"n{i}", requests={GPU: Decimal(used)}) for i, used in enumerate((4, 4, 3, 4))]
    runs = [trainer(f"r{i:02}", spec(workers=5, gpus=1), age=i) for i in range(20)]
    result = plan(ungoverned_world(runs, nodes, busy))
    admitted_runs = [t for t in runs if admitted(result.decisions[t.uid]) is not None]
    assert len(admitted_runs) == 3
    for t in admitted_runs:
        assert len(grant_of(result.decisions[t.uid])[0]) == 5
    waiting = [result.decisions[t.uid] for t in runs if t not in admitted_runs]
    assert {(d.condition.status, d.condition.reason) for d in waiting} == {("False", "WaitingForCapacity")}
    assert all("contribution" not in d.quota for d in waiting)


# the level the Trainer requires, the one its profile requires -> the cliques a run of four workers
# goes into (a of three nodes, b of two, in one zone), none when no single domain holds it
PROFILE_PACKING = [
    (None, None, "a+b"),
    (None, CLIQUE, None),  # the profile's: no single clique holds four
    (ZONE, CLIQUE, "a+b"),  # the Trainer's own wins
]


@pytest.mark.parametrize(("own", "profiles", "where"), PROFILE_PACKING)
def test_a_run_is_packed_as_its_profile_says_unless_it_says_otherwise(
    own: str | None, profiles: str | None, where: str | None
) -> None:
    body = trainer_body("a", "team-a", profile="p")
    scheduling = {"preference": "OnDemandOnly"} | ({"packing": {"level": own, "mode": "Required"}} if own else {})
    body["spec"].update(topology={"workers": 4}, scheduling=scheduling, resources={"limits": {GPU: 8}})
    section = {"name": "p", "contribution": {"generation": 1}}
    body["status"] = {"profile": section | ({"packing": {"level": profiles, "mode": "Required"}} if profiles else {})}
    t = trainer_info(body)
    v = plan(world([t], cliques(a=3, b=2), levels=(CLIQUE, ZONE))).decisions[t.uid]
    if where is None:
        assert v.condition.reason == "WaitingForCapacity"
        assert "else its profile's packing" in v.condition.message
    else:
        assert "+".join(sorted({n[0] for n in grant_of(v)[0]})) == where


def test_a_run_is_not_admitted_before_its_profile_has_answered() -> None:
    """Its profile may say where it goes (packing, node selector, tolerations, resources): nothing
    is decided before the profile controller's answer for the run's generation is written."""
    body = trainer_body("a", "team-a", profile="p")
    body["spec"].update(topology={"workers": 4}, resources={"limits": {GPU: 8}})
    waiting = plan(world([trainer_info(body)], cliques(a=3, b=2), levels=(CLIQUE, ZONE)))
    assert waiting.decisions == {}
    packing = {"level": CLIQUE, "mode": "Required"}
    body["status"] = {"profile": {"name": "p", "contribution": {"generation": 1}, "packing": packing}}
    t = trainer_info(body)
    answered = plan(world([t], cliques(a=3, b=2), levels=(CLIQUE, ZONE))).decisions[t.uid]
    assert answered.condition.reason == "WaitingForCapacity"


def test_a_profile_s_packing_changed_plans_the_run_again() -> None:
    body = trainer_body("a", "team-a", profile="p")
    body["status"] = {"profile": {"name": "p", "contribution": {"generation": 1}}}
    before = trainer_fingerprint(body)
    body["status"]["profile"]["packing"] = {"level": CLIQUE, "mode": "Required"}
    assert trainer_fingerprint(body) != before


def test_a_run_naming_a_profile_is_pending_until_the_profile_answers_for_its_generation() -> None:
    body = trainer_body("a", "team-a", profile="p")
    assert trainer_info(body).profile_pending
    body["status"] = {"profile": {"name": "p", "contribution": {"generation": 1}, "placementPlugin": "Skip"}}
    info = trainer_info(body)
    assert (info.profile_pending, info.placement_plugin) == (False, "Skip")
    body["metadata"]["generation"] = 2
    assert trainer_info(body).profile_pending
    assert not trainer_info(trainer_body("b", "team-a")).profile_pending


def test_a_run_no_node_takes_waits_with_no_pod_and_says_why() -> None:
    """Every node tainted: the run is placed nowhere (the scheduler would refuse its pods there),
    and the message names the fix; the namespace's default toleration opens them."""
    tainted = [node(f"o{i}", "on-demand", taints=(Taint("dedicated", "infra", "NoSchedule"),)) for i in range(2)]
    t = trainer("a")
    v = plan(world([t], tainted)).decisions[t.uid]
    assert (v.condition.status, v.condition.reason) == ("False", "WaitingForCapacity")
    assert "on-demand: no node takes its worker pods (their nodeSelector, or node taints" in v.condition.message
    assert "spot: not enough free nodes" in v.condition.message  # none at all: room is what is short
    tolerant = replace(t, namespace_tolerations=(Tolerates("dedicated", "Exists"),))
    v = plan(world([tolerant], tainted)).decisions[t.uid]
    assert v.condition.status == "True"
    assert admitted(v) == ("on-demand", 2, "on-demand-0")


def test_a_node_proactive_mode_predicts_is_a_reclaim_notice_that_says_so() -> None:
    """The taint with the value "predicted" (proactive mode's), read from the Node: its runs save,
    then move, as under any reclaim notice; the reason and message say it was predicted."""
    body = {
        "metadata": {
            "name": "s2",
            "labels": {"karpenter.sh/capacity-type": "spot"},
            "annotations": {"trainer.operator.kubeflow.org/prediction": "GPU temperature 84 °C, 89 °C in 5 min"},
        },
        "spec": {
            "taints": [{"key": "trainer.operator.kubeflow.org/reclaim", "value": "predicted", "effect": "NoSchedule"}]
        },
        "status": {"allocatable": {GPU: "8"}, "conditions": [{"type": "Ready", "status": "True"}]},
    }
    predicted, _ = node_info(body, NOW, 300)
    assert (predicted.schedulable, predicted.predicted) == (False, True)
    assert predicted.reclaimed == (
        "node s2 is predicted to degrade (GPU temperature 84 °C, 89 °C in 5 min; "
        "trainer.operator.kubeflow.org/reclaim taint)"
    )
    ckpt = spec(checkpoint={"bucket": "pvc-backups"})
    t, pods = _admit_on_spot(trainer("a", ckpt), SPOT2_OD2)
    v = plan(world([t], [node("s1"), predicted, node("o1", "on-demand"), node("o2", "on-demand")], pods)).decisions[
        t.uid
    ]
    q = QuotaStatus.model_validate(v.quota)
    assert q.renegotiation is not None
    assert (v.condition.reason, q.renegotiation.reason) == ("ReclaimPending", "NodePredicted")
    assert v.events[0][:2] == ("Warning", "NodePredicted")


def test_a_cordoned_node_is_a_notice_for_runs_with_checkpoints_only() -> None:
    """A drain cordons the node, then evicts its pods: a run with checkpoints (whose pods the
    trainer guards from the evictions) saves, then moves whole; a run without any stays, and the
    drain's evictions end its pods there (docs/design/disruption.md, decision 5)."""
    body = {
        "metadata": {"name": "s2", "labels": {"karpenter.sh/capacity-type": "spot"}},
        "spec": {
            "unschedulable": True,
            "taints": [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}],
        },
        "status": {"allocatable": {GPU: "8"}, "conditions": [{"type": "Ready", "status": "True"}]},
    }
    cordoned, _ = node_info(body, NOW, 300)
    assert (cordoned.schedulable, cordoned.reclaimed, cordoned.drained) == (
        False,
        None,
        "node s2 is cordoned (drained)",
    )
    notice = [node("s1"), cordoned, node("o1", "on-demand"), node("o2", "on-demand")]
    ckpt = spec(checkpoint={"bucket": "pvc-backups"})
    t, pods = _admit_on_spot(trainer("a", ckpt), SPOT2_OD2)
    v = plan(world([t], notice, pods)).decisions[t.uid]
    q = QuotaStatus.model_validate(v.quota)
    assert q.renegotiation is not None
    assert (v.condition.reason, q.renegotiation.reason) == ("ReclaimPending", "NodeDrained")
    assert q.renegotiation.waiting_for_checkpoint
    assert "node s2 is cordoned (drained); waiting up to 300s" in q.renegotiation.message
    assert admitted(v) == ("spot", 2, "spot-0")
    saved = replace(feed_back(t, v), save=(save_request_id("NodeDrained", q.renegotiation.since), "Committed"))
    moved = plan(world([saved], notice, pods, now=NOW + timedelta(seconds=20))).decisions[t.uid]
    assert admitted(moved) == ("on-demand", 2, "on-demand-1")
    assert "the checkpoint the ranks were asked for committed" in moved.condition.message

    plain, plain_pods = _admit_on_spot(trainer("b"), SPOT2_OD2)
    kept = plan(world([plain], notice, plain_pods)).decisions[plain.uid]
    assert (kept.condition.reason, admitted(kept)) == ("Admitted", ("spot", 2, "spot-0"))
    assert QuotaStatus.model_validate(kept.quota).renegotiation is None


def test_a_reclaimed_run_with_room_on_its_own_capacity_still_saves_first_then_every_pod_moves() -> None:
    """A spare spot node could take the replica on the reclaimed one, but a rank moved alone would
    break its gang mid-step: the run waits for the save, then all of it is admitted anew (a new
    id: the trainer replaces every pod, and they resume from the saved step)."""
    ckpt = spec(checkpoint={"bucket": "pvc-backups"})
    nodes = [node("s1"), node("s2"), node("s3"), node("o1", "on-demand")]
    t, pods = _admit_on_spot(trainer("a", ckpt), nodes)
    hosts = sorted(p.node for p in pods)
    notice = [_reclaim(n.name) if n.name == hosts[1] else n for n in nodes]
    v = plan(world([t], notice, pods)).decisions[t.uid]
    assert v.condition.reason == "ReclaimPending"
    assert admitted(v) == ("spot", 2, "spot-0")
    waiting = feed_back(t, v)
    since = QuotaStatus.model_validate(v.quota).renegotiation.since  # type: ignore[union-attr]
    saved = replace(waiting, save=(save_request_id("SpotReclaimed", since), "Committed"))
    moved = plan(world([saved], notice, pods, now=NOW + timedelta(seconds=20))).decisions[t.uid]
    assert admitted(moved) == ("spot", 2, "spot-1")
    placement = QuotaStatus.model_validate(moved.quota).contribution.grant.placement  # type: ignore[union-attr]
    assert hosts[1] not in placement["worker"]  # type: ignore[index]
    assert "every pod moved (spot, 2 workers), resuming from the newest checkpoint" in moved.condition.message
    # the next plan, before the trainer has replaced the old pods (one still on the reclaimed
    # node): they are the old admission's, no new notice for the run
    after = plan(world([feed_back(saved, moved)], notice, pods, now=NOW + timedelta(seconds=21))).decisions[t.uid]
    assert after.condition.reason != "ReclaimPending"
    assert admitted(after) == ("spot", 2, "spot-1")
    assert after.events == ()

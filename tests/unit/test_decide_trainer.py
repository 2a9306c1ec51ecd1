"""The trainer's decision core, table by table (gates: docs/design/status-protocol.md; failures: docs/trainer.md)."""

from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.factories import trainer_spec
from trainerop_common.api.base import Condition, Contribution
from trainerop_common.api.trainer import TrainerSpec, TrainerStatus
from trainerop_common.contracts import REPLICA_TYPE_LABEL
from trainerop_trainer.controller import contributions_of
from trainerop_trainer.decide import (
    Decision,
    Observed,
    PodView,
    RestartBackoff,
    decide,
    effective_run_policy,
    held_counts,
    once_created,
)
from trainerop_trainer.guard import GuardChange, GuardView
from trainerop_trainer.pods import Owner
from trainerop_trainer.policy import recovering
from trainerop_trainer.views import progress_only, setback

NOW = datetime(2026, 1, 1, 0, 10, tzinfo=UTC)
STAMP = "2026-01-01T00:10:00Z"
GATES = ("ProfileResolved", "QuotaAdmitted")
SEED: dict[str, Any] = {"epochs": 10, "image": "img", "topology": {"workers": 4, "parameterServers": 1}}


def spec(**changes: Any) -> TrainerSpec:
    return trainer_spec(**{**SEED, **changes})


def cond(type_: str, status: str, reason: str = "R", generation: int = 1, message: str = "") -> Condition:
    return Condition(
        type=type_,
        status=status,
        reason=reason,
        message=message,
        last_transition_time="2026-01-01T00:00:00Z",
        observed_generation=generation,
    )


OPEN = [cond("ProfileResolved", "True"), cond("QuotaAdmitted", "True")]


def pod(role: str, index: int, phase: str = "Running", exit_code: int | None = None, **kw: Any) -> PodView:
    return PodView(
        name=f"t-{role}-{index}",
        uid=f"u-{role}-{index}",
        role=role,  # type: ignore[arg-type]
        index=index,
        phase=phase,
        ready=phase == "Running",
        exit_code=exit_code,
        **kw,
    )


def running(s: TrainerSpec) -> list[PodView]:
    return [pod("worker", i) for i in range(s.topology.workers)] + [
        pod("ps", i) for i in range(s.topology.parameter_servers)
    ]


def observed(
    s: TrainerSpec,
    pods: Sequence[PodView] = (),
    conditions: Sequence[Condition] = OPEN,
    status: dict[str, Any] | None = None,
    generation: int = 1,
    services: Sequence[str] | None = None,
    lost_nodes: dict[str, str] | None = None,
    contributions: dict[str, Any] | None = None,
    deleted_nodes: frozenset[str] = frozenset(),
    force_unreachable: bool = False,
    age: float | None = None,
    gates_grace: float = 0.0,
) -> Observed:
    names = ({"t"} if pods else set()) if services is None else set(services)  # the Trainer's Service
    return Observed(
        owner=Owner("t", "ns", "uid", generation),
        spec=s,
        status=TrainerStatus.model_validate(status or {}),
        conditions=conditions,
        gates=GATES,
        now=NOW,
        pods=pods,
        services=frozenset(names),
        lost_nodes=lost_nodes or {},
        deleted_nodes=deleted_nodes,
        force_unreachable=force_unreachable,
        contributions={k: Contribution.model_validate(v) for k, v in (contributions or {}).items()},
        age=age,
        gates_grace=gates_grace,
    )


def observe(s: TrainerSpec, pods: Sequence[PodView] = (), **kw: Any) -> Decision:
    return decide(observed(s, pods, **kw))


def by_type(d: Decision) -> dict[str, Any]:
    return {c.type: c for c in d.conditions}


def created_names(d: Decision) -> list[str]:
    return [p["metadata"]["name"] for p in d.create_pods]


FOUR_AND_PS = [pod("worker", i) for i in range(4)] + [pod("ps", 0)]
STARTING_PODS = [pod("worker", i, "Pending") for i in range(4)] + [pod("ps", 0, "Pending")]
FAILED_0 = [pod("worker", 0, "Failed", 137), *FOUR_AND_PS[1:]]
ALL_WORKERS_DONE = [pod("worker", i, "Succeeded", 0) for i in range(4)] + [pod("ps", 0)]
ON_N1 = [pod("worker", 0, node="n1"), *FOUR_AND_PS[1:]]
EVERY_POD = ("t-ps-0", "t-worker-0", "t-worker-1", "t-worker-2", "t-worker-3")
STILL_RUNNING = ("t-ps-0", "t-worker-1", "t-worker-2", "t-worker-3")
WORKERS = ("t-worker-0", "t-worker-1", "t-worker-2", "t-worker-3")

# What the run is, and what the trainer does: one row per situation (generic framework, 4 workers
# and a parameter server; gates open unless said). The condition column is the one that says why.
RUN_TABLE: list[
    tuple[str, dict[str, Any], list[PodView], dict[str, Any], str, tuple[str, str, str], int, tuple[str, ...]]
] = [
    # situation, spec changes, pods, observe(...) extras -> phase, (condition, status, reason), pods created, deleted
    ("a new run", {}, [], {}, "Pending", ("Created", "False", "CreatingPods"), 5, ()),
    ("closed gates", {}, [], {"conditions": []}, "Pending", ("Created", "False", "WaitingForGates"), 0, ()),
    ("every pod running", {}, FOUR_AND_PS, {}, "Running", ("Running", "True", "AllPodsRunning"), 0, ()),
    (
        "exit 137 (OOM kill): retried",
        {},
        FAILED_0,
        {},
        "Restarting",
        ("Restarting", "True", "PodFailed"),
        0,
        ("t-worker-0",),
    ),
    (
        "exit 1 under ExitCode: permanent",
        {"runPolicy": {"restartPolicy": "ExitCode"}},
        [pod("worker", 0, "Failed", 1), *FOUR_AND_PS[1:]],
        {},
        "Failed",
        ("Failed", "True", "PodFailed"),
        0,
        STILL_RUNNING,  # cleanPodPolicy Running: the pods still running go
    ),
    (
        "one restart too many",
        {"runPolicy": {"backoffLimit": 0}},
        FAILED_0,
        {},
        "Failed",
        ("Failed", "True", "BackoffLimitExceeded"),
        0,
        STILL_RUNNING,
    ),
    (
        "a failure under restartScope Gang",
        {"runPolicy": {"restartScope": "Gang"}},
        FAILED_0,
        {},
        "Restarting",
        ("Restarting", "True", "PodFailed"),
        0,
        WORKERS,  # every worker, not the parameter server
    ),
    (
        "a pod on a lost node",
        {},
        ON_N1,
        {"lost_nodes": {"n1": "gone"}},
        "Restarting",
        ("Restarting", "True", "PodFailed"),
        0,
        ("t-worker-0",),
    ),
    (
        "every worker succeeded",
        {},
        ALL_WORKERS_DONE,
        {},
        "Succeeded",
        ("Succeeded", "True", "Succeeded"),
        0,
        ("t-ps-0",),
    ),
    (
        "suspended",
        {"runPolicy": {"suspend": True}},
        FOUR_AND_PS,
        {},
        "Suspended",
        ("Suspended", "True", "SuspendedByUser"),
        0,
        EVERY_POD,
    ),
    (
        "scaled from 4 to 2 workers",
        {"topology": {"workers": 2, "parameterServers": 1}},
        FOUR_AND_PS,
        {},
        "Running",
        ("Running", "True", "AllPodsRunning"),
        0,
        ("t-worker-2", "t-worker-3"),
    ),
]


@pytest.mark.parametrize(
    ("spec_changes", "pods", "extra", "phase", "why", "created", "deleted"),
    [row[1:] for row in RUN_TABLE],
    ids=[row[0] for row in RUN_TABLE],
)
def test_what_the_run_is_and_what_the_trainer_does(
    spec_changes: dict[str, Any],
    pods: list[PodView],
    extra: dict[str, Any],
    phase: str,
    why: tuple[str, str, str],
    created: int,
    deleted: tuple[str, ...],
) -> None:
    d = observe(spec(**spec_changes), pods, **extra)
    condition = by_type(d)[why[0]]
    assert (d.status["phase"], (condition.type, condition.status, condition.reason)) == (phase, why)
    assert (len(d.create_pods), tuple(sorted(d.delete_pods))) == (created, deleted)


NO_NODE = "0/100 nodes are available: 100 Insufficient nvidia.com/gpu."
UNPLACED = [replace(p, unschedulable=NO_NODE) for p in STARTING_PODS[:3]] + STARTING_PODS[3:]
NO_IMAGE = [replace(STARTING_PODS[0], waiting="ImagePullBackOff: Back-off pulling image"), *STARTING_PODS[1:]]
# What `kubectl get trainers` says the run is doing (status.reason, status.message), one row per
# situation (4 workers and a parameter server; gates open unless said).
GLANCE_TABLE: list[tuple[str, dict[str, Any], list[PodView], dict[str, Any], str, str]] = [
    # situation, spec changes, pods, observe(...) extras -> reason, message
    ("a new run", {}, [], {}, "CreatingPods", "creating 5 of 5 pods"),
    (
        "closed gates",
        {},
        [],
        {"conditions": [cond("ProfileResolved", "True"), cond("QuotaAdmitted", "False", "QueueFull", message="wait")]},
        "WaitingForGates",
        "waiting for QuotaAdmitted (QueueFull: wait)",
    ),
    ("pods created, starting", {}, STARTING_PODS, {}, "Starting", "0 of 5 pods running"),
    ("three pods no node takes", {}, UNPLACED, {}, "Unschedulable", f"3 of 5 pods unschedulable: {NO_NODE}"),
    (
        "an image that does not pull",
        {},
        NO_IMAGE,
        {},
        "ImagePullBackOff",
        "1 of 5 pods cannot start: ImagePullBackOff: Back-off pulling image",
    ),
    ("every pod running", {}, FOUR_AND_PS, {}, "Running", "5 pods running"),
    ("exit 137: restarting", {}, FAILED_0, {}, "PodFailed", "pod t-worker-0 failed with exit code 137"),
    (
        "exit 1 under ExitCode: failed",
        {"runPolicy": {"restartPolicy": "ExitCode"}},
        [pod("worker", 0, "Failed", 1), *FOUR_AND_PS[1:]],
        {},
        "PodFailed",
        "pod t-worker-0 failed with exit code 1, which restartPolicy ExitCode does not retry (exit codes 1-127 are "
        "permanent); fix the cause and create the Trainer again",
    ),
    ("every worker succeeded", {}, ALL_WORKERS_DONE, {}, "Succeeded", "the run finished successfully"),
    (
        "succeeded earlier, its pods gone",
        {},
        [],
        {
            "status": {"phase": "Succeeded"},
            "conditions": [
                *OPEN,
                cond("Created", "True", "PodsCreated"),
                cond("Succeeded", "True", "Succeeded", message="done"),
            ],
        },
        "Succeeded",
        "done",
    ),
    (
        "suspended",
        {"runPolicy": {"suspend": True}},
        FOUR_AND_PS,
        {},
        "SuspendedByUser",
        "spec.runPolicy.suspend is true; its pods are deleted",
    ),
]


@pytest.mark.parametrize(
    ("spec_changes", "pods", "extra", "reason", "message"),
    [row[1:] for row in GLANCE_TABLE],
    ids=[row[0] for row in GLANCE_TABLE],
)
def test_what_the_run_is_doing_at_a_glance(
    spec_changes: dict[str, Any], pods: list[PodView], extra: dict[str, Any], reason: str, message: str
) -> None:
    d = observe(spec(**spec_changes), pods, **extra)
    assert (d.status["reason"], d.status["message"]) == (reason, message)


def test_a_status_message_fits_its_bound() -> None:
    long = [replace(STARTING_PODS[0], unschedulable="x" * 5000), *STARTING_PODS[1:]]
    assert len(observe(spec(), long).status["message"]) == 1024


@pytest.mark.parametrize(
    ("conditions", "message_parts"),
    [
        ([], ["waiting for the gates' answers for generation 1 (ProfileResolved, QuotaAdmitted)"]),
        (
            [cond("ProfileResolved", "True", generation=0), cond("QuotaAdmitted", "True")],
            ["the gates' answers for generation 1 (ProfileResolved, QuotaAdmitted)"],
        ),
        (
            [cond("ProfileResolved", "False", "ProfileNotFound", message="create it"), cond("QuotaAdmitted", "True")],
            ["waiting for ProfileResolved (ProfileNotFound: create it)"],
        ),
    ],
)
def test_closed_gates_create_nothing_and_say_why(conditions: list[Condition], message_parts: list[str]) -> None:
    """The message says which gate answered no and why; gates that have not answered yet are one
    line naming them all, the same while the answers come in (no status write as each opens)."""
    d = observe(spec(), conditions=conditions)
    assert d.create_pods == ()
    assert d.create_services == ()
    created = by_type(d)["Created"]
    assert (created.status, created.reason) == ("False", "WaitingForGates")
    for part in message_parts:
        assert part in created.message
    if not conditions:  # one gate answering yes changes nothing the trainer writes
        opened = observe(spec(), conditions=[cond("ProfileResolved", "True")])
        assert by_type(opened)["Created"].message == created.message
    assert d.status["phase"] == "Pending"


PENDING = {"phase": "Pending"}  # the trainer has written a status for this Trainer before
SILENT = [cond("ProfileResolved", "True")]  # QuotaAdmitted has not answered
REFUSED = [cond("ProfileResolved", "False", "ProfileNotFound", message="create it")]


# A new Trainer whose gates have not answered yet: its first status may wait a moment (2 s of
# grace here) for them, so that it is "pods created" rather than "waiting" and then that.
@pytest.mark.parametrize(
    ("conditions", "status", "age", "writes", "again_in"),
    [
        (SILENT, None, 0.5, False, 1.5),  # new, the gates silent: nothing yet, look again at the grace's end
        ([], None, 1.0, False, 1.0),
        (SILENT, None, -3.0, False, 2.0),  # this clock behind the API server's: never past the grace
        (SILENT, None, 2.0, True, None),  # the grace is over: say that it waits
        (SILENT, None, None, True, None),  # age unknown
        (REFUSED, None, 0.5, True, None),  # a gate said no: say why at once
        (SILENT, PENDING, 0.5, True, None),  # a status written already (a new generation): keep it true
        (OPEN, None, 0.5, True, None),  # the gates open: the pods and their status
    ],
)
def test_a_new_trainers_first_status_waits_briefly_for_silent_gates(
    conditions: list[Condition], status: dict[str, Any] | None, age: float | None, writes: bool, again_in: float | None
) -> None:
    d = observe(spec(), conditions=conditions, status=status, age=age, gates_grace=2.0)
    assert d.write_status is writes
    if not writes:
        assert (d.create_pods, d.requeue_after) == ((), again_in)
    assert bool(d.create_pods) is (conditions is OPEN)


def test_open_gates_create_every_pod_and_the_service() -> None:
    d = observe(spec())
    assert created_names(d) == ["t-worker-0", "t-worker-1", "t-worker-2", "t-worker-3", "t-ps-0"]
    assert [s["metadata"]["name"] for s in d.create_services] == ["t"]  # one headless Service per Trainer
    assert {(p["spec"]["hostname"], p["spec"]["subdomain"]) for p in d.create_pods} == {
        (name, "t") for name in created_names(d)
    }
    assert by_type(d)["Created"].reason == "CreatingPods"
    assert d.status["topology"]["replicas"]["worker"]["desired"] == 4


def test_the_status_written_with_the_creates_says_the_pods_exist() -> None:
    """Pods are created before the status is written: one write says they were (not "creating",
    then one more once the watch delivers them)."""
    new = observed(spec())
    d = once_created(new, decide(new))
    assert len(d.create_pods) == 5 and d.create_services == decide(new).create_services  # noqa: PT018
    assert (by_type(d)["Created"].status, by_type(d)["Created"].reason) == ("True", "PodsCreated")
    assert d.status["phase"] == "Pending"
    assert d.status["topology"]["replicas"]["worker"]["active"] == 4
    # After a restart the status carries the new failure history: left as decided.
    restart = replace(decide(new), restarted=("t-worker-0",))
    assert once_created(new, restart) is restart
    idle = observed(spec(), running(spec()))
    assert once_created(idle, decide(idle)) == decide(idle)


def test_all_pods_running_is_running_with_a_start_time() -> None:
    d = observe(spec(), running(spec()))
    assert d.create_pods == () and d.delete_pods == ()  # noqa: PT018
    assert d.status["phase"] == "Running"
    assert d.status["progress"]["startTime"] == STAMP
    assert by_type(d)["Running"].status == "True"
    assert by_type(d)["Created"].status == "True"
    assert d.status["topology"]["readyWorkers"] == 4
    assert d.status["topology"]["replicas"]["ps"] == {
        "desired": 1,
        "active": 1,
        "ready": 1,
        "succeeded": 0,
        "failed": 0,
        "restarts": 0,
        "recentFailures": 0,
    }


def test_scaling_up_and_down_touches_only_the_difference() -> None:
    up = observe(spec(topology={"workers": 6, "parameterServers": 1}), running(spec()))
    assert created_names(up) == ["t-worker-4", "t-worker-5"]
    assert up.delete_pods == ()
    assert up.create_services == ()  # the Trainer's Service covers new replicas too
    six = running(spec(topology={"workers": 6, "parameterServers": 1}))
    down = observe(spec(topology={"workers": 3, "parameterServers": 1}), six)
    assert down.delete_pods == ("t-worker-3", "t-worker-4", "t-worker-5")
    assert down.delete_services == ()
    assert down.create_pods == ()


def test_services_per_replica_of_earlier_versions_stay_while_their_replica_does() -> None:
    """Pods made before one Service per Trainer resolve <trainer>-<role>-<index>: those Services
    are kept while the replica exists and go with a scale-down; the Trainer's own is added."""
    six = running(spec(topology={"workers": 6, "parameterServers": 1}))
    legacy = [p.name for p in six]
    down = observe(spec(topology={"workers": 3, "parameterServers": 1}), six, services=legacy)
    assert down.delete_services == ("t-worker-3", "t-worker-4", "t-worker-5")
    assert [s["metadata"]["name"] for s in down.create_services] == ["t"]


def test_a_scale_up_waits_for_the_gates_of_the_new_generation() -> None:
    d = observe(spec(topology={"workers": 6, "parameterServers": 1}), running(spec()), generation=2)
    assert d.create_pods == ()
    assert by_type(d)["Created"].reason == "WaitingForGates"
    assert "2 pods wait for" in by_type(d)["Created"].message


@pytest.mark.parametrize(
    ("policy", "exit_code", "restarted"),
    [
        ("OnFailure", 1, True),
        ("Always", 1, True),
        ("ExitCode", 137, True),  # SIGKILL (OOM) is retryable
        ("ExitCode", None, True),  # evicted / node lost: no exit code
        ("ExitCode", 3, False),  # a bug: permanent
        ("Never", 137, False),
    ],
)
def test_exit_code_rules(policy: str, exit_code: int | None, restarted: bool) -> None:
    s = spec(runPolicy={"restartPolicy": policy})
    pods = [*running(s)[:-2], pod("worker", 3, "Failed", exit_code, reason="Error"), pod("ps", 0)]
    d = observe(s, pods)
    if restarted:
        assert d.restarted == ("t-worker-3",)
        assert d.delete_pods == ("t-worker-3",)
        assert d.status["phase"] == "Restarting"
        assert d.status["topology"]["replicas"]["worker"]["restarts"] == 1
        assert d.events[0][1] == "RestartingPod"
    else:
        assert d.status["phase"] == "Failed"
        failed = by_type(d)["Failed"]
        assert (failed.status, failed.reason) == ("True", "PodFailed")
        assert f"pod t-worker-3 failed with exit code {exit_code}" in failed.message
        assert d.status["progress"]["completionTime"] == STAMP


def test_backoff_limit_fails_the_run() -> None:
    s = spec(runPolicy={"backoffLimit": 2})
    status = {"topology": {"replicas": {"worker": {"restarts": 2}}}}
    d = observe(s, [*running(s)[1:], pod("worker", 0, "Failed", 1)], status=status)
    failed = by_type(d)["Failed"]
    assert failed.reason == "BackoffLimitExceeded"
    assert "backoffLimit is 2" in failed.message


PROFILE_RETRY = {"profile": {"generation": 1, "runPolicy": {"backoffLimit": 5, "restartPolicy": "Never"}}}


@pytest.mark.parametrize(
    ("run_policy", "contributions", "restart_policy", "backoff_limit", "limit_from"),
    [
        ({}, {}, None, None, "the default backoffLimit"),
        ({}, PROFILE_RETRY, "Never", 5, "the profile's backoffLimit"),
        ({"backoffLimit": 1}, PROFILE_RETRY, "Never", 1, "spec.runPolicy.backoffLimit"),
        ({"restartPolicy": "ExitCode"}, PROFILE_RETRY, "ExitCode", 5, "the profile's backoffLimit"),
        # A later concern's default wins over an earlier one's; the Trainer's own value over both.
        (
            {},
            {**PROFILE_RETRY, "checkpoint": {"generation": 1, "runPolicy": {"backoffLimit": 9}}},
            "Never",
            9,
            "the checkpoint's backoffLimit",
        ),
    ],
)
def test_a_profile_fills_the_run_policy_the_trainer_leaves_unset(
    run_policy: dict[str, Any],
    contributions: dict[str, Any],
    restart_policy: str | None,
    backoff_limit: int | None,
    limit_from: str,
) -> None:
    effective, source = effective_run_policy(
        spec(runPolicy=run_policy), {k: Contribution.model_validate(v) for k, v in contributions.items()}
    )
    assert (effective.run_policy.restart_policy, effective.run_policy.backoff_limit) == (restart_policy, backoff_limit)
    assert source == limit_from


def test_the_profile_retry_policy_decides_failures() -> None:
    s = spec()
    status = {"topology": {"replicas": {"worker": {"restarts": 5}}}}
    pods = [*running(s)[1:], pod("worker", 0, "Failed", 137)]
    retry = {"profile": {"generation": 1, "runPolicy": {"backoffLimit": 5}}}
    failed = by_type(observe(s, pods, status=status, contributions=retry))["Failed"]
    assert failed.reason == "BackoffLimitExceeded"
    assert "the profile's backoffLimit is 5" in failed.message
    never = {"profile": {"generation": 1, "runPolicy": {"restartPolicy": "Never"}}}
    failed = by_type(observe(s, pods, contributions=never))["Failed"]
    assert (failed.reason, "restartPolicy Never does not retry" in failed.message) == ("PodFailed", True)
    assert observe(s, pods).restarted == ("t-worker-0",)  # without the profile: OnFailure, limit 6


def test_gang_scope_restarts_every_worker_but_not_the_parameter_server() -> None:
    s = spec(runPolicy={"restartScope": "Gang"})
    pods = [pod("worker", 0, "Failed", 137), *running(s)[1:]]
    d = observe(s, pods)
    assert d.restarted == ("t-worker-0", "t-worker-1", "t-worker-2", "t-worker-3")
    assert d.status["topology"]["replicas"]["worker"]["restarts"] == 1
    assert any(e[1] == "GangRestart" for e in d.events)


def test_gang_scope_leaves_the_evaluator_running_and_replaces_it_alone() -> None:
    s = spec(
        framework="tensorflow", topology={"workers": 2, "chief": 1, "evaluators": 1}, runPolicy={"restartScope": "Gang"}
    )
    ring = [pod("chief", 0), pod("worker", 0), pod("worker", 1)]
    assert observe(s, [*ring, pod("evaluator", 0, "Failed", 137)]).restarted == ("t-evaluator-0",)
    gang = observe(s, [pod("chief", 0), pod("worker", 0, "Failed", 137), pod("worker", 1), pod("evaluator", 0)])
    assert gang.restarted == ("t-chief-0", "t-worker-0", "t-worker-1")


def test_a_gang_starts_again_only_once_all_its_old_pods_are_gone() -> None:
    s = spec(runPolicy={"restartScope": "Gang"})
    old = [pod("worker", i, "Running", deleting=True) for i in (1, 2)]
    going = [*old, pod("ps", 0)]  # worker-0 and worker-3 are gone, 1 and 2 still terminating
    d = observe(s, going)
    assert d.create_pods == ()
    assert d.status["phase"] == "Restarting"
    restarting = by_type(d)["Restarting"]
    assert (restarting.reason, "t-worker-1, t-worker-2 to terminate" in restarting.message) == ("Replacing", True)
    gone = [pod("ps", 0)]
    assert created_names(observe(s, gone, services=[f"t-worker-{i}" for i in range(4)] + ["t-ps-0"])) == [
        f"t-worker-{i}" for i in range(4)
    ]
    # Pod scope: each replica comes back as soon as its own predecessor is gone.
    pod_scope = spec()
    assert created_names(observe(pod_scope, going, services=[p.name for p in going])) == ["t-worker-0", "t-worker-3"]


@pytest.mark.parametrize("scope", ["Pod", "Gang"])
def test_a_parameter_server_restart_leaves_workers_running(scope: str) -> None:
    s = spec(runPolicy={"restartScope": scope})
    d = observe(s, [*running(s)[:-1], pod("ps", 0, "Failed", 137)])
    assert d.restarted == ("t-ps-0",)
    assert d.status["topology"]["replicas"]["ps"]["restarts"] == 1


def test_a_replaced_pod_is_recreated_only_once_its_predecessor_is_gone() -> None:
    s = spec()
    going = [*running(s)[:-2], pod("worker", 3, "Failed", 137, deleting=True), pod("ps", 0)]
    assert observe(s, going).create_pods == ()
    gone = [p for p in going if p.name != "t-worker-3"]
    assert created_names(observe(s, gone, services=[p.name for p in going])) == ["t-worker-3"]


def test_success_policy_and_clean_pod_policy() -> None:
    s = spec(framework="pytorch", topology={"workers": 2}, runPolicy={"cleanPodPolicy": "Running"})
    pods = [pod("master", 0, "Succeeded", 0), pod("worker", 0), pod("worker", 1, "Succeeded", 0)]
    d = observe(s, pods)
    assert d.status["phase"] == "Succeeded"
    assert by_type(d)["Succeeded"].status == "True"
    assert d.delete_pods == ("t-worker-0",)
    assert d.status["progress"]["completionTime"] == STAMP


def test_generic_succeeds_when_all_workers_have() -> None:
    s = spec(topology={"workers": 2, "parameterServers": 1})
    assert observe(s, [pod("worker", 0, "Succeeded", 0), pod("worker", 1), pod("ps", 0)]).status["phase"] == "Running"
    done = observe(s, [pod("worker", 0, "Succeeded", 0), pod("worker", 1, "Succeeded", 0), pod("ps", 0)])
    assert done.status["phase"] == "Succeeded"
    assert done.delete_pods == ("t-ps-0",)


ALL_WORKERS_TF = {"framework": "tensorflow", "topology": {"workers": 2}, "runPolicy": {"successPolicy": "AllWorkers"}}
CHIEF_ALL_WORKERS = {**ALL_WORKERS_TF, "topology": {"workers": 2, "chief": 1}}
CHIEF_ONLY = {**ALL_WORKERS_TF, "topology": {"workers": 0, "chief": 1}}


@pytest.mark.parametrize(
    ("fields", "done", "phase"),
    [
        # TFJob's default: the chief's success ends the run, whatever the workers do.
        ({"framework": "tensorflow", "topology": {"workers": 2, "chief": 1}}, ["chief"], "Succeeded"),
        ({"framework": "tensorflow", "topology": {"workers": 2, "chief": 1}}, ["w0", "w1"], "Running"),
        # Without one: worker 0.
        ({"framework": "tensorflow", "topology": {"workers": 2}}, ["w0"], "Succeeded"),
        # successPolicy AllWorkers: every worker, not worker 0 alone ...
        (ALL_WORKERS_TF, ["w0"], "Running"),
        (ALL_WORKERS_TF, ["w0", "w1"], "Succeeded"),
        # ... unless a chief decides (TFJob ignores AllWorkers then), with or without workers.
        (CHIEF_ALL_WORKERS, ["chief"], "Succeeded"),
        (CHIEF_ALL_WORKERS, ["w0", "w1"], "Running"),
        (CHIEF_ONLY, [], "Running"),
        (CHIEF_ONLY, ["chief"], "Succeeded"),
        # A PyTorchJob of Workers only: every worker.
        ({"framework": "pytorch", "topology": {"workers": 2, "master": 0}}, ["w0"], "Running"),
        ({"framework": "pytorch", "topology": {"workers": 2, "master": 0}}, ["w0", "w1"], "Succeeded"),
    ],
)
def test_which_replicas_success_ends_the_run(fields: dict[str, Any], done: list[str], phase: str) -> None:
    s = spec(**fields)
    named = {"chief": ("chief", 0), "w0": ("worker", 0), "w1": ("worker", 1)}
    pods = [
        pod(role, index, "Succeeded", 0) if key in done else pod(role, index)
        for key, (role, index) in named.items()
        if (role == "chief" and s.topology.chief) or (role == "worker" and index < s.topology.workers)
    ]
    assert observe(s, pods).status["phase"] == phase


def test_a_roles_own_restart_policy_wins_over_the_runs() -> None:
    from trainerop_trainer.policy import retryable

    s = spec(runPolicy={"restartPolicy": "OnFailure", "restartPolicies": {"ps": "Never", "worker": "ExitCode"}})
    assert retryable(s, pod("ps", 0, "Failed", 137)) is False
    assert retryable(s, pod("worker", 0, "Failed", 1)) is False
    assert retryable(s, pod("worker", 0, "Failed", 137)) is True
    assert retryable(s, pod("master", 0, "Failed", 1)) is True  # the run's OnFailure


def test_a_finished_run_stays_finished() -> None:
    s = spec()
    d = observe(
        s,
        [pod("worker", 0, "Succeeded", 0)],
        status={"phase": "Succeeded"},
        conditions=[*OPEN, cond("Succeeded", "True", "Succeeded")],
    )
    assert d.status["phase"] == "Succeeded"
    assert d.create_pods == ()


def test_suspend_deletes_pods_and_says_so() -> None:
    s = spec(runPolicy={"suspend": True})
    d = observe(s, running(s))
    assert d.status["phase"] == "Suspended"
    assert len(d.delete_pods) == 5
    assert by_type(d)["Suspended"].status == "True"
    assert by_type(d)["Created"].reason == "Suspended"


def test_restart_backoff_delays_repeated_replacements_and_requeues() -> None:
    assert [RestartBackoff(1, 8).delay(n) for n in range(1, 7)] == [0, 1, 2, 4, 8, 8]
    s = spec()
    pods = [p for p in running(s) if p.name != "t-worker-3"]
    # The 3rd worker failure in a row 1 s ago: a 2 s backoff, so the replacement waits 1 s more.
    status = {
        "topology": {
            "replicas": {"worker": {"restarts": 3, "recentFailures": 3, "lastFailureTime": "2026-01-01T00:09:59Z"}}
        }
    }
    d = observe(s, pods, status=status)
    assert d.create_pods == ()
    assert d.requeue_after == 1.0
    assert d.status["phase"] == "Restarting"
    assert by_type(d)["Restarting"].reason == "RestartBackoff"
    # The first failure of a role is replaced at once.
    first = {
        "topology": {
            "replicas": {"worker": {"restarts": 9, "recentFailures": 1, "lastFailureTime": "2026-01-01T00:10:00Z"}}
        }
    }
    assert created_names(observe(s, pods, status=first)) == ["t-worker-3"]


@pytest.mark.parametrize(
    ("counted", "failed_pod", "restarts", "counted_after", "event"),
    [
        # A new failure: counted once, its pod's uid kept while the pod is there.
        ((), pod("worker", 3, "Failed", 137), 3, ["u-worker-3"], True),
        # Counted by a write the controller made before it was killed, the pod not yet deleted:
        # deleted now, not counted again.
        (("u-worker-3",), pod("worker", 3, "Failed", 137), 2, ["u-worker-3"], False),
        # A later pod of the same replica failed: a new failure (another uid).
        (("u-worker-3-before",), pod("worker", 3, "Failed", 137), 3, ["u-worker-3"], True),
        # The counted pod is going: forgotten, nothing counted.
        (("u-worker-3",), pod("worker", 3, "Failed", 137, deleting=True), 2, None, False),
    ],
)
def test_each_failure_is_counted_exactly_once_even_across_a_controller_restart(
    counted: tuple[str, ...], failed_pod: PodView, restarts: int, counted_after: list[str] | None, event: bool
) -> None:
    s = spec()
    status = {"topology": {"replicas": {"worker": {"restarts": 2, "countedFailures": list(counted) or None}}}}
    d = observe(s, [*running(s)[:-2], failed_pod, pod("ps", 0)], status=status)
    worker = d.status["topology"]["replicas"]["worker"]
    assert (worker["restarts"], worker.get("countedFailures")) == (restarts, counted_after)
    assert any(e[1] == "RestartingPod" for e in d.events) is event
    assert d.restarted == (() if failed_pod.deleting else ("t-worker-3",))  # its deletion waits for this write


def test_a_failure_counted_before_a_restart_does_not_count_against_the_backoff_limit_again() -> None:
    s = spec(runPolicy={"backoffLimit": 2})
    status = {"topology": {"replicas": {"worker": {"restarts": 2, "countedFailures": ["u-worker-0"]}}}}
    d = observe(s, [*running(s)[1:], pod("worker", 0, "Failed", 1)], status=status)
    assert d.status["phase"] == "Restarting"
    assert d.restarted == ("t-worker-0",)


def test_a_failure_records_its_time_for_the_backoff() -> None:
    s = spec()
    d = observe(s, [*running(s)[:-2], pod("worker", 3, "Failed", 137), pod("ps", 0)])
    assert d.status["topology"]["replicas"]["worker"]["lastFailureTime"] == STAMP


def test_active_deadline() -> None:
    s = spec(runPolicy={"activeDeadlineSeconds": 60})
    started = {"progress": {"startTime": "2026-01-01T00:09:30Z"}}
    d = observe(s, running(s), status=started)
    assert d.status["phase"] == "Running"
    assert d.requeue_after == 30.0
    late = {"progress": {"startTime": "2026-01-01T00:08:00Z"}}
    d = observe(s, running(s), status=late)
    assert d.status["phase"] == "Failed"
    assert by_type(d)["Failed"].reason == "DeadlineExceeded"
    assert len(d.delete_pods) == 5


def test_ttl_after_finished_deletes_the_trainer() -> None:
    s = spec(runPolicy={"ttlSecondsAfterFinished": 300})
    done = [*OPEN, cond("Succeeded", "True", "Succeeded")]
    recent = observe(
        s, [], status={"phase": "Succeeded", "progress": {"completionTime": "2026-01-01T00:09:00Z"}}, conditions=done
    )
    assert (recent.delete_trainer, recent.requeue_after) == (False, 240.0)
    old = observe(
        s, [], status={"phase": "Succeeded", "progress": {"completionTime": "2026-01-01T00:04:00Z"}}, conditions=done
    )
    assert old.delete_trainer


@pytest.mark.parametrize("outcome", ["Succeeded", "Failed"])
def test_the_ttl_clock_is_set_by_the_decision_that_finishes_the_run(outcome: str) -> None:
    """Not left to whatever event comes next (a lost wake-up left a Trainer undeleted)."""
    s = spec(runPolicy={"ttlSecondsAfterFinished": 30, "restartPolicy": "Never"})
    pods = [pod("worker", i, "Succeeded" if outcome == "Succeeded" else "Running") for i in range(4)]
    if outcome == "Failed":
        pods[0] = pod("worker", 0, "Failed", 1)
    d = observe(s, [*pods, pod("ps", 0)])
    assert d.status["phase"] == outcome
    assert d.requeue_after == 30.0


def test_resuming_says_so() -> None:
    d = observe(spec(), [], conditions=[*OPEN, cond("Suspended", "True", "SuspendedByUser")])
    assert (by_type(d)["Suspended"].status, by_type(d)["Suspended"].reason) == ("False", "Resumed")
    assert len(d.create_pods) == 5


@pytest.mark.parametrize(
    ("deleted", "force_unreachable", "forced"),
    [
        (True, False, True),  # the node is gone from the API: someone said the machine is gone
        (False, False, False),  # silent: it may be partitioned with the rank still running
        (False, True, True),  # silent, and --force-delete-unreachable: silent nodes are known stopped
    ],
)
def test_a_pod_on_a_lost_node_is_replaced_as_a_restart_forced_only_when_the_node_cannot_still_run_it(
    deleted: bool, force_unreachable: bool, forced: bool
) -> None:
    s = spec()
    pods = [PodView(**{**p.__dict__, "node": "n2" if p.name == "t-worker-1" else "n1"}) for p in running(s)]
    loss = {"lost_nodes": {"n2": "node n2 is gone"}, "force_unreachable": force_unreachable}
    loss["deleted_nodes"] = frozenset({"n2"}) if deleted else frozenset()
    d = observe(s, pods, **loss)
    assert d.restarted == ("t-worker-1",)
    assert d.force_delete == (("t-worker-1",) if forced else ())
    assert d.status["topology"]["replicas"]["worker"]["restarts"] == 1
    assert "pod t-worker-1 was lost with its node n2" in d.events[0][2]
    # Once it is being deleted it is not counted again, and not replaced while it may still run.
    going = [PodView(**{**p.__dict__, "deleting": p.name == "t-worker-1"}) for p in pods]
    again = observe(s, going, services=[p.name for p in pods], **loss)
    assert again.restarted == ()
    assert again.create_pods == ()
    assert again.force_delete == (("t-worker-1",) if forced else ())
    why = by_type(again)["Restarting"]
    if not forced:
        assert why.reason == "WaitingForLostNode"
        assert "t-worker-1 may still run on n2" in why.message
        assert "kubectl delete node n2" in why.message


def test_suspension_clears_the_start_time_so_a_deadline_restarts_on_resume() -> None:
    s = spec(runPolicy={"suspend": True, "activeDeadlineSeconds": 60})
    d = observe(s, running(s), status={"progress": {"startTime": "2026-01-01T00:00:00Z"}})
    assert "startTime" not in d.status["progress"]


def test_progress_always_has_the_same_shape() -> None:
    first = observe(spec(), running(spec())).status["progress"]
    again = observe(spec(), running(spec()), status={"progress": first}).status["progress"]
    assert first == again == {"startTime": STAMP, "epoch": 0, "step": 0, "percent": 0}


def test_a_stalled_pod_of_a_failed_run_is_cleaned_up() -> None:
    s = spec(topology={"workers": 2}, runPolicy={"restartPolicy": "Never", "stallTimeoutSeconds": 60})
    pods = [pod("worker", 0, started="2026-01-01T00:00:00Z"), pod("worker", 1, started="2026-01-01T00:09:50Z")]
    d = observe(s, pods)
    assert d.status["phase"] == "Failed"
    assert d.delete_pods == ("t-worker-0", "t-worker-1")  # the stalled pod holds GPUs: it goes too


def test_success_is_decided_before_restarts() -> None:
    s = spec(framework="tensorflow", topology={"workers": 2}, runPolicy={"stallTimeoutSeconds": 60})
    pods = [pod("worker", 0, "Succeeded", 0), pod("worker", 1, started="2026-01-01T00:00:00Z")]
    d = observe(s, pods)
    assert d.status["phase"] == "Succeeded"
    assert d.delete_pods == ("t-worker-1",)
    assert d.restarted == ()
    assert d.status["topology"]["replicas"]["worker"]["restarts"] == 0


def test_exit_code_0_on_a_failed_pod_is_retried_under_exit_code_policy() -> None:
    s = spec(runPolicy={"restartPolicy": "ExitCode"})
    d = observe(s, [*running(s)[:-2], pod("worker", 3, "Failed", 0), pod("ps", 0)])
    assert d.restarted == ("t-worker-3",)


def test_a_replica_whose_pod_is_terminating_is_still_restarting() -> None:
    s = spec()
    pods = [*running(s)[:-2], pod("worker", 3, "Failed", 137, deleting=True), pod("ps", 0)]
    d = observe(s, pods, conditions=[*OPEN, cond("Restarting", "True", "PodFailed")])
    assert d.status["phase"] == "Restarting"
    restarting = by_type(d)["Restarting"]
    assert (restarting.status, restarting.reason) == ("True", "Replacing")


def test_lost_nodes_are_forced_away_when_the_run_fails() -> None:
    s = spec(topology={"workers": 2}, runPolicy={"restartPolicy": "Never"})
    pods = [PodView(**{**pod("worker", i).__dict__, "node": f"n{i}"}) for i in range(2)]
    d = observe(s, pods, services=[], lost_nodes={"n1": "gone"}, deleted_nodes=frozenset({"n1"}))
    assert d.status["phase"] == "Failed"
    assert d.force_delete == ("t-worker-1",)
    silent = observe(s, pods, services=[], lost_nodes={"n1": "NotReady since ..."})
    assert (silent.status["phase"], silent.force_delete) == ("Failed", ())  # deleted, its kubelet confirms


def test_failures_far_apart_start_the_backoff_over() -> None:
    s = spec()
    pods = [*running(s)[:-2], pod("worker", 3, "Failed", 137), pod("ps", 0)]
    soon = {
        "topology": {
            "replicas": {"worker": {"restarts": 4, "recentFailures": 4, "lastFailureTime": "2026-01-01T00:09:00Z"}}
        }
    }
    assert observe(s, pods, status=soon).status["topology"]["replicas"]["worker"]["recentFailures"] == 5
    # 10 minutes after the last one (more than 5 x the 60 s cap): a fresh start, no delay.
    late = {
        "topology": {
            "replicas": {"worker": {"restarts": 4, "recentFailures": 4, "lastFailureTime": "2026-01-01T00:00:00Z"}}
        }
    }
    worker = observe(s, pods, status=late).status["topology"]["replicas"]["worker"]
    assert (worker["restarts"], worker["recentFailures"]) == (5, 1)


def quota(grant_id: str | None, workers: int = 4, **grant: Any) -> dict[str, Any]:
    if grant_id is None:
        return {"quota": {"generation": 1}}
    return {"quota": {"generation": 1, "grant": {"id": grant_id, "workers": workers, **grant}}}


def test_the_quota_grant_caps_the_workers_and_replaces_resources() -> None:
    s = spec(resources={"requests": {"cpu": 8, "memory": "8Gi"}})
    d = observe(s, contributions=quota("spot-0", workers=2, resources={"requests": {"cpu": "4"}}))
    workers = [
        p for p in d.create_pods if p["metadata"]["labels"]["trainer.operator.kubeflow.org/replica-type"] == "worker"
    ]
    assert len(workers) == 2
    (container,) = workers[0]["spec"]["containers"]
    assert container["resources"]["requests"] == {"cpu": "4", "memory": "8Gi"}
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["EPOCHS"] == "10"


def test_a_smaller_grant_scales_down_and_says_why() -> None:
    s = spec()
    d = observe(s, running(s), contributions=quota("spot-0", workers=3))
    assert d.delete_pods == ("t-worker-3",)
    assert ("Normal", "ScaledDown", "the quota admits 3 of 4 workers: deleting t-worker-3") in d.events
    assert d.restarted == ()


CHECKPOINTS = {"checkpoint": {"bucket": "s3://b", "credentialsSecret": "c"}}
PLACED: dict[str, Any] = {"placement": {"worker": ["n1", "n2", "n3", "n4"], "ps": ["n1"]}}  # the quota placed it
LOWERED = datetime(2026, 1, 1, 0, 9, 55, tzinfo=UTC)  # 5 s before NOW


@pytest.mark.parametrize(
    ("checkpoints", "grant", "guard", "want"),
    [
        (True, "spot-0", None, ("create", 5, None)),
        (
            True,
            quota("kueue-abc123"),
            None,
            None,
        ),  # Kueue's grant places nothing: no cordon moves it  # 4 workers and a parameter server: all five guarded
        (True, "spot-0", GuardView(5), None),  # as it should be
        (True, quota("spot-0", workers=3, **PLACED), GuardView(5), ("resize", 4, None)),  # the quota admits 3 workers
        (True, "spot-0", GuardView(-1), ("resize", 5, None)),  # someone made it a percentage
        (True, "spot-0", GuardView(0, LOWERED), ("resize", 5, None)),  # the move is over: guarded again
        (True, None, None, None),  # no grant: nobody moves the run after a save, a drain evicts it
        (False, "spot-0", None, None),  # no checkpoints: nothing to save first
        (False, "spot-0", GuardView(5), ("resize", 0, None)),  # no longer: it lets every eviction through
    ],
)
def test_the_drain_guard_covers_runs_that_save_before_they_move(
    checkpoints: bool, grant: Any, guard: GuardView | None, want: tuple[str, int, str | None] | None
) -> None:
    s = spec(**CHECKPOINTS) if checkpoints else spec()
    contributions = quota(grant, **PLACED) if isinstance(grant, str) else grant
    d = decide(replace(observed(s, running(s), contributions=contributions), guard=guard))
    change = d.guard
    if want is None:
        assert change is None
    elif want[0] == "resize":
        assert change is not None
        assert (change.manifest, change.resize, change.lowered_at) == (None, want[1], want[2])
    else:
        assert change is not None
        assert change.manifest is not None
        assert change.manifest["kind"] == "PodDisruptionBudget"
        assert change.manifest["spec"] == {
            "minAvailable": want[1],
            "selector": {"matchLabels": {"trainer-name": "t", "trainer.operator.kubeflow.org/trainer-uid": "uid"}},
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        }
        assert change.manifest["metadata"]["ownerReferences"][0]["uid"] == "uid"


def test_the_drain_guard_selects_exactly_the_runs_pods() -> None:
    s = spec(**CHECKPOINTS)
    d = observe(s, contributions=quota("spot-0", **PLACED))
    assert d.guard is not None
    assert d.guard.manifest is not None
    selector = d.guard.manifest["spec"]["selector"]["matchLabels"]
    for made in d.create_pods:
        labels = made["metadata"]["labels"]
        assert {k: labels.get(k) for k in selector} == selector


@pytest.mark.parametrize(
    ("guard", "cordoned", "deleted_now", "lowered", "requeue"),
    [
        # the move begins: the guard is lowered; the pod on the drained node is the drain's for 10 s
        (GuardView(5), {"n1"}, STILL_RUNNING, STAMP, 10.0),
        (GuardView(0, LOWERED), {"n1"}, STILL_RUNNING, None, 5.0),  # 5 s into that wait
        (GuardView(0, datetime(2026, 1, 1, 0, 9, 50, tzinfo=UTC)), {"n1"}, EVERY_POD, None, None),  # no drain came
        (GuardView(5), set(), EVERY_POD, STAMP, None),  # no node cordoned: every old pod goes at once
        (None, {"n1"}, EVERY_POD, None, None),  # no guard held the drain: it evicted what it could
    ],
)
def test_a_moving_runs_old_pods_on_a_drained_node_are_left_to_the_drain_a_while(
    guard: GuardView | None,
    cordoned: set[str],
    deleted_now: tuple[str, ...],
    lowered: str | None,
    requeue: float | None,
) -> None:
    """kubectl drain retries the eviction by the pod's name: the old pod is left for it to evict
    (which ends its loop), not deleted and replaced under the same name for it to evict again."""
    s = spec(**CHECKPOINTS)
    old = [replace(p, admission="spot-0") for p in ON_N1]
    for gates in (OPEN, [cond("ProfileResolved", "False"), cond("QuotaAdmitted", "True")]):  # held at a gate too
        obs = observed(s, old, contributions=quota("on-demand-1", **PLACED), conditions=gates)
        d = decide(replace(obs, guard=guard, cordoned=frozenset(cordoned)))
        assert d.delete_pods == deleted_now
        if guard is not None and guard.size != 0:
            assert d.guard == GuardChange(resize=0, lowered_at=lowered)
        assert d.requeue_after == requeue
        assert d.restarted == ()


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_a_finished_run_lets_its_pods_go(phase: str) -> None:
    """Pods a clean policy keeps after the end (cleanPodPolicy: None) guard nothing to save for."""
    s = spec(**CHECKPOINTS, runPolicy={"cleanPodPolicy": "None"})
    obs = observed(s, FOUR_AND_PS, contributions=quota("spot-0", **PLACED), status={"phase": phase})
    assert decide(replace(obs, guard=GuardView(5))).guard == GuardChange(resize=0)
    assert decide(replace(obs, guard=GuardView(0))).guard is None


def test_a_replacement_pod_placed_anew_leaves_the_guard_up() -> None:
    """A pending pod re-placed (misplaced, same admission) is no move: the running ranks stay guarded."""
    s = spec(**CHECKPOINTS)
    pending = replace(pod("worker", 0, "Pending"), pinned="n9")
    obs = observed(s, [pending, *FOUR_AND_PS[1:]], contributions=quota("spot-0", **PLACED))
    d = decide(replace(obs, guard=GuardView(5)))
    assert "t-worker-0" in d.delete_pods
    assert d.guard is None


def test_pods_of_an_earlier_admission_are_replaced_not_counted_as_failures() -> None:
    s = spec()
    pods = [PodView(**{**p.__dict__, "admission": "spot-0"}) for p in running(s)]
    d = observe(s, pods, contributions=quota("on-demand-1"))
    assert set(d.delete_pods) == {p.name for p in pods}
    assert d.restarted == ()
    assert d.events[0] == (
        "Normal",
        "QuotaReadmission",
        "the quota admission moved the run (on-demand-1): replacing " + ", ".join(sorted(p.name for p in pods)),
    )
    assert d.create_pods == ()  # each replacement waits for its predecessor to go
    assert by_type(d)["Restarting"].reason == "Replacing"


def test_a_withdrawn_admission_stops_the_run_and_pods_without_one_stay() -> None:
    s = spec()
    pods = [PodView(**{**p.__dict__, "admission": "spot-0"}) for p in running(s)[:2]] + running(s)[2:]
    closed = [cond("ProfileResolved", "True"), cond("QuotaAdmitted", "False", "CapacityLost")]
    d = observe(s, pods, conditions=closed, contributions=quota(None))
    assert set(d.delete_pods) == {"t-worker-0", "t-worker-1"}
    assert "the quota admission was withdrawn" in d.events[0][2]
    assert d.create_pods == ()


def test_pods_are_pinned_to_their_admitted_nodes() -> None:
    s = spec(topology={"workers": 2})
    placement = {"worker": ["node-a", "node-b"]}
    contributions = quota("spot-0", workers=2, placement=placement)
    spot = {"matchExpressions": [{"key": "capacity", "operator": "In", "values": ["spot"]}]}
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [spot]}}}
    contributions["quota"]["pod"] = {"affinity": affinity}
    d = observe(s, contributions=contributions)
    pinned = {
        p["metadata"]["name"]: (
            p["metadata"]["annotations"]["trainer.operator.kubeflow.org/node"],
            p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
                "nodeSelectorTerms"
            ],
        )
        for p in d.create_pods
    }
    for name, node in (("t-worker-0", "node-a"), ("t-worker-1", "node-b")):  # each its own node only
        assert pinned[name] == (
            node,
            [{**spot, "matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}],
        )


def test_pinning_keeps_the_capacity_terms() -> None:
    from trainerop_trainer.pods import pin

    terms: list[dict[str, Any]] = [
        {"matchExpressions": [{"key": "a", "operator": "In", "values": ["1"]}]},
        {"matchExpressions": []},
    ]
    pod: dict[str, Any] = {
        "metadata": {"annotations": {}},
        "spec": {
            "affinity": {
                "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}
            }
        },
    }
    out = pin(pod, "n")["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    field = {"key": "metadata.name", "operator": "In", "values": ["n"]}
    assert out["nodeSelectorTerms"] == [
        {**terms[0], "matchFields": [field]},
        {"matchExpressions": [], "matchFields": [field]},
    ]


def test_an_unscheduled_pod_pinned_elsewhere_is_replaced_a_placed_one_stays() -> None:
    s = spec(topology={"workers": 2})
    pods = [
        pod("worker", 0, "Pending", admission="spot-0", pinned="old-node"),
        pod("worker", 1, "Running", admission="spot-0", pinned="old-node", node="old-node"),
    ]
    d = observe(s, pods, contributions=quota("spot-0", workers=2, placement={"worker": ["new-a", "new-b"]}))
    assert d.delete_pods == ("t-worker-0",)
    assert d.restarted == ()


def test_finished_pods_of_an_earlier_admission_are_left_alone() -> None:
    s = spec(topology={"workers": 2})
    pods = [pod("worker", 0, "Succeeded", admission="spot-0"), pod("worker", 1, "Running", admission="spot-0")]
    d = observe(s, pods, contributions=quota("on-demand-1", workers=2))
    assert d.delete_pods == ("t-worker-1",)


@pytest.mark.parametrize(
    ("restart_policy", "exit_code", "retried"),
    [
        ("Never", 137, False),
        ("OnFailure", 1, True),
        ("Always", 1, True),
        ("ExitCode", 1, False),  # 1-127: the program's own error
        ("ExitCode", 127, False),
        ("ExitCode", 128, True),  # 128-255: a signal (137: OOM killed, 143: SIGTERM)
        ("ExitCode", 137, True),
        ("ExitCode", None, True),  # no exit code: evicted, or lost with its node
        ("ExitCode", 0, True),  # 0 on a failed pod: stopped from outside
    ],
)
def test_which_failures_are_retried(restart_policy: str, exit_code: int | None, retried: bool) -> None:
    from trainerop_trainer.policy import retryable

    s = spec(runPolicy={"restartPolicy": restart_policy})
    assert retryable(s, pod("worker", 0, "Failed", exit_code)) is retried


@pytest.mark.parametrize(
    ("framework", "topology", "granted", "shards"),
    [
        ("generic", {"workers": 2}, None, 2),
        ("pytorch", {"workers": 3}, None, 4),  # the master writes a shard too
        ("xgboost", {"workers": 3}, 3, 4),
        ("tensorflow", {"workers": 2, "parameterServers": 1}, None, 2),  # parameter servers write none
        ("pytorch", {"workers": 4, "elastic": {"minWorkers": 1, "maxWorkers": 4}}, 2, 2),  # the quota granted 2
        ("generic", {"workers": 4, "elastic": {"minWorkers": 2, "maxWorkers": 8}}, 8, 4),  # a grant never adds
    ],
)
def test_a_checkpoint_has_a_shard_per_pod_that_writes_one(
    framework: str, topology: dict[str, Any], granted: int | None, shards: int
) -> None:
    """CHECKPOINT_SHARDS counts the pods the trainer creates, as the quota admitted the run (with
    the Trainer's workers instead, an elastic run granted fewer could never commit)."""
    s = spec(framework=framework, topology=topology, checkpoint={"bucket": "pvc-backups"})
    grant = {"quota": {"generation": 1, "grant": {"id": "spot-0", "workers": granted}}} if granted else None
    d = observe(s, contributions=grant)
    counts = {
        e.get("value")
        for p in d.create_pods
        for e in p["spec"]["containers"][0]["env"]
        if e["name"] == "CHECKPOINT_SHARDS"
    }
    assert counts == {str(shards)}


@pytest.mark.parametrize(
    ("topology", "granted", "desired"),
    [
        ({"workers": 4}, None, 4),
        ({"workers": 4, "elastic": {"minWorkers": 1, "maxWorkers": 4}}, 2, 2),  # the quota granted 2
        ({"workers": 4, "elastic": {"minWorkers": 2, "maxWorkers": 8}}, 8, 4),  # a grant never adds
    ],
)
def test_the_status_counts_the_workers_the_run_is_admitted_with(
    topology: dict[str, Any], granted: int | None, desired: int
) -> None:
    grant = {"quota": {"generation": 1, "grant": {"id": "spot-0", "workers": granted}}} if granted else None
    d = observe(spec(framework="generic", topology=topology), contributions=grant)
    assert d.status["topology"]["replicas"]["worker"]["desired"] == desired
    assert sum(p["metadata"]["labels"][REPLICA_TYPE_LABEL] == "worker" for p in d.create_pods) == desired


@pytest.mark.parametrize(
    ("event", "view", "waits", "urgent"),
    [
        ("created, not yet scheduled", pod("worker", 0, "Pending"), True, False),
        ("started, not ready yet", replace(pod("worker", 0, "Running"), ready=False), True, False),
        ("ready", pod("worker", 0, "Running"), True, False),
        ("its container exited, the pod still Running", pod("worker", 0, "Running", exit_code=1), False, True),
        ("its container exited cleanly, the pod still Running", pod("worker", 0, "Running", exit_code=0), False, False),
        ("failed", pod("worker", 0, "Failed", exit_code=1), False, True),
        ("succeeded", pod("worker", 0, "Succeeded", exit_code=0), False, False),
        ("being deleted", replace(pod("worker", 0, "Running"), deleting=True), False, True),
        ("its node unreachable", pod("worker", 0, "Unknown"), False, True),
        ("not one of ours (no role)", None, False, False),
    ],
)
def test_only_progress_towards_running_may_wait_for_its_siblings_and_a_setback_goes_first(
    event: str, view: PodView | None, waits: bool, urgent: bool
) -> None:
    assert progress_only(view) is waits, event
    assert setback(view) is urgent, event


def test_a_section_the_spec_no_longer_asks_contributes_nothing() -> None:
    """spec.profile removed: the profile section still holds its contribution until the profile
    controller takes it back, and the trainer must not build pods from it meanwhile."""
    section = {"contribution": {"generation": 1, "pod": {"env": [{"name": "FROM_PROFILE", "value": "1"}]}}}
    status = TrainerStatus.model_validate({"profile": section, "checkpoint": section})
    assert set(contributions_of(spec(profile="p"), status)) == {"profile"}
    assert contributions_of(spec(), status) == {}


def as_written(d: Decision) -> tuple[dict[str, Any], list[Condition]]:
    """What the API server holds once the trainer wrote ``d``: its status and its conditions."""
    return d.status, [cond(c.type, c.status, c.reason, message=c.message) for c in d.conditions]


STARTING = STARTING_PODS
TWO_UP = [*FOUR_AND_PS[:2], *STARTING[2:]]
UNPLACED_TWO = [replace(p, unschedulable=NO_NODE) for p in STARTING_PODS[:2]] + STARTING_PODS[2:]
NOT_READY = [replace(FOUR_AND_PS[0], ready=False), *FOUR_AND_PS[1:]]
# A status write of pod counts only waits out --status-counts-seconds since the last write; one row
# per situation: the pods at the last write, the pods now, seconds since that write, the Trainer's
# generation now (the last write saw 1) -> held.
HOLD_TABLE: list[tuple[str, list[PodView], list[PodView], float | None, int, bool]] = [
    ("two of five pods started, 0.5 s after the last write", STARTING, TWO_UP, 0.5, 1, True),
    ("the same, 2 s after it", STARTING, TWO_UP, 2.0, 1, False),
    ("the same, no write by this process yet", STARTING, TWO_UP, None, 1, False),
    ("the same, and the spec changed (a new generation)", STARTING, TWO_UP, 0.5, 2, False),
    ("every pod started: phase Running", TWO_UP, FOUR_AND_PS, 0.5, 1, False),
    ("a pod failed: counted and replaced at once", FOUR_AND_PS, FAILED_0, 0.5, 1, False),
    ("a running pod stopped being ready", FOUR_AND_PS, NOT_READY, 0.5, 1, True),
    ("nothing changed (the watch's echo of the last write): nothing to hold", TWO_UP, TWO_UP, 0.5, 1, False),
    ("a third pod no node takes, 0.5 s after the last write", UNPLACED_TWO, UNPLACED, 0.5, 1, True),
    ("a pod no node takes, where none was: the reason changes", STARTING, UNPLACED_TWO, 0.5, 1, False),
]


@pytest.mark.parametrize(
    ("then", "now", "since", "generation", "held"), [r[1:] for r in HOLD_TABLE], ids=[r[0] for r in HOLD_TABLE]
)
def test_a_write_of_pod_counts_only_waits_its_turn(
    then: list[PodView], now: list[PodView], since: float | None, generation: int, held: bool
) -> None:
    status, conditions = as_written(observe(spec(), then))
    gates = [cond(c.type, c.status, generation=generation) for c in OPEN]  # answered for this generation
    obs = observed(spec(), now, conditions=[*gates, *conditions], status=status, generation=generation)
    decision = decide(obs)
    d = held_counts(obs, status, decision, since, 2.0)
    # Held: no write now, a look again when the hold ends (2 s after the last write).
    assert d == (replace(decision, write_status=False, requeue_after=2.0 - (since or 0)) if held else decision)


# Whose requests go ahead in the client's rate limit: a started run's recovery, until it finishes.
RUNNING: dict[str, Any] = {"phase": "Running", "progress": {"startTime": STAMP}}
RECOVERING_TABLE: list[tuple[str, dict[str, Any], bool, bool]] = [
    # situation, the status, whether the reconcile creates or deletes pods -> urgent
    ("a new Trainer's first pods", {}, True, False),
    ("pods created, not all running yet", {"phase": "Pending"}, False, False),
    ("running, a failed pod to replace", RUNNING, True, True),
    ("running, only progress or counts to write", RUNNING, False, False),
    (
        "restarting, waiting for the old pods to go",
        {"phase": "Restarting", "progress": {"startTime": STAMP}},
        False,
        True,
    ),
    ("succeeded, its pods cleaned up", {"phase": "Succeeded", "progress": {"startTime": STAMP}}, True, False),
    ("failed", {"phase": "Failed", "progress": {"startTime": STAMP}}, True, False),
]


@pytest.mark.parametrize(
    ("status", "acting", "urgent"), [r[1:] for r in RECOVERING_TABLE], ids=[r[0] for r in RECOVERING_TABLE]
)
def test_a_started_runs_recovery_is_urgent(status: dict[str, Any], acting: bool, urgent: bool) -> None:
    assert recovering(TrainerStatus.model_validate(status), acting) is urgent

"""What the quota counts for a pod (pure): the scheduler's effective requests of real pods (init
containers, sidecars, overhead) and of a Trainer's planned pods (every role's override), and the
resource claims it refuses (issue 51; docs/quota.md#what-a-run-is-charged)."""

from decimal import Decimal
from typing import Any

import pytest

from tests.factories import trainer_fields, trainer_spec
from tests.unit.test_decide_quota import GPU, SPOT2_OD2, policy, trainer, world
from trainerop_common.admission import Request
from trainerop_common.api.trainer import TrainerSpec
from trainerop_common.topology import Role
from trainerop_quota.admission import check_scheduling
from trainerop_quota.capacity import pod_requests, role_requests
from trainerop_quota.decide import plan
from trainerop_quota.ledger import shape


def box(gpus: int | None = None, cpu: str | None = None, *, limits: bool = False) -> dict[str, Any]:
    """A container's resources: requests (or limits only, with ``limits``)."""
    amounts = {k: v for k, v in ((GPU, gpus), ("cpu", cpu)) if v is not None}
    return {"limits" if limits else "requests": amounts}


def container(name: str, resources: dict[str, Any], sidecar: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "image": "busybox:1.36", "resources": resources}
    if sidecar:
        out["restartPolicy"] = "Always"
    return out


def sidecar(name: str, resources: dict[str, Any]) -> dict[str, Any]:
    return container(name, resources, sidecar=True)


def counted(requests: dict[str, Decimal]) -> dict[str, Decimal]:
    """The amounts that are not zero, without the one ``pods`` every pod asks."""
    assert requests.pop("pods") == 1
    return {k: v for k, v in requests.items() if v}


# situation, a pod's spec -> what the scheduler counts for it
POD_TABLE: list[tuple[str, dict[str, Any], dict[str, Decimal]]] = [
    (
        "containers are summed",
        {"containers": [container("a", box(1, "1")), container("b", box(2, "500m"))]},
        {GPU: Decimal(3), "cpu": Decimal("1.5")},
    ),
    (
        "an init container larger than the containers counts alone",
        {"containers": [container("a", box(1))], "initContainers": [container("i", box(4))]},
        {GPU: Decimal(4)},
    ),
    (
        "per resource, the larger of the init container's and the containers'",
        {"containers": [container("a", box(1, "4"))], "initContainers": [container("i", box(4, "1"))]},
        {GPU: Decimal(4), "cpu": Decimal(4)},
    ),
    (
        "regular init containers run one at a time: the largest counts",
        {"containers": [], "initContainers": [container("i", box(3)), container("j", box(2))]},
        {GPU: Decimal(3)},
    ),
    (
        "a sidecar is summed with the containers",
        {"containers": [container("a", box(1))], "initContainers": [sidecar("s", box(7))]},
        {GPU: Decimal(8)},
    ),
    (
        "a regular init container after a sidecar runs beside it",
        {"containers": [container("a", box(1))], "initContainers": [sidecar("s", box(2)), container("i", box(7))]},
        {GPU: Decimal(9)},
    ),
    (
        "a regular init container before a sidecar runs alone",
        {"containers": [container("a", box(1))], "initContainers": [container("i", box(7)), sidecar("s", box(2))]},
        {GPU: Decimal(7)},
    ),
    (
        "only the sidecars started before a regular init container add to it",
        {
            "containers": [container("a", box(1))],
            "initContainers": [sidecar("s", box(1)), container("i", box(5)), sidecar("t", box(4))],
        },
        {GPU: Decimal(6)},
    ),
    (
        "every sidecar stays: sidecars and containers outgrow an init container",
        {
            "containers": [container("a", box(2))],
            "initContainers": [sidecar("s", box(1)), container("i", box(3)), sidecar("t", box(4))],
        },
        {GPU: Decimal(7)},
    ),
    (
        "the overhead is added",
        {"containers": [container("a", box(1, "1"))], "overhead": {"cpu": "250m", "memory": "64Mi"}},
        {GPU: Decimal(1), "cpu": Decimal("1.25"), "memory": Decimal(64 * 2**20)},
    ),
    (
        "the overhead is added to an init container that outgrows the containers",
        {"containers": [], "initContainers": [container("i", box(cpu="2"))], "overhead": {"cpu": "1"}},
        {"cpu": Decimal(3)},
    ),
    (
        "limits stand in for missing requests, of containers and init containers",
        {
            "containers": [container("a", box(1, limits=True))],
            "initContainers": [sidecar("s", box(2, limits=True)), container("i", box(5, limits=True))],
        },
        {GPU: Decimal(7)},
    ),
    (
        "a request wins over its limit",
        {"containers": [container("a", {"requests": {"cpu": "1"}, "limits": {"cpu": "4"}})]},
        {"cpu": Decimal(1)},
    ),
    ("a pod without containers' requests asks only a place", {"containers": [container("a", {})]}, {}),
]


@pytest.mark.parametrize(("situation", "spec", "want"), POD_TABLE, ids=[row[0] for row in POD_TABLE])
def test_what_a_pod_is_counted(situation: str, spec: dict[str, Any], want: dict[str, Decimal]) -> None:
    assert counted(pod_requests({"spec": spec})) == want


def worker_run(override: dict[str, Any] | None = None, gpus: int = 1, workers: int = 2) -> TrainerSpec:
    """A run of ``workers`` workers with ``gpus`` each, its worker override's spec ``override``."""
    extra = {"podTemplateOverrides": {"worker": {"spec": override}}} if override is not None else {}
    return trainer_spec(resources={"limits": {GPU: gpus}}, topology={"workers": workers}, **extra)


# situation, the worker override's spec -> what one worker pod is counted (1 GPU of its own)
ROLE_TABLE: list[tuple[str, dict[str, Any] | None, dict[str, Decimal]]] = [
    ("no override", None, {GPU: Decimal(1)}),
    ("a sidecar asking 7 GPUs (issue 51)", {"initContainers": [sidecar("s", box(7))]}, {GPU: Decimal(8)}),
    (
        "a sidecar asking 7 GPUs in limits only",
        {"initContainers": [sidecar("s", box(7, limits=True))]},
        {GPU: Decimal(8)},
    ),
    ("a regular init container asking 7 GPUs", {"initContainers": [container("i", box(7))]}, {GPU: Decimal(7)}),
    (
        "a regular init container after a sidecar",
        {"initContainers": [sidecar("s", box(2)), container("i", box(7))]},
        {GPU: Decimal(9)},
    ),
    (
        # its place in the pod is not the override's when it merges into one the trainer adds
        "a regular init container before a sidecar: counted after it",
        {"initContainers": [container("i", box(7)), sidecar("s", box(2))]},
        {GPU: Decimal(9)},
    ),
    ("another container", {"containers": [container("helper", box(2, "1"))]}, {GPU: Decimal(3), "cpu": Decimal(1)}),
    (
        "the training container's own override, merged over the Trainer's resources",
        {"containers": [container("trainer", {"requests": {"cpu": "2"}})]},
        {GPU: Decimal(1), "cpu": Decimal(2)},
    ),
    ("an overhead", {"overhead": {"cpu": "100m"}}, {GPU: Decimal(1), "cpu": Decimal("0.1")}),
]


@pytest.mark.parametrize(("situation", "override", "want"), ROLE_TABLE, ids=[row[0] for row in ROLE_TABLE])
def test_what_a_planned_worker_is_counted(
    situation: str, override: dict[str, Any] | None, want: dict[str, Decimal]
) -> None:
    assert counted(role_requests(worker_run(override), "worker", None)) == want


# framework, topology -> the roles it has (each role's override adds a sidecar asking 7 GPUs)
EVERY_ROLE: list[tuple[str, dict[str, Any]]] = [
    ("pytorch", {"workers": 2}),
    ("tensorflow", {"workers": 2, "parameterServers": 1, "chief": 1, "evaluators": 1}),
]
OVERRIDES = {"master", "worker", "parameterServer", "chief", "evaluator"}


@pytest.mark.parametrize(("framework", "topology"), EVERY_ROLE)
def test_every_role_s_override_is_counted(framework: str, topology: dict[str, Any]) -> None:
    fragment = {"spec": {"initContainers": [sidecar("s", box(7))]}}
    s = trainer_spec(
        framework=framework,
        resources={"limits": {GPU: 1}},
        topology=topology,
        podTemplateOverrides={name: fragment for name in OVERRIDES},
    )
    planned = shape(trainer("a", s), topology["workers"], None)
    roles: set[Role] = set(planned.counts)
    assert roles == ({"master", "worker"} if framework == "pytorch" else {"worker", "ps", "chief", "evaluator"})
    assert {role: planned.requests[role][GPU] for role in roles} == {role: Decimal(8) for role in roles}
    assert planned.reserved[GPU] == 8 * sum(planned.counts.values())


def test_a_sidecar_in_the_override_is_charged_against_the_budget() -> None:
    """Issue 51: a budget of 2 GPUs, 2 workers of 1 GPU and a sidecar asking 7: never admitted."""
    t = trainer("a", worker_run({"initContainers": [sidecar("s", box(7))]}))
    budgets = {"spot": {GPU: 2}, "onDemand": {GPU: 2}}
    v = plan(world([t], SPOT2_OD2, policies=[policy(budgets=budgets)])).decisions[t.uid]
    assert (v.condition.status, v.condition.reason) == ("False", "ExceedsQuota")
    assert "the run needs 2 pods (16 nvidia.com/gpu) but QuotaPolicy team allows less" in v.condition.message
    assert v.events[0][:2] == ("Warning", "ExceedsQuota")


FIX = "the quota cannot count resource claims; request devices as extended resources (nvidia.com/gpu) instead"
CLAIM = [{"name": "gpu"}]
# where the worker override holds a claim -> the field named
CLAIMS: list[tuple[dict[str, Any], str]] = [
    ({"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "a100"}]}, "spec.resourceClaims"),
    ({"containers": [container("trainer", {"claims": CLAIM})]}, "spec.containers[0].resources.claims"),
    (
        {"containers": [container("helper", {}), container("x", {"claims": CLAIM})]},
        "spec.containers[1].resources.claims",
    ),
    ({"initContainers": [sidecar("s", {"claims": CLAIM})]}, "spec.initContainers[0].resources.claims"),
]


@pytest.mark.parametrize(("override", "field"), CLAIMS, ids=[row[1] for row in CLAIMS])
def test_resource_claims_are_refused_naming_the_field(override: dict[str, Any], field: str) -> None:
    problem = f"spec.podTemplateOverrides.worker.{field}: {FIX}"
    with pytest.raises(ValueError, match="cannot count resource claims") as err:
        role_requests(worker_run(override), "worker", None)
    assert str(err.value) == problem

    t = trainer("a", worker_run(override))
    v = plan(world([t], SPOT2_OD2)).decisions[t.uid]  # held: no grant, no pod
    assert (v.condition.status, v.condition.reason) == ("False", "InvalidResources")
    assert problem in v.condition.message
    assert v.quota.get("contribution") is None

    request = Request(
        "CREATE", "team-a", "run", trainer_fields(podTemplateOverrides={"worker": {"spec": override}}), None
    )
    assert check_scheduling(request, trainer_spec(**request.spec), policy()).problems == (problem,)
    assert check_scheduling(request, trainer_spec(**request.spec), None).allowed  # no quota, nothing to count


def test_claims_in_the_override_of_a_role_the_run_lacks_hold_nothing() -> None:
    overrides = {"master": {"spec": {"resourceClaims": [{"name": "gpu"}]}}}
    s = trainer_spec(framework="jax", topology={"workers": 2}, podTemplateOverrides=overrides)
    request = Request("CREATE", "team-a", "run", trainer_fields(framework="jax", podTemplateOverrides=overrides), None)
    assert check_scheduling(request, s, policy()).allowed
    assert plan(world([t := trainer("a", s)], SPOT2_OD2)).decisions[t.uid].condition.reason == "Admitted"


def test_an_override_whose_resources_are_not_an_object_holds_the_run() -> None:
    t = trainer("a", worker_run({"initContainers": [{"name": "i", "resources": "7 GPUs"}]}))
    v = plan(world([t], SPOT2_OD2)).decisions[t.uid]
    assert (v.condition.status, v.condition.reason) == ("False", "InvalidResources")
    assert "resources '7 GPUs' are not requests and limits" in v.condition.message

"""The admission webhooks' decisions (pure): the trainer's topology and node fit, the profile's
default and existence, the quota policy's scheduling; and the request view they share."""

from decimal import Decimal
from typing import Any

import pytest

from tests.factories import trainer_body, trainer_fields, trainer_spec
from trainerop_common.admission import Request, request_of
from trainerop_common.api.quota import QuotaPolicySpec
from trainerop_profile.admission import DEFAULT_PROFILE_LABEL, check_profile, default_profile
from trainerop_quota.admission import check_scheduling
from trainerop_quota.decide import PolicyInfo
from trainerop_trainer import admission as trainer

GPU = "nvidia.com/gpu"
SEED_RESOURCES = {"requests": {"cpu": 20, "memory": "40Gi"}, "limits": {GPU: 8}}


def create(**extra: Any) -> Request:
    return Request("CREATE", "team-a", "run", trainer_fields(**extra), None)


def update(old: dict[str, Any], **new: Any) -> Request:
    return Request("UPDATE", "team-a", "run", trainer_fields(**new), trainer_fields(**old))


def node(name: str, cpu: str = "96", memory: str = "1Ti", gpus: str | None = "8") -> dict[str, Any]:
    allocatable = {"cpu": cpu, "memory": memory, "pods": "110"}
    if gpus is not None:
        allocatable[GPU] = gpus
    return {"metadata": {"name": name}, "status": {"allocatable": allocatable}}


# -- the request view ---------------------------------------------------------------------------


def test_a_request_says_which_fields_an_update_changes() -> None:
    before = trainer_body("run", "ns", profile="a", topology={"workers": 2})
    after = trainer_body("run", "ns", profile="a", topology={"workers": 3})
    request = request_of(after, before, "UPDATE")
    assert (request.namespace, request.name) == ("ns", "run")
    assert request.changed("topology", "workers")
    assert request.changed("topology")
    assert not request.changed("profile")
    assert not request.changed("resources")
    assert request_of(after, None, "CREATE").changed("profile")  # everything is new on create


# -- trainer: overrides of roles the run lacks ---------------------------------------------------


@pytest.mark.parametrize(
    ("framework", "topology", "override", "unused"),
    [
        ("jax", {"workers": 2}, "master", True),
        ("pytorch", {"workers": 2}, "master", False),
        ("pytorch", {"workers": 2, "elastic": {"minWorkers": 1, "maxWorkers": 2}}, "master", True),
        ("tensorflow", {"workers": 2}, "parameterServer", True),
        ("tensorflow", {"workers": 2, "parameterServers": 1}, "parameterServer", False),
        ("generic", {"workers": 1}, "worker", False),
    ],
)
def test_an_override_of_a_role_the_run_does_not_have_is_a_warning(
    framework: str, topology: dict[str, Any], override: str, unused: bool
) -> None:
    warnings = trainer.unused_overrides(
        trainer_spec(framework=framework, topology=topology, podTemplateOverrides={override: {"metadata": {}}})
    )
    assert bool(warnings) is unused
    if unused:
        assert warnings[0].startswith(f"spec.podTemplateOverrides.{override} is unused: this {framework} run has no")


def test_an_override_restricted_forbids_is_refused_when_it_is_set_or_changed_not_when_untouched() -> None:
    hostile = {"worker": {"spec": {"hostNetwork": True, "volumes": [{"name": "r", "hostPath": {"path": "/"}}]}}}
    verdict = trainer.validate(create(podTemplateOverrides=hostile), trainer_spec(podTemplateOverrides=hostile), None)
    assert not verdict.allowed
    assert [p.split(":")[0] for p in verdict.problems] == [
        "spec.podTemplateOverrides.worker.spec.hostNetwork",
        "spec.podTemplateOverrides.worker.spec.volumes[0].hostPath",
    ]
    # An update that leaves them as they were (stored before the rule) is not refused for them:
    # the controller says so in the Trainer's condition instead.
    same = update({"podTemplateOverrides": hostile}, podTemplateOverrides=hostile, epochs=2)
    assert trainer.validate(same, trainer_spec(podTemplateOverrides=hostile, epochs=2), None).allowed


@pytest.mark.parametrize(("level", "allowed"), [("restricted", False), ("baseline", True), ("privileged", True)])
def test_a_root_override_is_judged_by_the_namespaces_pod_security_level(level: str, allowed: bool) -> None:
    root = {"worker": {"spec": {"securityContext": {"runAsUser": 0}}}}
    verdict = trainer.validate(create(podTemplateOverrides=root), trainer_spec(podTemplateOverrides=root), None, level)
    assert verdict.allowed is allowed
    if not allowed:
        (problem,) = verdict.problems
        assert 'Pod Security "restricted" forbids it' in problem


# -- trainer: node fit -----------------------------------------------------------------------------


def test_limits_stand_for_missing_requests_and_zero_asks_for_nothing() -> None:
    resources = {"requests": {"cpu": "500m", "memory": 0}, "limits": {GPU: 2, "cpu": 4, "memory": "1Gi"}}
    wanted = trainer.pod_requests(trainer_spec(resources=resources))
    assert {k: str(v) for k, v in wanted.items()} == {"cpu": "0.500", GPU: "2"}
    assert trainer.pod_requests(trainer_spec()) == {}


def test_a_pod_fits_when_one_node_offers_every_resource_it_asks_for() -> None:
    wanted = trainer.pod_requests(trainer_spec(resources=SEED_RESOURCES))
    assert trainer.check_node_fit(wanted, [node("small", cpu="8"), node("big")]) is None
    assert trainer.check_node_fit({}, []) is None  # asking for nothing fits anywhere


def test_a_pod_no_node_can_hold_is_refused_naming_the_closest_nodes() -> None:
    wanted = trainer.pod_requests(trainer_spec(resources=SEED_RESOURCES))
    nodes = [node("cpu-only", gpus=None), node("small-gpu", cpu="16"), node("tiny", cpu="2", memory="4Gi", gpus="1")]
    message = trainer.check_node_fit(wanted, nodes)
    assert message is not None
    assert message.startswith(
        "spec.resources: no node of the cluster can hold one pod asking for cpu 20, memory 42949672960, "
        "nvidia.com/gpu 8 (closest: cpu-only: cpu 96, memory 1099511627776, nvidia.com/gpu 0; "
        "small-gpu: cpu 16, memory 1099511627776, nvidia.com/gpu 8; tiny:"
    )
    assert "--no-admission-node-fit" in message


def test_no_nodes_at_all_is_said_plainly() -> None:
    message = trainer.check_node_fit({"cpu": Decimal(1)}, [])
    assert message == "spec.resources: the cluster has no nodes, so no pod asking for cpu 1 can run; add nodes first"


def test_the_verdict_judges_node_fit_only_when_given_nodes() -> None:
    seed = trainer_spec(resources=SEED_RESOURCES)
    assert trainer.validate(create(), seed, [node("cpu-only", gpus=None)]).problems
    assert trainer.validate(create(), seed, None).allowed


# -- profile ---------------------------------------------------------------------------------------


def test_the_namespace_default_profile_fills_a_trainer_created_without_one() -> None:
    labels = {DEFAULT_PROFILE_LABEL: "team-defaults"}
    verdict = default_profile(create(), labels)
    assert dict(verdict.spec) == {"profile": "team-defaults"}
    assert verdict.warnings == ("spec.profile set to 'team-defaults', the default profile of namespace 'team-a'",)
    assert default_profile(create(profile="own"), labels).spec == {}  # the user's choice stays
    assert default_profile(create(), {}).spec == {}  # no default: nothing to fill
    assert default_profile(update(trainer_fields()), labels).spec == {}  # only new Trainers get it


def test_a_missing_profile_is_refused_on_create_and_when_an_update_names_it() -> None:
    refused = check_profile(create(profile="gone"), found=False)
    assert refused.problems == (
        "spec.profile: there is no TrainingProfile 'gone' in namespace 'team-a' and no ClusterTrainingProfile "
        "'gone'; create the profile first (kubectl get trainingprofiles,clustertrainingprofiles -n team-a "
        "lists those that exist) or remove spec.profile",
    )
    defaulted = check_profile(create(profile="team-defaults"), found=False, namespace_default="team-defaults")
    assert defaulted.problems[0].endswith(
        "it is namespace 'team-a''s default profile (its label trainer.operator.kubeflow.org/default-profile): "
        "create the profile, or correct or remove that label"
    )
    assert check_profile(create(profile="there"), found=True).allowed
    assert check_profile(create(), found=False).allowed
    assert not check_profile(update({"profile": "a"}, profile="gone"), found=False).allowed
    # a profile deleted after the Trainer was created does not block other updates (the profile
    # controller reports it in ProfileResolved instead)
    assert check_profile(update({"profile": "gone"}, profile="gone", epochs=2), found=False).allowed


# -- quota -----------------------------------------------------------------------------------------


def policy(**extra: Any) -> PolicyInfo:
    body = {"budgets": {"spot": {GPU: 16}}, "priorityClasses": [{"name": "high", "value": 100}], **extra}
    return PolicyInfo("gpu-teams", QuotaPolicySpec.model_validate(body))


def test_a_priority_class_the_governing_policy_lacks_is_refused() -> None:
    request = create(scheduling={"priorityClassName": "urgent"})
    verdict = check_scheduling(request, trainer_spec(**request.spec), policy())
    assert verdict.problems == (
        "spec.scheduling.priorityClassName: QuotaPolicy 'gpu-teams', which governs namespace 'team-a', has no "
        "priority class 'urgent' (it defines 'high'); use one of those or leave it unset",
    )
    ok = create(scheduling={"priorityClassName": "high"})
    assert check_scheduling(ok, trainer_spec(**ok.spec), policy()).allowed


def test_a_preference_leaving_no_budgeted_capacity_is_refused() -> None:
    request = create(scheduling={"preference": "OnDemandOnly"})
    verdict = check_scheduling(request, trainer_spec(**request.spec), policy())
    assert len(verdict.problems) == 1
    assert (
        "OnDemandOnly leaves no capacity type that QuotaPolicy 'gpu-teams' budgets for (it has: spot)"
        in (verdict.problems[0])
    )


def test_scheduling_under_no_policy_is_a_warning_and_unchanged_scheduling_is_not_judged() -> None:
    request = create(scheduling={"priorityClassName": "urgent"})
    verdict = check_scheduling(request, trainer_spec(**request.spec), None)
    assert verdict.allowed
    assert verdict.warnings[0].startswith("spec.scheduling has no effect")
    same = update({"scheduling": {"priorityClassName": "urgent"}}, scheduling={"priorityClassName": "urgent"})
    assert check_scheduling(same, trainer_spec(**same.spec), policy()).allowed  # the policy changed later: not now

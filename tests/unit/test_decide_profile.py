from collections.abc import Mapping
from typing import Any

import pytest

from tests.factories import trainer_spec
from trainerop_common.api import TrainerSpec
from trainerop_common.api.base import EnvVar
from trainerop_common.api.profile import TrainingProfileSpec
from trainerop_profile.decide import Decision, FoundProfile, Observed, decide, needed_secrets, overrides, spec_hash

SEED_PROFILE: dict[str, Any] = {
    "nodeSelector": {"gpu-type": "nvidia-tesla-a100"},
    "tolerations": [{"key": "usage", "operator": "Equal", "value": "training", "effect": "NoSchedule"}],
    "runtimeConfig": {"secret": "mistral-vault", "mountPath": "/etc/secrets"},
    "envVars": [{"name": "NCCL_IB_TIMEOUT", "value": "22"}],
    "retryPolicy": {"backoffLimit": 5, "restartPolicy": "OnFailure"},
}
SEED_SPEC = TrainingProfileSpec.model_validate(SEED_PROFILE)
ALL_SECRETS: dict[str, bool | None] = {"mistral-vault": True}


def trainer(**fields: Any) -> TrainerSpec:
    return trainer_spec(**{"epochs": 10, "image": "img", "profile": "cost-optimized-32gpu", **fields})


def found(spec: TrainingProfileSpec = SEED_SPEC, kind: Any = "TrainingProfile") -> FoundProfile:
    return FoundProfile(kind, "cost-optimized-32gpu", 4, spec)


def resolve(
    namespace: str,
    spec: TrainerSpec,
    generation: int,
    profile: FoundProfile | None,
    secrets: Mapping[str, bool | None] | None = None,
) -> Decision:
    return decide(Observed(namespace, spec, generation, profile, secrets or {}))


def profile(**fields: Any) -> TrainingProfileSpec:
    return TrainingProfileSpec.model_validate({**SEED_PROFILE, **fields})


# What the profile controller says of a Trainer that names the seed profile: one row per situation.
RESOLUTION_TABLE: list[tuple[str, TrainerSpec, FoundProfile | None, dict[str, bool | None], tuple[str, str, bool]]] = [
    # situation, the Trainer, the profile found, its Secrets -> (status, reason, a Warning Event)
    ("no such profile", trainer(), None, {}, ("False", "ProfileNotFound", True)),
    ("its Secret is missing", trainer(), found(), {"mistral-vault": False}, ("False", "SecretNotFound", True)),
    ("its Secret cannot be checked", trainer(), found(), {"mistral-vault": None}, ("True", "Resolved", False)),
    ("applied as it is", trainer(), found(), ALL_SECRETS, ("True", "Resolved", False)),
    (
        "the Trainer sets a variable of its own",
        trainer(env=[{"name": "NCCL_IB_TIMEOUT", "value": "5"}]),
        found(),
        ALL_SECRETS,
        ("True", "ResolvedWithOverrides", False),
    ),
    (
        "a secret-looking literal in the profile",
        trainer(),
        found(profile(envVars=[{"name": "API_TOKEN", "value": "x"}])),
        ALL_SECRETS,
        ("False", "InvalidProfile", True),
    ),
    (
        "its Secret mounted over the replica volume",
        trainer(storage={"size": "1Gi", "mountPath": "/etc/secrets"}),
        found(),
        ALL_SECRETS,
        ("False", "ProfileConflict", True),
    ),
]


@pytest.mark.parametrize(
    ("spec", "profile_found", "secrets", "said"),
    [row[1:] for row in RESOLUTION_TABLE],
    ids=[row[0] for row in RESOLUTION_TABLE],
)
def test_what_the_profile_controller_says(
    spec: TrainerSpec, profile_found: FoundProfile | None, secrets: dict[str, bool | None], said: tuple[str, str, bool]
) -> None:
    d = resolve("ns", spec, 1, profile_found, secrets)
    (c,) = d.conditions
    assert (c.status, c.reason, d.problem is not None) == said


def test_without_a_profile_the_controller_says_nothing() -> None:
    """Not asked: no section, no condition (what it said of an earlier profile goes), no Event."""
    d = resolve("ns", trainer(profile=None), 3, None)
    assert (d.status, d.conditions, d.problem) == ({}, (), None)


def test_missing_profile_says_what_to_fix_and_names_both_kinds() -> None:
    d = resolve("team-a", trainer(profile="gpu"), 3, None)
    (c,) = d.conditions
    assert (c.status, c.reason) == ("False", "ProfileNotFound")
    assert "no TrainingProfile 'gpu' in namespace 'team-a' and no ClusterTrainingProfile 'gpu'" in c.message
    assert d.problem == c
    assert d.status == {"profile": {"name": "gpu"}}


def test_profile_becomes_a_pod_contribution_for_the_generation() -> None:
    d = resolve("ns", trainer(), 7, found(), ALL_SECRETS)
    section = d.status["profile"]
    assert (section["name"], section["kind"], section["generation"]) == (
        "cost-optimized-32gpu",
        "TrainingProfile",
        4,
    )
    assert section["hash"] == spec_hash(SEED_SPEC)
    contribution = section["contribution"]
    assert contribution["generation"] == 7
    pod = contribution["pod"]
    assert pod["nodeSelector"] == {"gpu-type": "nvidia-tesla-a100"}
    assert pod["tolerations"] == [{"key": "usage", "operator": "Equal", "value": "training", "effect": "NoSchedule"}]
    assert pod["env"] == [{"name": "NCCL_IB_TIMEOUT", "value": "22"}]
    assert pod["volumes"] == [{"name": "profile-runtime-secret", "secret": {"secretName": "mistral-vault"}}]
    assert pod["volumeMounts"] == [{"name": "profile-runtime-secret", "mountPath": "/etc/secrets", "readOnly": True}]
    assert contribution["runPolicy"] == {"backoffLimit": 5, "restartPolicy": "OnFailure"}
    (c,) = d.conditions
    assert (c.status, c.reason, c.message) == ("True", "Resolved", "TrainingProfile 'cost-optimized-32gpu' applied")
    assert "overrides" not in section


@pytest.mark.parametrize("choice", ["Ask", "Skip", None])
def test_the_profile_s_placement_plugin_choice_is_passed_on_to_the_quota_controller(choice: str | None) -> None:
    spec = profile(placementPlugin=choice) if choice else SEED_SPEC
    section = resolve("ns", trainer(), 7, found(spec), ALL_SECRETS).status["profile"]
    assert section.get("placementPlugin") == choice


def test_the_profile_s_packing_is_passed_on_to_the_quota_controller() -> None:
    packing = {"level": "nvidia.com/gpu.clique", "mode": "Required"}
    section = resolve("ns", trainer(), 7, found(profile(packing=packing)), ALL_SECRETS).status["profile"]
    assert section["packing"] == packing
    assert "packing" not in resolve("ns", trainer(), 7, found(), ALL_SECRETS).status["profile"]


def test_the_profile_s_model_is_passed_on_to_the_trainer_controller() -> None:
    model = {"source": "hf://acme/base@v1", "cacheClaim": "models", "mountPath": "/models"}
    section = resolve("ns", trainer(), 7, found(profile(model=model)), ALL_SECRETS).status["profile"]
    assert section["model"] == model
    assert "model" not in resolve("ns", trainer(), 7, found(), ALL_SECRETS).status["profile"]


def test_a_cluster_profile_is_named_as_such() -> None:
    d = resolve("ns", trainer(), 1, found(kind="ClusterTrainingProfile"), ALL_SECRETS)
    assert d.status["profile"]["kind"] == "ClusterTrainingProfile"
    assert "ClusterTrainingProfile 'cost-optimized-32gpu' applied" in d.conditions[0].message


def test_the_hash_follows_the_content() -> None:
    assert spec_hash(SEED_SPEC) == spec_hash(TrainingProfileSpec.model_validate(SEED_PROFILE))
    assert spec_hash(SEED_SPEC) != spec_hash(profile(envVars=[{"name": "NCCL_IB_TIMEOUT", "value": "23"}]))


@pytest.mark.parametrize(
    ("secrets", "missing"),
    [
        ({}, ("mistral-vault",)),
        ({"mistral-vault": False}, ("mistral-vault",)),
        ({"mistral-vault": True}, ()),
    ],
)
def test_a_missing_secret_is_named_and_holds_the_trainer(secrets: dict[str, bool], missing: tuple[str, ...]) -> None:
    d = resolve("team-a", trainer(), 2, found(), secrets)
    assert d.missing_secrets == missing
    (c,) = d.conditions
    if missing:
        assert (c.status, c.reason) == ("False", "SecretNotFound")
        assert "Secret 'mistral-vault' (runtimeConfig.secret) in namespace 'team-a'" in c.message
        assert "contribution" not in d.status["profile"]
        assert d.problem == c
    else:
        assert c.status == "True"


def test_secrets_referenced_by_env_are_needed_unless_optional() -> None:
    spec = profile(
        envVars=[
            {"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "k"}}},
            {"name": "EXTRA_TOKEN", "valueFrom": {"secretKeyRef": {"name": "extra", "key": "k", "optional": True}}},
            {"name": "PLAIN", "value": "x"},
        ]
    )
    assert needed_secrets(spec) == {
        "mistral-vault": "runtimeConfig.secret",
        "wandb": "envVars[WANDB_API_KEY].valueFrom.secretKeyRef",
    }


@pytest.mark.parametrize(
    ("trainer_fields", "profile_fields", "expected"),
    [
        ({}, {}, []),
        # Same value on both sides: nothing is lost.
        ({"env": [{"name": "NCCL_IB_TIMEOUT", "value": "22"}]}, {}, []),
        ({"env": [{"name": "NCCL_IB_TIMEOUT", "value": "30"}]}, {}, ["env NCCL_IB_TIMEOUT (spec.env)"]),
        ({}, {"envVars": [{"name": "WORLD_SIZE", "value": "8"}]}, ["env WORLD_SIZE (set by the operator)"]),
        ({}, {"envVars": [{"name": "PET_NNODES", "value": "8"}]}, ["env PET_NNODES (set by the operator)"]),
        (
            {"resources": {"limits": {"nvidia.com/gpu": 4}}},
            {"resources": {"limits": {"nvidia.com/gpu": 8, "cpu": 4}}},
            ["resources.limits[nvidia.com/gpu] (spec.resources)"],
        ),
        ({"resources": {"limits": {"nvidia.com/gpu": "8"}}}, {"resources": {"limits": {"nvidia.com/gpu": 8}}}, []),
        (
            {"runPolicy": {"backoffLimit": 2, "restartPolicy": "OnFailure"}},
            {},
            ["retryPolicy.backoffLimit (spec.runPolicy.backoffLimit)"],
        ),
        (
            {"podTemplateOverrides": {"worker": {"spec": {"nodeSelector": {"gpu-type": "h100", "zone": "a"}}}}},
            {},
            ["nodeSelector[gpu-type] (podTemplateOverrides.worker)"],
        ),
        (
            {"scheduling": {"packing": {"level": "nvidia.com/gpu.clique"}}},
            {"packing": {"level": "nvidia.com/gpu.clique", "mode": "Required"}},
            ["packing (spec.scheduling.packing)"],
        ),
        (
            {"scheduling": {"packing": {"level": "nvidia.com/gpu.clique", "mode": "Required"}}},
            {"packing": {"level": "nvidia.com/gpu.clique", "mode": "Required"}},
            [],
        ),
        (
            {"model": {"source": "hf://acme/own@main", "cacheClaim": "models"}},
            {"model": {"source": "hf://acme/base@v1", "cacheClaim": "models"}},
            ["model (spec.model)"],
        ),
        ({"model": {"source": "hf://acme/base@v1", "cacheClaim": "models"}}, {}, []),
        (
            {
                "framework": "pytorch",
                "podTemplateOverrides": {
                    "master": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "pytorch",
                                    "env": [{"name": "NCCL_IB_TIMEOUT", "value": "1"}],
                                    "volumeMounts": [{"name": "mine", "mountPath": "/etc/secrets"}],
                                }
                            ]
                        }
                    }
                },
            },
            {},
            [
                "env NCCL_IB_TIMEOUT (podTemplateOverrides.master)",
                "runtimeConfig.mountPath /etc/secrets (podTemplateOverrides.master)",
            ],
        ),
    ],
)
def test_what_the_trainer_overrides_is_listed(
    trainer_fields: dict[str, Any], profile_fields: dict[str, Any], expected: list[str]
) -> None:
    spec, prof = trainer(**trainer_fields), profile(**profile_fields)
    assert overrides(spec, prof) == expected
    d = resolve("ns", spec, 1, found(prof), ALL_SECRETS)
    (c,) = d.conditions
    assert c.status == "True"
    if expected:
        assert c.reason == "ResolvedWithOverrides"
        assert d.status["profile"]["overrides"] == expected
        for item in expected:
            assert item in c.message
    else:
        assert c.reason == "Resolved"


@pytest.mark.parametrize(
    ("trainer_fields", "expected"),
    [
        # Only the training container counts: a sidecar's env does not override the profile's.
        (
            {
                "framework": "pytorch",
                "podTemplateOverrides": {
                    "worker": {"spec": {"containers": [{"name": "sidecar", "env": [{"name": "NCCL_IB_TIMEOUT"}]}]}}
                },
            },
            [],
        ),
        # A role the run does not have (no master for generic, no parameter server) changes nothing.
        (
            {
                "podTemplateOverrides": {
                    "master": {"spec": {"nodeSelector": {"gpu-type": "h100"}}},
                    "parameterServer": {"spec": {"nodeSelector": {"gpu-type": "h100"}}},
                }
            },
            [],
        ),
        (
            {"podTemplateOverrides": {"worker": {"spec": {"volumes": [{"name": "profile-runtime-secret"}]}}}},
            ["runtimeConfig volume profile-runtime-secret (podTemplateOverrides.worker)"],
        ),
        # Nulls and odd shapes in the free-form overrides are tolerated, not a crash.
        (
            {
                "podTemplateOverrides": {
                    "worker": {
                        "spec": {
                            "nodeSelector": None,
                            "volumes": None,
                            "containers": [
                                {"name": "trainer", "env": None, "resources": None, "volumeMounts": ["x"]},
                                "not-an-object",
                            ],
                        }
                    },
                    "master": {"spec": None},
                }
            },
            [],
        ),
    ],
)
def test_overrides_look_at_what_really_reaches_the_training_container(
    trainer_fields: dict[str, Any], expected: list[str]
) -> None:
    assert overrides(trainer(**trainer_fields), SEED_SPEC) == expected


def test_a_long_override_list_is_capped() -> None:
    many = [{"name": f"V{i}", "value": "p"} for i in range(80)]
    spec = trainer(env=[{"name": f"V{i}", "value": "t"} for i in range(80)])
    d = resolve("ns", spec, 1, found(profile(envVars=many)), ALL_SECRETS)
    listed = d.status["profile"]["overrides"]
    assert len(listed) == 50
    assert listed[-1] == "and 31 more"


def test_a_stored_secret_literal_is_refused_not_copied_into_status() -> None:
    # Stored before the CEL rule existed: the API server kept it, the model (lenient) parses it.
    leaky = profile()
    leaky.env_vars = [EnvVar(name="HF_TOKEN", value="hf_very_private")]
    d = resolve("ns", trainer(), 1, found(leaky), ALL_SECRETS)
    (c,) = d.conditions
    assert (c.status, c.reason) == ("False", "InvalidProfile")
    assert "envVars HF_TOKEN" in c.message
    assert "hf_very_private" not in c.message
    assert "hf_very_private" not in str(d.status)


def test_a_secret_the_trainer_does_not_use_is_not_needed() -> None:
    prof = profile(envVars=[{"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "team", "key": "k"}}}])
    own = trainer(env=[{"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "mine", "key": "k"}}}])
    assert needed_secrets(prof, own) == {"mistral-vault": "runtimeConfig.secret"}
    assert "team" in needed_secrets(prof, trainer())
    assert resolve("ns", own, 1, found(prof), ALL_SECRETS).conditions[0].status == "True"


def test_a_secret_that_may_not_be_checked_is_assumed_and_said_so() -> None:
    d = resolve("team-a", trainer(), 1, found(), {"mistral-vault": None})
    (c,) = d.conditions
    assert (c.status, c.reason) == ("True", "Resolved")
    assert "not checked that Secret 'mistral-vault' exists" in c.message
    assert d.missing_secrets == ()


def test_operator_variables_are_left_out_of_the_contribution() -> None:
    prof = profile(envVars=[{"name": "WORLD_SIZE", "value": "8"}, {"name": "NCCL_DEBUG", "value": "INFO"}])
    d = resolve("ns", trainer(), 1, found(prof), ALL_SECRETS)
    assert d.status["profile"]["contribution"]["pod"]["env"] == [{"name": "NCCL_DEBUG", "value": "INFO"}]


def test_a_secret_mounted_over_the_replica_volume_stops_the_trainer() -> None:
    spec = trainer(storage={"size": "1Gi", "mountPath": "/etc/secrets/"})
    d = resolve("ns", spec, 1, found(), ALL_SECRETS)
    (c,) = d.conditions
    assert (c.status, c.reason) == ("False", "ProfileConflict")
    assert "runtimeConfig.mountPath /etc/secrets is also spec.storage.mountPath" in c.message
    assert "contribution" not in d.status["profile"]
    assert d.problem == c


def test_a_profile_without_retry_policy_proposes_no_run_policy() -> None:
    prof = TrainingProfileSpec.model_validate({"nodeSelector": {"a": "b"}})
    d = resolve("ns", trainer(), 1, found(prof), {})
    assert "runPolicy" not in d.status["profile"]["contribution"]
    assert d.conditions[0].reason == "Resolved"

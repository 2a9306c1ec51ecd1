from trainerop_common.api.profile import TrainingProfileSpec
from trainerop_profile.decide import decide

SEED_SPEC = TrainingProfileSpec.model_validate(
    {
        "nodeSelector": {"gpu-type": "nvidia-tesla-a100"},
        "tolerations": [{"key": "usage", "operator": "Equal", "value": "training", "effect": "NoSchedule"}],
        "runtimeConfig": {"secret": "mistral-vault", "mountPath": "/etc/secrets"},
        "envVars": [{"name": "NCCL_IB_TIMEOUT", "value": "22"}],
        "retryPolicy": {"backoffLimit": 5, "restartPolicy": "OnFailure"},
    }
)


def test_no_profile_passes_the_gate() -> None:
    d = decide("ns", None, None, 3)
    assert d.status == {}
    (c,) = d.conditions
    assert (c.type, c.status, c.reason) == ("ProfileResolved", "True", "NoProfile")
    assert d.problem is None


def test_missing_profile_says_what_to_fix() -> None:
    d = decide("team-a", "gpu", None, 3)
    (c,) = d.conditions
    assert (c.status, c.reason) == ("False", "ProfileNotFound")
    assert "TrainingProfile 'gpu' does not exist in namespace 'team-a'" in c.message
    assert d.problem == c


def test_profile_becomes_a_pod_contribution_for_the_generation() -> None:
    d = decide("ns", "cost-optimized-32gpu", SEED_SPEC, 7)
    section = d.status["profile"]
    assert section["name"] == "cost-optimized-32gpu"
    contribution = section["contribution"]
    assert contribution["generation"] == 7
    pod = contribution["pod"]
    assert pod["nodeSelector"] == {"gpu-type": "nvidia-tesla-a100"}
    assert pod["tolerations"] == [{"key": "usage", "operator": "Equal", "value": "training", "effect": "NoSchedule"}]
    assert pod["env"] == [{"name": "NCCL_IB_TIMEOUT", "value": "22"}]
    assert pod["volumes"] == [{"name": "profile-runtime-secret", "secret": {"secretName": "mistral-vault"}}]
    assert pod["volumeMounts"] == [{"name": "profile-runtime-secret", "mountPath": "/etc/secrets", "readOnly": True}]
    assert d.conditions[0].reason == "Resolved"

from decimal import Decimal

import pytest

from trainerop_common.api.quota import QuotaPolicySpec
from trainerop_common.api.trainer import TrainerSpec
from trainerop_quota.decide import decide, requested

SEED = TrainerSpec.model_validate(
    {
        "epochs": 10,
        "image": "img",
        "resources": {"requests": {"cpu": 20, "memory": "40Gi"}, "limits": {"nvidia.com/gpu": 8}},
        "topology": {"workers": 4, "parameterServers": 1},
    }
)


def policy(hard: dict[str, int | str], labels: dict[str, str] | None = None) -> QuotaPolicySpec:
    spec = {"hard": hard, **({"namespaceSelector": {"matchLabels": labels}} if labels else {})}
    return QuotaPolicySpec.model_validate(spec)


def test_requested_counts_every_replica_and_falls_back_to_limits() -> None:
    assert requested(SEED) == {
        "cpu": Decimal(100),
        "memory": Decimal(200 * 2**30),
        "nvidia.com/gpu": Decimal(40),
    }


@pytest.mark.parametrize(
    ("policies", "labels", "status", "reason"),
    [
        ([], {}, "True", "NoQuotaPolicy"),
        ([("big", policy({"nvidia.com/gpu": 64}))], {}, "True", "FitsQuota"),
        ([("exact", policy({"nvidia.com/gpu": 40, "cpu": "100"}))], {}, "True", "FitsQuota"),
        ([("small", policy({"nvidia.com/gpu": 16}))], {}, "False", "ExceedsQuota"),
        ([("other-team", policy({"nvidia.com/gpu": 1}, {"team": "b"}))], {"team": "a"}, "True", "NoQuotaPolicy"),
        ([("ours", policy({"memory": "100Gi"}, {"team": "a"}))], {"team": "a"}, "False", "ExceedsQuota"),
    ],
)
def test_admission(
    policies: list[tuple[str, QuotaPolicySpec]], labels: dict[str, str], status: str, reason: str
) -> None:
    d = decide(SEED, policies, labels)
    (c,) = d.conditions
    assert (c.type, c.status, c.reason) == ("QuotaAdmitted", status, reason)
    assert (d.problem is not None) == (status == "False")


def test_refusal_names_the_numbers_and_the_fix() -> None:
    d = decide(SEED, [("small", policy({"nvidia.com/gpu": 16}))], {})
    message = d.conditions[0].message
    assert "requests 40 nvidia.com/gpu (5 replicas)" in message
    assert "QuotaPolicy 'small' allows 16" in message
    assert "lower topology.workers" in message
    assert d.status == {"quota": {"policy": "small"}}

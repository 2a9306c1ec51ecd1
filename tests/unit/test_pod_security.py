"""A namespace's Pod Security level, read once (trainerop_common.pod_security) and the same way by
the trainer controller and by the creations policy the API server runs over what it creates."""

from pathlib import Path
from typing import Any

import pytest
import yaml

from trainerop_common.pod_security import (
    BASELINE,
    BASELINE_CAPABILITIES,
    BASELINE_SELINUX_TYPES,
    ENFORCE_LABEL,
    PRIVILEGED,
    RESTRICTED,
    level_of,
    namespace_level,
)

POLICY = Path(__file__).resolve().parents[2] / "deploy/controllers/trainer/rbac/creations-policy.yaml"


@pytest.mark.parametrize(
    ("labels", "level"),
    [
        (None, RESTRICTED),  # no label: the operator's default, stricter than the API server's
        ({}, RESTRICTED),
        ({ENFORCE_LABEL: "restricted"}, RESTRICTED),
        ({ENFORCE_LABEL: "baseline"}, BASELINE),
        ({ENFORCE_LABEL: "privileged"}, PRIVILEGED),
        ({ENFORCE_LABEL: "Privileged"}, RESTRICTED),  # not a level: read as the strictest
        ({"pod-security.kubernetes.io/warn": "privileged"}, RESTRICTED),  # only enforce counts
    ],
)
def test_a_namespaces_level_is_its_enforce_label_and_restricted_otherwise(
    labels: dict[str, str] | None, level: str
) -> None:
    assert level_of(labels) == level
    assert namespace_level({"metadata": {"name": "n", "labels": labels}}) == level
    assert namespace_level(None) == RESTRICTED


def policy_variables() -> dict[str, str]:
    policy: dict[str, Any] = next(d for d in yaml.safe_load_all(POLICY.read_text()) if d["kind"].endswith("Policy"))
    return {v["name"]: v["expression"] for v in policy["spec"]["variables"]}


def test_the_creations_policy_reads_the_same_label_and_allows_the_same_capabilities() -> None:
    variables = policy_variables()
    assert f"labels[?'{ENFORCE_LABEL}'].orValue('restricted')" in variables["label"]
    named = yaml.safe_load(variables["baselineCapabilities"])
    assert set(named) == BASELINE_CAPABILITIES


def test_the_creations_policy_allows_the_same_selinux_types() -> None:
    body = POLICY.read_text()
    listed = body.split("o.value().?type.orValue('container_t') in [", 1)[1].split("]", 1)[0]
    assert {t.strip().strip("'") for t in listed.replace("\n", " ").split(",")} == BASELINE_SELINUX_TYPES

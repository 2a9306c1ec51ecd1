"""Generated specs, good and bad (tests/fuzzing.py), through the real API server (dry run: schema,
CEL and the operator's webhooks) and, when accepted, through every controller's decisions:
nothing crashes, and every refusal says which field is wrong (issue 20). CI runs a few hundred
examples (TRAINEROP_FUZZ_EXAMPLES, default 100 of each kind); bench/fuzz.py runs thousands."""

import json
import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from tests import fuzzing
from tests.harness import Cluster, KubectlError

EXAMPLES = int(os.environ.get("TRAINEROP_FUZZ_EXAMPLES", "100"))
FUZZ = settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)


@pytest.fixture(scope="module")
def fuzz_namespace(cluster: Cluster) -> Iterator[str]:
    name = f"fuzz-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", name)
    cluster.kubectl("label", "namespace", name, "team=a")
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false")


def dry_run(cluster: Cluster, obj: dict[str, Any]) -> dict[str, Any] | str:
    """The object as the API server would store it, or its refusal's message."""
    try:
        out = cluster.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", stdin=json.dumps(obj))
    except KubectlError as err:
        return str(err)
    stored: dict[str, Any] = json.loads(out)
    return stored


def judged(result: dict[str, Any] | str) -> dict[str, Any] | None:
    """The stored object, or None after checking that the refusal names the field."""
    if isinstance(result, str):
        assert fuzzing.names_a_field(result), f"a refusal that names no field: {result}"
        return None
    return result


def valid_trainer(namespace: str) -> dict[str, Any]:
    body = fuzzing.manifest("Trainer", "t", {"epochs": 1, "image": "busybox:1.36"}, namespace)
    body["metadata"]["uid"] = "uid"
    return body


@FUZZ
@given(spec=fuzzing.trainer_specs)
def test_generated_trainers(cluster: Cluster, fuzz_namespace: str, spec: dict[str, Any]) -> None:
    stored = judged(dry_run(cluster, fuzzing.manifest("Trainer", "fuzz", spec, fuzz_namespace)))
    if stored is not None:
        fuzzing.decide_trainer(stored)


@FUZZ
@given(spec=fuzzing.profile_specs)
def test_generated_profiles(cluster: Cluster, fuzz_namespace: str, spec: dict[str, Any]) -> None:
    stored = judged(dry_run(cluster, fuzzing.manifest("TrainingProfile", "fuzz", spec, fuzz_namespace)))
    if stored is not None:
        fuzzing.decide_profile(valid_trainer(fuzz_namespace), stored)


@FUZZ
@given(spec=fuzzing.policy_specs)
def test_generated_quota_policies(cluster: Cluster, fuzz_namespace: str, spec: dict[str, Any]) -> None:
    stored = judged(dry_run(cluster, fuzzing.manifest("QuotaPolicy", f"fuzz-{fuzz_namespace}", spec)))
    if stored is not None:
        fuzzing.decide_quota(valid_trainer(fuzz_namespace), stored)

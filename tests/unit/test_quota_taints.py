"""Which nodes a run's pods may be placed on (trainerop_quota.taints): Kubernetes' toleration rule,
the namespace's default tolerations, and a role's tolerations as its pods will have them."""

from decimal import Decimal
from typing import Any

import pytest

from tests.factories import trainer_spec
from trainerop_common.api.base import PodContribution
from trainerop_quota.ledger import role_selector
from trainerop_quota.model import TrainerInfo
from trainerop_quota.taints import (
    Selector,
    Taint,
    Tolerates,
    namespace_defaults,
    scheduling_taints,
    tolerations_of,
)

DEFAULTS = "scheduler.alpha.kubernetes.io/defaultTolerations"
GPU_TAINT = Taint("nvidia.com/gpu", "present", "NoSchedule")
DEDICATED = Taint("dedicated", "infra", "NoSchedule")
EVICT = Taint("dedicated", "infra", "NoExecute")


@pytest.mark.parametrize(
    ("toleration", "taint", "tolerated"),
    [
        (Tolerates("dedicated", "Equal", "infra", "NoSchedule"), DEDICATED, True),
        (Tolerates("dedicated", "Equal", "other", "NoSchedule"), DEDICATED, False),  # another value
        (Tolerates("dedicated", "Equal", "infra", "NoExecute"), DEDICATED, False),  # another effect
        (Tolerates("dedicated", "Equal", "infra", ""), EVICT, True),  # no effect: every effect
        (Tolerates("dedicated", "Exists"), DEDICATED, True),  # any value
        (Tolerates("other", "Exists"), DEDICATED, False),
        (Tolerates("", "Exists"), GPU_TAINT, True),  # no key with Exists: every taint
        (Tolerates("", "Exists", effect="NoExecute"), DEDICATED, False),
    ],
)
def test_kubernetes_toleration_rule(toleration: Tolerates, taint: Taint, tolerated: bool) -> None:
    assert toleration.matches(taint) is tolerated


def test_only_taints_that_keep_pods_off_count() -> None:
    taints = [
        {"key": "a", "value": "1", "effect": "NoSchedule"},
        {"key": "b", "effect": "PreferNoSchedule"},  # a preference: the scheduler may still place pods
        {"key": "c", "effect": "NoExecute"},
        # the node's own state, judged by the quota's readiness rule: a run placed there keeps its place
        {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"},
        {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/memory-pressure", "effect": "NoSchedule"},  # nothing else judges it
    ]
    assert scheduling_taints(taints) == (
        Taint("a", "1", "NoSchedule"),
        Taint("c", "", "NoExecute"),
        Taint("node.kubernetes.io/memory-pressure", "", "NoSchedule"),
    )
    assert scheduling_taints(None) == ()


@pytest.mark.parametrize(
    ("annotations", "want"),
    [
        (None, ()),
        ({}, ()),
        (
            {DEFAULTS: '[{"key":"k","operator":"Exists","effect":"NoSchedule"}]'},
            (Tolerates("k", "Exists", "", "NoSchedule"),),
        ),
        ({DEFAULTS: "not json"}, ()),
        ({DEFAULTS: '{"key":"k"}'}, ()),  # not a list
    ],
)
def test_a_namespaces_default_tolerations(annotations: dict[str, str] | None, want: tuple[Tolerates, ...]) -> None:
    assert namespace_defaults(annotations) == want


def info(profile: PodContribution | None = None, namespace: tuple[Tolerates, ...] = (), **fields: Any) -> TrainerInfo:
    return TrainerInfo(
        "uid",
        "ns",
        "t",
        1,
        "2026-12-05T00:00:00Z",
        trainer_spec(**fields),
        profile=profile,
        namespace_tolerations=namespace,
    )


def test_a_roles_pods_go_only_where_their_tolerations_let_them() -> None:
    requests = {"cpu": Decimal(1)}
    bare = role_selector(info(), "worker", requests)
    assert not bare.allows({}, (DEDICATED,))
    assert bare.allows({}, ())
    # the quota's own spot tolerations: a spot node's taint never keeps its runs off
    assert bare.allows({}, (Taint("cloud.google.com/gke-spot", "true", "NoSchedule"),))
    # the namespace's defaults, the profile's, the role's override's
    from_namespace = info(namespace=tolerations_of([{"key": "dedicated", "operator": "Exists"}]))
    assert role_selector(from_namespace, "worker", requests).allows({}, (DEDICATED, EVICT))
    profile = PodContribution.model_validate(
        {"tolerations": [{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}], "nodeSelector": {"a": "1"}}
    )
    from_profile = role_selector(info(profile), "worker", requests)
    assert from_profile.allows({"a": "1"}, (DEDICATED,))
    assert not from_profile.allows({"a": "1"}, (EVICT,))
    assert not from_profile.allows({}, (DEDICATED,))  # and the profile's node selector
    override = {"worker": {"spec": {"tolerations": [{"key": "dedicated", "operator": "Exists"}]}}}
    overridden = info(podTemplateOverrides=override)
    assert role_selector(overridden, "worker", requests).allows({}, (DEDICATED,))


def test_a_taint_named_like_a_requested_extended_resource_is_tolerated() -> None:
    assert role_selector(info(), "worker", {"nvidia.com/gpu": Decimal(8)}).allows({}, (GPU_TAINT,))
    assert not role_selector(info(), "worker", {"cpu": Decimal(1)}).allows({}, (GPU_TAINT,))
    assert Selector(extended=frozenset({"kubernetes.io/x"})).allows({}, ()) is True

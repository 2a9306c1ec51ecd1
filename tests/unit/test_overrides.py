"""What spec.podTemplateOverrides may set (issue 20): Pod Security "restricted", and nothing the
operator owns; each refusal names the field and what to do instead."""

from typing import Any

import pytest

from tests.factories import trainer_spec
from trainerop_trainer.decide import decide
from trainerop_trainer.overrides import override_problems

from .test_decide_trainer import observed

W = "spec.podTemplateOverrides.worker"


def problems(worker: dict[str, Any]) -> list[str]:
    return override_problems(trainer_spec(podTemplateOverrides={"worker": worker}))


ALLOWED = [
    {"metadata": {"labels": {"team": "a"}, "annotations": {"x": "y"}}},
    {"spec": {"nodeSelector": {"gpu": "a100"}, "tolerations": [{"key": "k", "operator": "Exists"}]}},
    {"spec": {"affinity": {"podAntiAffinity": {}}, "topologySpreadConstraints": [], "dnsConfig": {}}},
    {
        "spec": {
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "d"}}, {"name": "s", "emptyDir": {}}]
        }
    },
    {"spec": {"containers": [{"name": "trainer", "env": [{"name": "A", "value": "1"}], "resources": {}}]}},
    {
        "spec": {
            "initContainers": [
                {"name": "sidecar", "image": "i", "restartPolicy": "Always", "ports": [{"containerPort": 9}]}
            ]
        }
    },
    {
        "spec": {
            "containers": [
                {
                    "name": "trainer",
                    "securityContext": {
                        "runAsNonRoot": True,
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ]
        }
    },
    {"spec": {"securityContext": {"runAsUser": 1000, "fsGroup": 1000, "seccompProfile": {"type": "RuntimeDefault"}}}},
]


@pytest.mark.parametrize("worker", ALLOWED)
def test_what_restricted_allows_is_allowed(worker: dict[str, Any]) -> None:
    assert problems(worker) == []


@pytest.mark.parametrize(
    ("worker", "field", "says"),
    [
        ({"spec": {"hostNetwork": True}}, f"{W}.spec.hostNetwork", "not allowed in an override"),
        ({"spec": {"hostPID": True}}, f"{W}.spec.hostPID", "not allowed"),
        (
            {"spec": {"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}},
            f"{W}.spec.volumes[0].hostPath",
            "use configMap",
        ),
        ({"spec": {"serviceAccountName": "admin"}}, f"{W}.spec.serviceAccountName", "trainer-operator-runner"),
        ({"spec": {"nodeName": "n1"}}, f"{W}.spec.nodeName", "use nodeSelector or affinity"),
        ({"spec": {"priorityClassName": "top"}}, f"{W}.spec.priorityClassName", "spec.scheduling.priorityClassName"),
        (
            {"spec": {"containers": [{"name": "t", "securityContext": {"privileged": True}}]}},
            f"{W}.spec.containers[0].securityContext.privileged",
            "restricted",
        ),
        (
            {"spec": {"containers": [{"name": "t", "securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}]}},
            f"{W}.spec.containers[0].securityContext.capabilities",
            "restricted",
        ),
        (
            {"spec": {"containers": [{"name": "t", "ports": [{"containerPort": 80, "hostPort": 80}]}]}},
            f"{W}.spec.containers[0].ports[0]",
            "host port",
        ),
        (
            {"spec": {"initContainers": [{"name": "i", "volumeDevices": []}]}},
            f"{W}.spec.initContainers[0].volumeDevices",
            "not allowed",
        ),
        ({"spec": {"securityContext": {"runAsUser": 0}}}, f"{W}.spec.securityContext.runAsUser", "restricted"),
        (
            {"spec": {"securityContext": {"seccompProfile": {"type": "Unconfined"}}}},
            f"{W}.spec.securityContext.seccompProfile",
            "restricted",
        ),
        ({"metadata": {"name": "other", "labels": {}}}, f"{W}.metadata.name", "only labels and annotations"),
        ({"status": {}}, f"{W}.status", "only metadata and spec"),
    ],
)
def test_what_restricted_forbids_or_the_operator_owns_is_refused_by_field(
    worker: dict[str, Any], field: str, says: str
) -> None:
    (problem,) = problems(worker)
    assert problem.startswith(f"{field}: ")
    assert says in problem


def test_a_trainer_stored_with_a_forbidden_override_gets_no_pods_and_says_why_once() -> None:
    s = trainer_spec(topology={"workers": 2}, podTemplateOverrides={"worker": {"spec": {"hostNetwork": True}}})
    d = decide(observed(s))
    assert d.create_pods == ()
    (created,) = [c for c in d.conditions if c.type == "Created"]
    assert (created.status, created.reason) == ("False", "OverrideNotAllowed")
    assert f"{W}.spec.hostNetwork" in created.message
    assert d.events == ()  # said when the status changes, not on every reconcile
    assert [e[1] for e in d.on_change] == ["OverrideNotAllowed"]

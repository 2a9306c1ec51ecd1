"""What spec.podTemplateOverrides may set (issue 20): Pod Security "restricted", and nothing the
operator owns; each refusal names the field and what to do instead."""

from dataclasses import replace
from typing import Any

import pytest

from tests.factories import trainer_spec
from trainerop_common.pod_security import BASELINE, ENFORCE_LABEL, LEVELS, PRIVILEGED, RESTRICTED
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
        ({"spec": {"hostNetwork": True}}, f"{W}.spec.hostNetwork", "no privileged or host-level pod"),
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
            "no privileged or host-level pod",
        ),
        (
            {"spec": {"containers": [{"name": "t", "securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}]}},
            f"{W}.spec.containers[0].securityContext.capabilities",
            "beyond Pod Security baseline",
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
            "beyond Pod Security baseline",
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


ROOT = {"spec": {"securityContext": {"runAsUser": 0, "runAsNonRoot": False}}}
NFS = {"spec": {"volumes": [{"name": "d", "nfs": {"server": "s", "path": "/"}}]}}
CHOWN = {"spec": {"containers": [{"name": "t", "securityContext": {"capabilities": {"add": ["CHOWN"]}}}]}}
ESCALATE = {"spec": {"containers": [{"name": "t", "securityContext": {"allowPrivilegeEscalation": True}}]}}
ADMIN = {"spec": {"containers": [{"name": "t", "securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}]}}
UNCONFINED = {"spec": {"securityContext": {"seccompProfile": {"type": "Unconfined"}}}}
SYSCTLS = {"spec": {"securityContext": {"sysctls": [{"name": "net.ipv4.tcp_keepalive_time", "value": "60"}]}}}
SELINUX = {"spec": {"securityContext": {"seLinuxOptions": {"type": "container_t"}}}}
SELINUX_USER = {"spec": {"securityContext": {"seLinuxOptions": {"user": "system_u"}}}}
PRIVILEGED_CONTAINER = {"spec": {"containers": [{"name": "t", "securityContext": {"privileged": True}}]}}
HOST_PATH = {"spec": {"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}}
HOST_PORT = {"spec": {"containers": [{"name": "t", "ports": [{"containerPort": 80, "hostPort": 80}]}]}}
HOST_NETWORK = {"spec": {"hostNetwork": True}}

# What each level of the namespace allows (issue 53: the cluster's rules), and what none does (the
# operator's bound: no host-level pod, nothing beyond baseline). "level": refused, naming the
# namespace's level and its label; "bound": refused at every level, saying so; "unknown": a field
# no override may set.
LEVEL_TABLE = [
    # override        restricted  baseline  privileged
    (ROOT, "level", "", ""),
    (NFS, "level", "", ""),
    (CHOWN, "level", "", ""),
    (ESCALATE, "level", "", ""),
    (SELINUX, "", "", ""),  # a container type: every level allows it
    # Beyond baseline: refused at every level, a privileged namespace too (the operator's bound)
    (ADMIN, "bound", "bound", "bound"),
    (UNCONFINED, "bound", "bound", "bound"),
    (SELINUX_USER, "bound", "bound", "bound"),
    (SYSCTLS, "unknown", "unknown", "unknown"),
    (PRIVILEGED_CONTAINER, "bound", "bound", "bound"),
    (HOST_PATH, "bound", "bound", "bound"),
    (HOST_PORT, "bound", "bound", "bound"),
    (HOST_NETWORK, "bound", "bound", "bound"),
]


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize(("worker", "restricted", "baseline", "privileged"), LEVEL_TABLE)
def test_an_override_is_refused_only_where_the_namespaces_level_or_the_operators_bound_refuses_it(
    level: str, worker: dict[str, Any], restricted: str, baseline: str, privileged: str
) -> None:
    expected = {RESTRICTED: restricted, BASELINE: baseline, PRIVILEGED: privileged}[level]
    found = override_problems(trainer_spec(podTemplateOverrides={"worker": worker}), level)
    if not expected:
        assert found == []
        return
    assert found
    for problem in found:
        if expected == "level":
            assert f'Pod Security "{level}" forbids it' in problem, problem
            assert ENFORCE_LABEL in problem, problem
        elif expected == "unknown":
            assert "not a securityContext field an override may set" in problem, problem
        else:
            assert "no privileged or host-level pod, nor one beyond Pod Security baseline" in problem, problem


def test_a_trainer_held_by_its_namespaces_level_gets_its_pods_once_the_namespace_allows_the_override() -> None:
    s = trainer_spec(topology={"workers": 2}, podTemplateOverrides={"worker": ROOT})
    held = decide(observed(s))
    assert held.create_pods == ()
    (created,) = [c for c in held.conditions if c.type == "Created"]
    assert created.reason == "OverrideNotAllowed"
    assert 'Pod Security "restricted"' in created.message
    going = decide(replace(observed(s), pod_security=BASELINE))
    assert len(going.create_pods) == 2
    assert all(p["spec"]["securityContext"]["runAsUser"] == 0 for p in going.create_pods)

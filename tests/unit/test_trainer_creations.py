"""What the trainer controller's identity may create (trainerop_trainer.creations): whose Trainer
an object belongs to, where, and which Secrets a pod uses."""

from typing import Any

import pytest

from trainerop_trainer.creations import creation_problems, priority_problems, secret_names, trainer_named_secrets

TRAINER_REF = {"apiVersion": "trainer.operator.kubeflow.org/v1alpha1", "kind": "Trainer", "name": "t"}


def trainer(uid: str = "u1", spec: dict[str, Any] | None = None, **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "t", "namespace": "team", "uid": uid}, "spec": spec or {}, "status": status}


def owned(uid: str = "u1", controller: bool = True, **spec: Any) -> dict[str, Any]:
    ref = {**TRAINER_REF, "uid": uid, "controller": controller}
    return {"metadata": {"name": "t-worker-0", "namespace": "team", "ownerReferences": [ref]}, "spec": spec}


VOLUME = {"name": "v", "secret": {"secretName": "a"}}
PROJECTED = {"name": "p", "projected": {"sources": [{"secret": {"name": "b"}}, {"configMap": {"name": "cm"}}]}}
CSI = {"name": "c", "csi": {"driver": "d", "nodePublishSecretRef": {"name": "c"}}}
CONTAINER = {
    "name": "x",
    "env": [{"name": "E", "valueFrom": {"secretKeyRef": {"name": "d", "key": "k"}}}, {"name": "F", "value": "v"}],
    "envFrom": [{"secretRef": {"name": "e"}}, {"configMapRef": {"name": "cm"}}],
}


@pytest.mark.parametrize(
    ("fragment", "names"),
    [
        ({}, set()),
        ({"volumes": [VOLUME, PROJECTED, CSI]}, {"a", "b", "c"}),
        ({"containers": [CONTAINER]}, {"d", "e"}),
        (
            {"initContainers": [CONTAINER], "ephemeralContainers": [{"envFrom": [{"secretRef": {"name": "f"}}]}]},
            {"d", "e", "f"},
        ),
        ({"imagePullSecrets": [{"name": "g"}, {}]}, {"g"}),
        ({"volumes": [{"name": "r", "rbd": {"secretRef": {"name": "h"}}}]}, {"h"}),  # any volume plugin's
        # A Trainer's spec: its model's and checkpoint's credentials, and an override's pod spec
        (
            {"model": {"credentialsSecret": "i", "tokenSecret": "j"}, "checkpoint": {"credentialsSecret": "k"}},
            {"i", "j", "k"},
        ),
        ({"podTemplateOverrides": {"worker": {"spec": {"volumes": [VOLUME]}}}}, {"a"}),
        ({"configMap": {"name": "cm"}, "env": [{"name": "SECRET", "value": "x"}]}, set()),  # names no Secret
    ],
)
def test_every_form_in_which_a_fragment_names_a_secret(fragment: dict[str, Any], names: set[str]) -> None:
    assert secret_names(fragment) == names


def test_a_trainer_names_what_its_spec_and_the_profiles_and_checkpoints_sections_name() -> None:
    status: dict[str, Any] = {
        "profile": {"model": {"tokenSecret": "p"}, "contribution": {"pod": {"volumes": [VOLUME]}}},
        "checkpoint": {"contribution": {"roles": {"worker": {"env": CONTAINER["env"]}}}},
        "trainer": {"note": {"secretName": "its-own-section"}},  # the trainer's own word counts for nothing
    }
    assert trainer_named_secrets(trainer(spec={"env": CONTAINER["env"]}, **status)) == {"p", "a", "d"}


SPEC_NAMES = {"env": CONTAINER["env"], "podTemplateOverrides": {"worker": {"spec": {"volumes": [VOLUME]}}}}


@pytest.mark.parametrize(
    ("resource", "obj", "owner", "holds", "refusal"),
    [
        # what the controller makes, for the Trainer that exists
        ("pods", owned(volumes=[VOLUME]), trainer(spec=SPEC_NAMES), True, ""),
        ("services", owned(), trainer(), True, ""),
        # a pod using a Secret its Trainer does not name, in any form
        ("pods", owned(volumes=[PROJECTED]), trainer(spec=SPEC_NAMES), True, "not b"),
        ("pods", owned(containers=[CONTAINER]), trainer(spec=SPEC_NAMES), True, "not e"),
        ("pods", owned(imagePullSecrets=[{"name": "g"}]), trainer(), True, "not g"),
        # named by the profile's contribution: allowed
        (
            "pods",
            owned(volumes=[PROJECTED]),
            trainer(profile={"contribution": {"pod": {"volumes": [PROJECTED]}}}),
            True,
            "",
        ),
        # an earlier Trainer's uid under the name; a made-up name (no Trainer of it)
        ("pods", owned(uid="u0"), trainer(uid="u1"), True, "team holds no Trainer t of uid u0"),
        ("services", owned(), None, True, "only for a Trainer that exists: team holds no Trainer t of uid u1"),
        # no Trainer controls it (the runner's account, Role, bindings): only where Trainers are
        ("serviceaccounts", {"metadata": {"name": "r", "namespace": "team"}}, None, True, ""),
        (
            "rolebindings",
            {"metadata": {"name": "r", "namespace": "kube-system"}},
            None,
            False,
            "kube-system holds none",
        ),
        # a Trainer owner that is not the controller counts as none
        ("roles", owned(controller=False), None, False, "only where Trainers are"),
    ],
)
def test_what_the_trainer_controller_may_create(
    resource: str, obj: dict[str, Any], owner: dict[str, Any] | None, holds: bool, refusal: str
) -> None:
    problems = creation_problems(resource, obj, owner, holds)
    assert (len(problems) == 1 and refusal in problems[0]) if refusal else problems == (), problems


@pytest.mark.parametrize(
    ("priority_class", "value", "default_priority", "refused"),
    [
        (None, None, 0, False),  # the pods the controller makes, in a cluster without a default class
        ("everyday", 100, 100, False),  # the API server gave it the cluster's default class
        ("batch-low", -10, 0, False),  # lower than the default: preempts no one (a cluster's webhook may set it)
        ("batch-low", -10, 100, False),
        ("system-node-critical", 2000001000, 0, True),  # would preempt other tenants' pods on any node
        ("system-node-critical", 2000001000, 100, True),
        ("urgent", 1000, 100, True),  # above the default
        ("urgent", 1000, -5, True),
        ("zero", 0, -5, False),  # 0 is allowed whatever the default
    ],
)
def test_a_training_pod_has_at_most_the_clusters_default_priority(
    priority_class: str | None, value: int | None, default_priority: int, refused: bool
) -> None:
    pod = owned(priorityClassName=priority_class, priority=value) if priority_class else owned()
    problems = priority_problems(pod, default_priority)
    assert bool(problems) == refused
    assert all(f"not priority class {priority_class} ({value})" in p for p in problems)

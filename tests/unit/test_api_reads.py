"""The tests' reads without a kubectl process (tests/api_reads.py): kubectl's names for kinds, found
by discovery, and kubectl's words for a refusal."""

import httpx
import pytest

from tests.api_reads import Resource, refusal, resources

CORE = {
    "resources": [
        {"name": "pods", "singularName": "pod", "namespaced": True, "kind": "Pod", "shortNames": ["po"]},
        {"name": "pods/status", "singularName": "", "namespaced": True, "kind": "Pod"},
        {"name": "events", "singularName": "event", "namespaced": True, "kind": "Event", "shortNames": ["ev"]},
        {"name": "nodes", "singularName": "node", "namespaced": False, "kind": "Node", "shortNames": ["no"]},
    ]
}
EVENTS = {"resources": [{"name": "events", "singularName": "event", "namespaced": True, "kind": "Event"}]}
TRAINERS = {
    "resources": [
        {"name": "trainers", "singularName": "trainer", "namespaced": True, "kind": "Trainer", "shortNames": ["tr"]}
    ]
}
FOUND = resources(
    [
        ("/api/v1", "", CORE),
        ("/apis/events.k8s.io/v1", "events.k8s.io", EVENTS),
        ("/apis/trainer.operator.kubeflow.org/v1", "trainer.operator.kubeflow.org", TRAINERS),
    ]
)
POD = Resource("/api/v1", "pods", True)
TRAINER = Resource("/apis/trainer.operator.kubeflow.org/v1", "trainers", True)


@pytest.mark.parametrize(
    ("name", "resource"),
    [
        ("pod", POD),
        ("pods", POD),
        ("po", POD),
        ("trainer", TRAINER),
        ("tr", TRAINER),
        ("trainers.trainer.operator.kubeflow.org", TRAINER),
        ("event", Resource("/api/v1", "events", True)),  # the core group first, as kubectl
        ("events.events.k8s.io", Resource("/apis/events.k8s.io/v1", "events", True)),
        ("node", Resource("/api/v1", "nodes", False)),
        ("pods/status", None),  # a subresource is no kind
    ],
)
def test_a_kind_is_found_by_every_name_kubectl_takes(name: str, resource: Resource | None) -> None:
    assert FOUND.get(name) == resource


@pytest.mark.parametrize(
    ("resource", "namespace", "name", "path"),
    [
        (POD, "team-a", "p", "/api/v1/namespaces/team-a/pods/p"),
        (POD, "team-a", None, "/api/v1/namespaces/team-a/pods"),
        (Resource("/api/v1", "nodes", False), "team-a", "n", "/api/v1/nodes/n"),  # a namespace given is ignored
    ],
)
def test_the_path_of_an_object_and_of_a_list(resource: Resource, namespace: str, name: str | None, path: str) -> None:
    assert resource.path(namespace, name) == path


def test_a_refusal_reads_as_kubectls() -> None:
    body = {"kind": "Status", "reason": "NotFound", "message": 'trainers.trainer.operator.kubeflow.org "x" not found'}
    said = refusal(httpx.Response(404, json=body))
    assert said == 'Error from server (NotFound): trainers.trainer.operator.kubeflow.org "x" not found'
    assert refusal(httpx.Response(502, text="bad gateway")) == "Error from server: 502 bad gateway"

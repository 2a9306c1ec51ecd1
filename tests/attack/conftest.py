"""The attack suite (marker: attack): what a platform team's security review would try, against
the operator as users deploy it — the controllers as pods from their image (testbed/deploy.py,
deploy/overlays/dev) on the real node — not the local processes of the integration tests.

Each case is attempted for real, or with ``--dry-run=server`` where success would harm the
cluster, as the actor of docs/security.md's threat model (a tenant, a pod, a controller's
identity taken over), and asserts that it is refused or has no effect, and what stopped it.
Identities are taken by impersonation (``kubectl --as``): the API server authorises the request
exactly as it would the ServiceAccount's own token."""

import functools
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from testbed import certmanager, deploy, localdev, node
from testbed.deploy import CERT_MANAGER_OVERLAYS
from tests.harness import Cluster, KubectlError, eventually


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/attack/" in str(item.path):
            item.add_marker(pytest.mark.attack)


# The overlays each attack is made against, deployed in turn (testbed.deploy). cert-manager's
# policies and RBAC are production's without its second replicas; local is the integration tier's.
OVERLAYS = ("dev", "production", "minimal")
SELF_SIGNED = ("dev", "minimal")  # controllers put their CA into their webhook configurations


@pytest.fixture(scope="session", params=OVERLAYS)
def overlay(request: pytest.FixtureRequest, cluster: Cluster, operator_in_cluster: None) -> Iterator[str]:
    """The overlay the operator is deployed with now (dev first: the e2e tests' own)."""
    name = str(request.param)
    run = localdev.state_dir()
    if name in CERT_MANAGER_OVERLAYS:
        certmanager.start(cluster.kubeconfig, run)
    if name != "dev" and deploy.main(["up", "--overlay", name]) != 0:
        pytest.fail(f"the operator did not come up with deploy/overlays/{name}; see the message above")
    yield name
    if name in CERT_MANAGER_OVERLAYS:
        certmanager.stop(run)


@pytest.fixture(autouse=True)
def deployed(overlay: str) -> str:
    """Every attack is made against the deployed operator."""
    return overlay


@functools.cache
def deployed_controllers(overlay: str) -> frozenset[str]:
    """The controllers deploy/overlays/``overlay`` runs (its Deployments)."""
    names = [o["metadata"]["name"] for o in deploy.rendered(overlay) if o["kind"] == "Deployment"]
    return frozenset(name.removeprefix("trainer-operator-") for name in names)


def needs(overlay: str, *controllers: str) -> None:
    """Skip, saying why, an attack on a controller the overlay does not deploy."""
    missing = sorted(set(controllers) - deployed_controllers(overlay))
    if missing:
        pytest.skip(f"deploy/overlays/{overlay} deploys no {', '.join(missing)} controller")


def account(controller: str) -> str:
    """The username of a controller's ServiceAccount."""
    return f"system:serviceaccount:{localdev.NAMESPACE}:trainer-operator-{controller}"


def attempt(cluster: Cluster, who: str, *request: str, stdin: str | None = None) -> str:
    """``kubectl request`` as ``who``: "" when the API server accepts it, else its refusal."""
    try:
        cluster.kubectl(*request, f"--as={who}", stdin=stdin)
    except KubectlError as err:
        return str(err)
    return ""


@pytest.fixture
def pods_namespace(cluster: Cluster) -> Iterator[str]:
    """A namespace whose pods run on the real node: the attacker's."""
    name = f"attacker-{uuid.uuid4().hex[:8]}"
    cluster.apply({"apiVersion": "v1", "kind": "List", "items": [node.team_namespace(name)]})
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found")


def from_a_pod(cluster: Cluster, namespace: str, name: str, script: str, *args: str) -> Any:
    """What a Python ``script`` run in a pod of ``namespace`` with ``args`` printed last (JSON)."""
    start_a_pod(cluster, namespace, name, script, *args)
    return output_of(cluster, namespace, name)


def output_of(cluster: Cluster, namespace: str, name: str) -> Any:
    """What the pod ``name`` printed last (JSON), once it has finished."""
    eventually(
        lambda: cluster.get("pod", name, namespace)["status"].get("phase") == "Succeeded" or None,
        timeout=120,
        what=f"the attacker's pod {name} to finish",
    )
    return json.loads(cluster.kubectl("logs", name, "-n", namespace).strip().splitlines()[-1])


def start_a_pod(cluster: Cluster, namespace: str, name: str, script: str, *args: str) -> None:
    """A pod of ``namespace`` on the real node running the Python ``script`` with ``args``."""
    container = {
        "name": "attacker",
        "image": "trainer-operator:dev",  # on the node: the operator's own image has Python
        "command": ["python", "-c", script, *args],
        "securityContext": {"runAsUser": 65532, "runAsNonRoot": True},
    }
    cluster.apply(node.pod_on_the_node(name, container), namespace)


def pod_of(cluster: Cluster, controller: str) -> dict[str, Any]:
    """One of the deployed controller's running pods."""
    selector = f"app.kubernetes.io/name=trainer-operator-{controller}"
    pods = json.loads(cluster.kubectl("get", "pods", "-n", localdev.NAMESPACE, "-l", selector, "-o", "json"))["items"]
    running = [p for p in pods if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]
    return dict(min(running, key=lambda p: str(p["metadata"]["name"])))  # production runs two: either

"""The attack suite (marker: attack): what a platform team's security review would try, against
the operator as users deploy it — the controllers as pods from their image (testbed/deploy.py,
deploy/overlays/dev) on the real node — not the local processes of the integration tests.

Each case is attempted for real, or with ``--dry-run=server`` where success would harm the
cluster, as the actor of docs/security.md's threat model (a tenant, a pod, a controller's
identity taken over), and asserts that it is refused or has no effect, and what stopped it.
Identities are taken by impersonation (``kubectl --as``): the API server authorises the request
exactly as it would the ServiceAccount's own token."""

import pytest

from testbed import localdev
from tests.harness import Cluster, KubectlError


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/attack/" in str(item.path):
            item.add_marker(pytest.mark.attack)


@pytest.fixture(autouse=True)
def deployed(operator_in_cluster: None) -> None:
    """Every attack is made against the deployed operator."""


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

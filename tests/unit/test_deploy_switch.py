"""Deploying one overlay over another (testbed.deploy): what only the others install goes."""

from typing import Any

from testbed.deploy import only_in_others


def obj(kind: str, name: str, namespace: str = "") -> dict[str, Any]:
    return {"kind": kind, "metadata": {"name": name, **({"namespace": namespace} if namespace else {})}}


def test_what_only_other_overlays_install_is_removed_once_and_shared_kinds_stay() -> None:
    production = [obj("Deployment", "trainer", "ops"), obj("ClusterRole", "trainer"), obj("Namespace", "ops")]
    dev = [*production, obj("ClusterRole", "trainer-webhook-ca"), obj("Deployment", "kubeflow", "ops")]
    local = [obj("ClusterRole", "trainer-webhook-ca"), obj("CustomResourceDefinition", "pytorchjobs.kubeflow.org")]
    stale = only_in_others(production, [dev, local])
    assert [(o["kind"], o["metadata"]["name"]) for o in stale] == [
        ("ClusterRole", "trainer-webhook-ca"),
        ("Deployment", "kubeflow"),
    ]

"""deploy/: every overlay builds with kubectl kustomize and is accepted by the API server."""

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.harness import REPO, Cluster

OVERLAYS = ("dev", "minimal", "local")
CONCERNS = ("profile", "quota", "checkpoint", "audit", "verify")
KUBEFLOW_JOBS = ("pytorchjobs", "tfjobs", "jaxjobs", "xgboostjobs")


def build(cluster: Cluster, overlay: str) -> list[dict[str, Any]]:
    out = cluster.kubectl("kustomize", str(REPO / "deploy" / "overlays" / overlay))
    return [doc for doc in yaml.safe_load_all(out) if doc]


def with_component(cluster: Cluster, tmp_path: Path, overlay: str, component: str) -> tuple[Path, list[dict[str, Any]]]:
    """An overlay of ``deploy/overlays/<overlay>`` with ``deploy/components/<component>``: its
    directory and what it builds."""
    directory = tmp_path / "overlay"
    directory.mkdir()
    base = os.path.relpath(REPO / "deploy" / "overlays" / overlay, directory)
    added = os.path.relpath(REPO / "deploy" / "components" / component, directory)
    (directory / "kustomization.yaml").write_text(yaml.safe_dump({"resources": [base], "components": [added]}))
    return directory, [doc for doc in yaml.safe_load_all(cluster.kubectl("kustomize", str(directory))) if doc]


def by_kind(objects: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def controller_env(objects: list[dict[str, Any]], controller: str) -> dict[str, str | None]:
    """The environment of ``trainer-operator-<controller>``'s container, as built."""
    deployment = by_kind(objects, "Deployment")[f"trainer-operator-{controller}"]
    return {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}


def gate_env(deployment: dict[str, Any]) -> set[str]:
    env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    return {e["name"] for e in env if e["name"].startswith("TRAINEROP_GATE_") and e["value"] == "true"}


@pytest.mark.smoke
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_builds_and_the_api_server_accepts_it(cluster: Cluster, overlay: str) -> None:
    objects = build(cluster, overlay)
    crds = by_kind(objects, "CustomResourceDefinition")
    assert sum(name.endswith(".trainer.operator.kubeflow.org") for name in crds) == 7
    assert "clusterkopfpeerings.kopf.dev" in crds
    assert "trainer-operator-system" in by_kind(objects, "Namespace")
    # Server-side dry run: schema, RBAC objects and Deployments are validated by the real server.
    cluster.kubectl(
        "apply",
        "--server-side",
        "--dry-run=server",
        "--force-conflicts",
        "-k",
        str(REPO / "deploy" / "overlays" / overlay),
    )


def test_dev_deploys_all_seven_and_announces_every_gate(cluster: Cluster) -> None:
    objects = build(cluster, "dev")
    deployments = by_kind(objects, "Deployment")
    assert set(deployments) == {f"trainer-operator-{c}" for c in ("trainer", *CONCERNS, "kubeflow")}
    assert set(by_kind(objects, "CustomResourceDefinition")) >= {f"{k}.kubeflow.org" for k in KUBEFLOW_JOBS}
    assert gate_env(deployments["trainer-operator-trainer"]) == {f"TRAINEROP_GATE_{c.upper()}" for c in CONCERNS}
    for name, deployment in deployments.items():
        pod = deployment["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] == name
        assert pod["securityContext"]["runAsNonRoot"] is True
        container = pod["containers"][0]
        assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
        assert container["securityContext"]["readOnlyRootFilesystem"] is True


def test_minimal_deploys_only_the_trainer_without_gates(cluster: Cluster) -> None:
    objects = build(cluster, "minimal")
    deployments = by_kind(objects, "Deployment")
    assert set(deployments) == {"trainer-operator-trainer"}
    assert gate_env(deployments["trainer-operator-trainer"]) == set()


def test_local_has_every_identity_and_no_deployment(cluster: Cluster) -> None:
    objects = build(cluster, "local")
    assert by_kind(objects, "Deployment") == {}
    assert set(by_kind(objects, "ServiceAccount")) == {
        f"trainer-operator-{c}" for c in ("trainer", *CONCERNS, "kubeflow")
    }
    controllers = {f"trainer-operator-{c}" for c in ("trainer", *CONCERNS, "kubeflow")}
    # --webhook-tls self-signed (components/self-signed-tls): each webhook server its own configurations
    controllers |= {f"trainer-operator-{c}-webhook-ca" for c in ("trainer", "profile", "quota", "audit")}
    assert controllers <= set(by_kind(objects, "ClusterRoleBinding"))
    # Reading Secrets is bound per namespace by the trainer controller, never cluster-wide.
    secret_readers = {"trainer-operator-profile-secret-check", "trainer-operator-checkpoint-credentials"}
    assert secret_readers <= set(by_kind(objects, "ClusterRole"))
    assert not secret_readers & set(by_kind(objects, "ClusterRoleBinding"))
    # Each webhook controller's CA Secret, created empty: the controller fills it, never creates one.
    secrets = by_kind(objects, "Secret")
    assert set(secrets) == {f"trainer-operator-{c}-webhook-ca" for c in ("trainer", "profile", "quota", "audit")}
    assert all("data" not in s for s in secrets.values())
    # Users' roles aggregate into the built-in edit/admin/view roles instead of being bound.
    users = set(by_kind(objects, "ClusterRole")) - controllers - secret_readers
    assert users == {
        "trainer-operator-edit",
        "trainer-operator-view",
        "trainer-operator-cluster-profile-reader",
        "trainer-operator-audit-admin",  # bound by a platform to its auditors, per namespace or cluster-wide
        "trainer-operator-image-policy-admin",  # aggregated into admin only: editors do not lift a policy
        "trainer-operator-kubeflow-jobs-edit",
        "trainer-operator-kubeflow-jobs-view",
    }
    for name in (
        "trainer-operator-edit",
        "trainer-operator-view",
        "trainer-operator-kubeflow-jobs-edit",
        "trainer-operator-kubeflow-jobs-view",
        "trainer-operator-image-policy-admin",
    ):
        assert any(
            k.startswith("rbac.authorization.k8s.io/aggregate-to-")
            for k in by_kind(objects, "ClusterRole")[name]["metadata"]["labels"]
        )


@pytest.mark.parametrize("overlay", ["dev", "minimal"])
def test_every_webhook_calls_a_service_of_the_overlay_on_the_webhook_port(cluster: Cluster, overlay: str) -> None:
    objects = build(cluster, overlay)
    services = by_kind(objects, "Service")
    deployments = by_kind(objects, "Deployment")
    hooks = [
        (config["metadata"]["name"], hook)
        for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
        for config in by_kind(objects, kind).values()
        for hook in config["webhooks"]
    ]
    assert hooks
    for config, hook in hooks:
        assert hook["failurePolicy"] == ("Ignore" if config == "trainer-operator-audit" else "Fail"), hook["name"]
        assert hook["timeoutSeconds"] <= 5
        ref = hook["clientConfig"]["service"]
        service = services[ref["name"]]
        assert ref["port"] == 443
        assert service["spec"]["ports"] == [{"name": "webhook", "port": 443, "targetPort": "webhook"}]
        target = service["spec"]["selector"]["app.kubernetes.io/name"]
        env = {
            e["name"]: e.get("value") for e in deployments[target]["spec"]["template"]["spec"]["containers"][0]["env"]
        }
        assert env["TRAINEROP_WEBHOOK_PORT"] == "9443"
        assert env["TRAINEROP_WEBHOOK_TLS"] == "self-signed"
        assert config == target  # a controller injects its CA into its own configurations only


def test_production_runs_two_peered_replicas_of_each_on_different_nodes_with_a_disruption_budget(
    cluster: Cluster,
) -> None:
    objects = build(cluster, "production")
    deployments = by_kind(objects, "Deployment")
    budgets = by_kind(objects, "PodDisruptionBudget")
    assert set(deployments) == set(budgets) == {f"trainer-operator-{c}" for c in ("trainer", *CONCERNS)}
    for name, deployment in deployments.items():
        pod = deployment["spec"]["template"]
        assert deployment["spec"]["replicas"] == 2
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        assert env["TRAINEROP_PEERING"] == "true"  # only one replica reconciles; both answer webhooks
        (spread,) = pod["spec"]["topologySpreadConstraints"]
        assert (spread["topologyKey"], spread["labelSelector"]["matchLabels"]) == (
            "kubernetes.io/hostname",
            {"app.kubernetes.io/name": name},
        )
        assert budgets[name]["spec"]["minAvailable"] == 1
        assert budgets[name]["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    # The API server accepts them (cert-manager's kinds are left out: its CRDs are not installed here).
    accepted = [o for o in objects if o["kind"] in ("Deployment", "PodDisruptionBudget")]
    cluster.kubectl(
        "apply",
        "--server-side",
        "--dry-run=server",
        "--force-conflicts",
        "-f",
        "-",
        stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": accepted}),
    )


def test_webhook_client_auth_gives_every_webhook_server_the_api_servers_client_ca(
    cluster: Cluster, tmp_path: Path
) -> None:
    _, objects = with_component(cluster, tmp_path, "production", "webhook-client-auth")
    for name, deployment in by_kind(objects, "Deployment").items():
        pod = deployment["spec"]["template"]["spec"]
        env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
        serves = "TRAINEROP_WEBHOOK_PORT" in env
        assert ("TRAINEROP_WEBHOOK_CLIENT_CA_FILE" in env) is serves, name
        if serves:
            assert env["TRAINEROP_WEBHOOK_CLIENT_CA_FILE"] == "/etc/trainer-operator/webhook-client/ca.crt"
            volumes = {v["name"]: v for v in pod["volumes"]}
            assert volumes["webhook-client-ca"]["configMap"]["name"] == "trainer-operator-webhook-client-ca"

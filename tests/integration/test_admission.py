"""The admission webhooks (deploy/controllers/*/webhook.yaml) on the real API server, served by
the controllers over TLS: refusals with messages that say what to fix, defaults filled in, the
operator's own writes and unrelated updates never judged, and the self-signed TLS path."""

import base64
import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509

from testbed import cluster as cluster_tool
from testbed import localdev
from tests.factories import trainer_manifest
from tests.harness import Cluster, KubectlError, eventually

SEED_TRAINER = "examples/seed/trainer.yaml"
PROFILE = {
    "apiVersion": "trainer.operator.kubeflow.org/v1alpha1",
    "kind": "TrainingProfile",
    "metadata": {"name": "team-defaults"},
    "spec": {"envVars": [{"name": "NCCL_IB_TIMEOUT", "value": "22"}]},
}
DEFAULT_PROFILE_LABEL = "trainer.operator.kubeflow.org/default-profile"


def trainer(name: str = "run", **spec: Any) -> dict[str, Any]:
    return trainer_manifest(name, **spec)


def refusal(cluster: Cluster, manifest: dict[str, Any], namespace: str) -> str:
    with pytest.raises(KubectlError) as refused:
        cluster.apply(manifest, namespace)
    return refused.value.stderr


def apply_with_warnings(cluster: Cluster, manifest: dict[str, Any], namespace: str) -> str:
    """kubectl apply; returns what it printed on stderr (the API server's warnings)."""
    result = subprocess.run(
        [str(cluster.kubectl_bin), f"--kubeconfig={cluster.kubeconfig}", "apply", "-n", namespace, "-f", "-"],
        input=json.dumps(manifest),
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stderr


@pytest.mark.smoke
def test_a_trainer_naming_a_missing_profile_is_refused_with_what_to_do(cluster: Cluster, namespace: str) -> None:
    message = refusal(cluster, trainer(profile="cost-optimized-32gpu"), namespace)
    assert 'admission webhook "validate-profile.trainer.operator.kubeflow.org" denied the request' in message
    assert (
        f"spec.profile: there is no TrainingProfile 'cost-optimized-32gpu' in namespace '{namespace}' and no "
        "ClusterTrainingProfile 'cost-optimized-32gpu'; create the profile first" in message
    )
    assert cluster.names("trainers", namespace) == set()
    refused = {"controller": "profile", "webhook": "validate-profile", "outcome": "refused"}
    assert cluster.metric("profile", "operator_admission_reviews_total", refused) >= 1

    # once the profile exists the same Trainer is admitted; a later deletion of the profile does
    # not block updates that leave spec.profile alone (the profile controller reports it instead)
    cluster.apply({**PROFILE, "metadata": {"name": "cost-optimized-32gpu"}}, namespace)
    cluster.apply(trainer(profile="cost-optimized-32gpu"), namespace)
    cluster.kubectl("delete", "trainingprofile", "cost-optimized-32gpu", "-n", namespace)
    cluster.apply(trainer(profile="cost-optimized-32gpu", epochs=2), namespace)
    cluster.kubectl("label", "trainer", "run", "-n", namespace, "team=a")
    assert cluster.get("trainer", "run", namespace)["spec"]["epochs"] == 2


def test_the_namespace_default_profile_is_filled_in(cluster: Cluster, namespace: str) -> None:
    cluster.apply(PROFILE, namespace)
    cluster.kubectl("label", "namespace", namespace, f"{DEFAULT_PROFILE_LABEL}=team-defaults")
    warnings = apply_with_warnings(cluster, trainer("defaulted"), namespace)
    assert f"spec.profile set to 'team-defaults', the default profile of namespace '{namespace}'" in warnings
    assert cluster.get("trainer", "defaulted", namespace)["spec"]["profile"] == "team-defaults"
    cluster.apply(trainer("own", profile="team-defaults"), namespace)  # a profile given is kept
    eventually(
        lambda: (
            (cluster.get("trainer", "defaulted", namespace).get("status") or {}).get("profile", {}).get("name")
            == "team-defaults"
        ),
        what="the defaulted profile resolved",
    )

    # a default that names a missing profile is refused with the label to fix
    cluster.kubectl("label", "--overwrite", "namespace", namespace, f"{DEFAULT_PROFILE_LABEL}=nonexistent")
    message = refusal(cluster, trainer("broken"), namespace)
    assert f"it is namespace '{namespace}''s default profile (its label {DEFAULT_PROFILE_LABEL})" in message


def test_pods_no_node_can_hold_are_refused(cluster: Cluster, namespace: str) -> None:
    nine_gpus = trainer(resources={"limits": {"nvidia.com/gpu": 9}})
    message = refusal(cluster, nine_gpus, namespace)
    assert 'admission webhook "validate-trainer.trainer.operator.kubeflow.org" denied the request' in message
    assert "spec.resources: no node of the cluster can hold one pod asking for nvidia.com/gpu 9 (closest: " in message
    assert ": nvidia.com/gpu 8" in message  # the kwok nodes offer 8

    # the seed README's Trainer fits (its YAML must work as written)
    cluster.kubectl("apply", "-n", namespace, "-f", SEED_TRAINER)
    # an update leaving the resources alone is not judged for node fit again, a resize is
    patch = ("patch", "trainer", "llama-7b-finetune", "-n", namespace, "--type=merge", "-p")
    cluster.kubectl(*patch, '{"spec": {"epochs": 11}}')
    with pytest.raises(KubectlError, match="no node of the cluster can hold one pod"):
        cluster.kubectl(*patch, '{"spec": {"resources": {"requests": {"cpu": "200"}}}}')


def test_a_model_source_the_initializer_cannot_read_is_refused(cluster: Cluster, namespace: str) -> None:
    """The schema's pattern lets a '--' in a Hub name by; the webhook reads it as the initializer does."""
    message = refusal(cluster, trainer(model={"source": "hf://acme/ll--ama@main", "cacheClaim": "models"}), namespace)
    assert "spec.model.source: model source 'hf://acme/ll--ama@main': 'acme/ll--ama' is not a Hub repository" in message


def test_a_priority_class_the_namespace_policy_lacks_is_refused(cluster: Cluster, namespace: str, policy: Any) -> None:
    name = policy(budgets={"spot": {"nvidia.com/gpu": 16}}, priorityClasses=[{"name": "high", "value": 100}])
    message = eventually(
        lambda: _refused_or_none(cluster, trainer(scheduling={"priorityClassName": "urgent"}), namespace),
        what="the policy to be seen by the quota controller's webhook",
    )
    assert 'admission webhook "validate-scheduling.trainer.operator.kubeflow.org" denied the request' in message
    assert f"QuotaPolicy '{name}', which governs namespace '{namespace}', has no priority class 'urgent'" in message
    assert "(it defines 'high')" in message
    cluster.apply(trainer(scheduling={"priorityClassName": "high"}), namespace)


def _refused_or_none(cluster: Cluster, manifest: dict[str, Any], namespace: str) -> str | None:
    try:
        cluster.apply(manifest, namespace)
    except KubectlError as err:
        return err.stderr
    cluster.kubectl("delete", "trainer", manifest["metadata"]["name"], "-n", namespace)
    return None


# -- the self-signed TLS path --------------------------------------------------------------------


PROFILE_CA = "trainer-operator-profile-webhook-ca"
SELF_SIGNED = {"TRAINEROP_WEBHOOK_TLS": "self-signed"}


def certificate_files(directory: Path) -> dict[str, str]:
    return {
        "TRAINEROP_WEBHOOK_CERT_FILE": str(directory / "tls.crt"),
        "TRAINEROP_WEBHOOK_KEY_FILE": str(directory / "tls.key"),
    }


def empty_ca(cluster: Cluster) -> None:
    """The profile controller's CA Secret as deploy/components/self-signed-tls creates it: empty."""
    cluster.kubectl("delete", "secret", PROFILE_CA, "-n", localdev.NAMESPACE, "--ignore-not-found")
    cluster.kubectl("create", "secret", "generic", PROFILE_CA, "-n", localdev.NAMESPACE)


@pytest.fixture
def self_signed_profile(cluster: Cluster, tmp_path: Path) -> Iterator[Path]:
    """The profile controller restarted with --webhook-tls self-signed (its certificate files in a
    fresh directory, its CA Secret empty); afterwards restarted as before, and its webhooks given
    the cluster's CA back."""
    certs = tmp_path / "webhook"
    empty_ca(cluster)
    localdev.restart("profile", SELF_SIGNED | certificate_files(certs))
    try:
        yield certs
    finally:
        localdev.restart("profile")
        configs = yaml.safe_dump_all(localdev.local_webhook("profile"))
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=configs)
        empty_ca(cluster)


def test_the_self_signed_path_fills_its_own_ca_issues_the_certificate_and_injects_the_ca(
    cluster: Cluster, namespace: str, self_signed_profile: Path
) -> None:
    secret = cluster.get("secret", PROFILE_CA, localdev.NAMESPACE)
    ca = base64.b64decode(secret["data"]["tls.crt"])
    assert ca.startswith(b"-----BEGIN CERTIFICATE-----")
    for kind in ("validatingwebhookconfiguration", "mutatingwebhookconfiguration"):
        for hook in cluster.get(kind, "trainer-operator-profile")["webhooks"]:
            assert base64.b64decode(hook["clientConfig"]["caBundle"]) == ca, (kind, hook["name"])
    # the serving certificate was issued by that CA
    served = x509.load_pem_x509_certificate((self_signed_profile / "tls.crt").read_bytes())
    served.verify_directly_issued_by(x509.load_pem_x509_certificate(ca))
    assert (self_signed_profile / "tls.crt").read_bytes() != (cluster_tool.RUN_DIR / "pki" / "ca.crt").read_bytes()
    # The API server now trusts only the operator's own CA for these webhooks: a refusal proves
    # that it reached the controller over TLS with the self-signed certificate.
    message = refusal(cluster, trainer(f"r-{uuid.uuid4().hex[:4]}", profile="missing"), namespace)
    assert "spec.profile: there is no TrainingProfile 'missing'" in message
    # A restart keeps the CA it filled in (the webhook configurations' caBundle stays valid).
    localdev.restart("profile", SELF_SIGNED | certificate_files(self_signed_profile))
    assert base64.b64decode(cluster.get("secret", PROFILE_CA, localdev.NAMESPACE)["data"]["tls.crt"]) == ca
    again = x509.load_pem_x509_certificate((self_signed_profile / "tls.crt").read_bytes())
    again.verify_directly_issued_by(x509.load_pem_x509_certificate(ca))

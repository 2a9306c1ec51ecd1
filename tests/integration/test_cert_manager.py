"""The webhooks' TLS from the real cert-manager (v1.21.2, built from its Go module by
testbed/certmanager.py and run as a local process against the test cluster): the Issuers and
Certificates of deploy/components/cert-manager are issued, cert-manager's CA injector fills the
caBundle of a webhook configuration carrying cert-manager.io/inject-ca-from, and the profile
controller serves its webhook with a certificate cert-manager issued, which the API server then
trusts (a refusal can only come back over that TLS)."""

import base64
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509

from testbed import certmanager, localdev
from testbed import cluster as cluster_tool
from tests.factories import trainer_manifest
from tests.harness import REPO, Cluster, KubectlError, eventually

SYSTEM = localdev.NAMESPACE
HEALTH_PORT = cluster_tool.PORT_BASE + 38
COMPONENT = REPO / "deploy" / "components" / "cert-manager" / "certificates.yaml"
LOCAL_CERT = "trainer-operator-profile-webhook-local"  # the same CA's certificate for 127.0.0.1


@pytest.fixture(scope="module")
def cert_manager(cluster: Cluster) -> Iterator[None]:
    try:
        binary = certmanager.binary()
        crds = certmanager.crd_files()
    except cluster_tool.ClusterError as err:
        pytest.fail(str(err))
    for crd in crds:
        cluster.kubectl("apply", "--server-side", "-f", str(crd))
    cluster.kubectl(
        "wait", "--for=condition=Established", "--timeout=60s", *[f"crd/{c}.cert-manager.io" for c in certmanager.CRDS]
    )
    run = localdev.state_dir()
    component = cluster_tool.Component(
        "cert-manager",
        [str(binary), f"--kubeconfig={cluster.kubeconfig}", f"--health-address=127.0.0.1:{HEALTH_PORT}"],
        lambda: cluster_tool.http_ok(f"http://127.0.0.1:{HEALTH_PORT}/readyz"),
        timeout=90,
    )
    cluster_tool.start(run, component)
    try:
        yield
    finally:
        cluster_tool.stop_processes(run, ["cert-manager"])
        for kind in ("certificates.cert-manager.io", "issuers.cert-manager.io"):
            cluster.kubectl("delete", kind, "--all", "-n", SYSTEM, "--ignore-not-found")
        secrets = [f"trainer-operator-{c}-webhook-tls" for c in ("trainer", "profile", "quota", "audit")]
        cluster.kubectl(
            "delete",
            "secret",
            "-n",
            SYSTEM,
            "--ignore-not-found",
            "trainer-operator-webhook-ca",
            f"{LOCAL_CERT}-tls",
            *secrets,
        )


def secret(cluster: Cluster, name: str) -> dict[str, bytes] | None:
    try:
        data = cluster.get("secret", name, SYSTEM)["data"]
    except KubectlError:
        return None
    return {k: base64.b64decode(v) for k, v in data.items()}


def test_the_component_s_certificates_are_issued_from_the_operator_s_ca(cluster: Cluster, cert_manager: None) -> None:
    cluster.kubectl("apply", "--server-side", "-f", str(COMPONENT))
    ca = eventually(lambda: secret(cluster, "trainer-operator-webhook-ca"), timeout=90, what="the CA issued")
    ca_cert = x509.load_pem_x509_certificate(ca["tls.crt"])
    assert ca_cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    for controller in ("trainer", "profile", "quota", "audit"):
        issued = eventually(
            partial(secret, cluster, f"trainer-operator-{controller}-webhook-tls"),
            timeout=90,
            what=f"the {controller} webhook's certificate",
        )
        cert = x509.load_pem_x509_certificate(issued["tls.crt"])
        cert.verify_directly_issued_by(ca_cert)
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        service = f"trainer-operator-{controller}-webhook.{SYSTEM}.svc"
        assert names.get_values_for_type(x509.DNSName) == [service, f"{service}.cluster.local"]
        assert issued["ca.crt"] == ca["tls.crt"]  # what the CA injector puts into caBundle


@pytest.fixture
def profile_on_cert_manager_tls(cluster: Cluster, cert_manager: None, tmp_path: Path) -> Iterator[None]:
    """The profile controller serving with a certificate cert-manager issued for 127.0.0.1, and its
    webhook configurations pointed at it with the inject-ca-from annotation and no caBundle."""
    cluster.kubectl("apply", "--server-side", "-f", str(COMPONENT))
    certificate = {
        "apiVersion": "cert-manager.io/v1",
        "kind": "Certificate",
        "metadata": {"name": LOCAL_CERT, "namespace": SYSTEM},
        "spec": {
            "secretName": f"{LOCAL_CERT}-tls",
            "ipAddresses": ["127.0.0.1"],
            "privateKey": {"algorithm": "ECDSA", "size": 256},
            "issuerRef": {"name": "trainer-operator-webhook-ca", "kind": "Issuer"},
        },
    }
    cluster.apply(certificate)
    issued = eventually(lambda: secret(cluster, f"{LOCAL_CERT}-tls"), timeout=90, what="the local certificate")
    (tmp_path / "tls.crt").write_bytes(issued["tls.crt"])
    (tmp_path / "tls.key").write_bytes(issued["tls.key"])
    configs = localdev.local_webhook("profile")
    for config in configs:
        config["metadata"]["annotations"] = {"cert-manager.io/inject-ca-from": f"{SYSTEM}/{LOCAL_CERT}"}
        for hook in config["webhooks"]:
            del hook["clientConfig"]["caBundle"]
    for config in configs:  # replaced whole, so no caBundle of before is left
        cluster.kubectl("delete", config["kind"].lower(), config["metadata"]["name"], "--ignore-not-found")
    cluster.kubectl("apply", "--server-side", "-f", "-", stdin=yaml.safe_dump_all(configs))
    localdev.restart(
        "profile",
        {
            "TRAINEROP_WEBHOOK_CERT_FILE": str(tmp_path / "tls.crt"),
            "TRAINEROP_WEBHOOK_KEY_FILE": str(tmp_path / "tls.key"),
        },
    )
    try:
        yield
    finally:
        localdev.restart("profile")
        restored = yaml.safe_dump_all(localdev.local_webhook("profile"))
        for config in configs:
            cluster.kubectl("delete", config["kind"].lower(), config["metadata"]["name"], "--ignore-not-found")
        cluster.kubectl("apply", "--server-side", "-f", "-", stdin=restored)
        cluster.kubectl("delete", "certificate", LOCAL_CERT, "-n", SYSTEM, "--ignore-not-found")


def test_the_ca_injector_fills_the_bundle_the_api_server_then_trusts(
    cluster: Cluster, namespace: str, profile_on_cert_manager_tls: None
) -> None:
    ca = secret(cluster, "trainer-operator-webhook-ca")
    assert ca is not None

    def injected() -> list[Any] | None:
        bundles = [
            base64.b64decode(hook["clientConfig"].get("caBundle", ""))
            for kind in ("validatingwebhookconfiguration", "mutatingwebhookconfiguration")
            for hook in cluster.get(kind, "trainer-operator-profile")["webhooks"]
        ]
        return bundles if all(b == ca["tls.crt"] for b in bundles) else None

    eventually(injected, timeout=60, what="cert-manager's CA injector to fill every caBundle")
    with pytest.raises(KubectlError) as refused:
        cluster.apply(trainer_manifest("needs-profile", profile="absent"), namespace)
    assert "spec.profile: there is no TrainingProfile 'absent'" in refused.value.stderr


def test_the_cert_manager_overlay_is_accepted_by_the_api_server(cluster: Cluster, cert_manager: None) -> None:
    out = cluster.kubectl(
        "apply",
        "--server-side",
        "--dry-run=server",
        "--force-conflicts",
        "-k",
        str(REPO / "deploy" / "overlays" / "cert-manager"),
    )
    # the overlay's Issuers and Certificates pass cert-manager's CRD schemas
    assert "certificate.cert-manager.io/trainer-operator-profile-webhook" in out

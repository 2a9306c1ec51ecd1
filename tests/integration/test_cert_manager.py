"""The webhooks' TLS from the real cert-manager (v1.21.2, built from its Go module by
testbed/certmanager.py and run as a local process against the test cluster): the Issuers and
Certificates of deploy/components/cert-manager are issued, cert-manager's CA injector fills the
caBundle of a webhook configuration carrying cert-manager.io/inject-ca-from, and the profile
controller serves its webhook with a certificate cert-manager issued, which the API server then
trusts (a refusal can only come back over that TLS); and deploy/components/metrics-tls: a
controller serves its metrics with the certificate issued for them, to Prometheus's certificate only."""

import base64
import os
import socket
import ssl
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
COMPONENT = REPO / "deploy" / "components" / "cert-manager" / "certificates.yaml"
METRICS_TLS = REPO / "deploy" / "components" / "metrics-tls"
METRICS_NAME = f"trainer-operator-metrics.{SYSTEM}.svc"  # the name Prometheus verifies them by
LOCAL_CERT = "trainer-operator-profile-webhook-local"  # the same CA's certificate for 127.0.0.1


@pytest.fixture(scope="module")
def cert_manager(cluster: Cluster) -> Iterator[None]:
    run = localdev.state_dir()
    try:
        certmanager.start(cluster.kubeconfig, run)
    except cluster_tool.ClusterError as err:
        pytest.fail(str(err))
    try:
        yield
    finally:
        certmanager.stop(run)
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


def https_get(port: int, path: str, context: ssl.SSLContext) -> tuple[int, str]:
    """GET ``path`` from 127.0.0.1:``port`` over TLS, the server verified as METRICS_NAME."""
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname=METRICS_NAME) as tls,
    ):
        tls.sendall(f"GET {path} HTTP/1.1\r\nHost: {METRICS_NAME}\r\nConnection: close\r\n\r\n".encode())
        data = b"".join(iter(lambda: tls.recv(65536), b""))
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body.decode()


def test_a_controller_serves_its_metrics_over_tls_to_prometheus_only(
    cluster: Cluster, cert_manager: None, tmp_path: Path
) -> None:
    cluster.kubectl("apply", "--server-side", "-f", str(COMPONENT))  # the operator's CA and its Issuer
    cluster.kubectl("apply", "--server-side", "-f", str(METRICS_TLS / "certificates.yaml"))
    issued = {
        name: eventually(partial(secret, cluster, f"trainer-operator-{name}-tls"), timeout=90, what=f"Secret of {name}")
        for name in ("profile-metrics", "metrics-scraper")
    }
    files = {}
    for name, data in issued.items():
        for key in ("tls.crt", "tls.key", "ca.crt"):
            files[name, key] = tmp_path / f"{name}-{key}"
            files[name, key].write_bytes(data[key])
    served = x509.load_pem_x509_certificate(issued["profile-metrics"]["tls.crt"])
    names = served.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert METRICS_NAME in names.get_values_for_type(x509.DNSName)
    localdev.restart(
        "profile",
        {
            "TRAINEROP_METRICS_CERT_FILE": str(files["profile-metrics", "tls.crt"]),
            "TRAINEROP_METRICS_KEY_FILE": str(files["profile-metrics", "tls.key"]),
            "TRAINEROP_METRICS_CLIENT_CA_FILE": str(files["profile-metrics", "ca.crt"]),
        },
    )
    try:
        port = localdev.metrics_port("profile")
        anonymous = ssl.create_default_context(cafile=str(files["profile-metrics", "ca.crt"]))
        prometheus = ssl.create_default_context(cafile=str(files["profile-metrics", "ca.crt"]))
        prometheus.load_cert_chain(files["metrics-scraper", "tls.crt"], files["metrics-scraper", "tls.key"])
        status, body = https_get(port, "/metrics", prometheus)
        assert status == 200
        assert "operator_up" in body
        assert https_get(port, "/metrics", anonymous)[0] == 403
        assert https_get(port, "/readyz", anonymous) == (200, "ready\n")  # the kubelet's probes
        assert not cluster_tool.http_ok(f"http://127.0.0.1:{port}/healthz")  # no plain HTTP
    finally:
        localdev.restart("profile")
        cluster.kubectl("delete", "-f", str(METRICS_TLS / "certificates.yaml"), "--ignore-not-found")
        secrets = [f"trainer-operator-{c}-metrics-tls" for c in localdev.CONTROLLERS]
        cluster.kubectl(
            "delete", "secret", "-n", SYSTEM, "--ignore-not-found", *secrets, "trainer-operator-metrics-scraper-tls"
        )


def test_the_metrics_tls_component_turns_probes_and_the_service_monitor_to_https(
    cluster: Cluster, cert_manager: None, tmp_path: Path
) -> None:
    """On the cert-manager overlay with the monitoring component: every controller's probes use
    HTTPS and its Secret is mounted, the ServiceMonitor scrapes over HTTPS with Prometheus's
    certificate; without monitoring (no ServiceMonitor CRD here), accepted by the API server."""
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    base = os.path.relpath(REPO / "deploy" / "overlays" / "cert-manager", overlay)
    components = [os.path.relpath(REPO / "deploy" / "components" / c, overlay) for c in ("monitoring", "metrics-tls")]
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({"resources": [base], "components": components}))
    objects = [o for o in yaml.safe_load_all(cluster.kubectl("kustomize", str(overlay))) if o]
    deployments = [o for o in objects if o["kind"] == "Deployment"]
    assert len(deployments) == 6  # every controller but kubeflow (not in this overlay)
    for deployment in deployments:
        pod = deployment["spec"]["template"]["spec"]
        controller = pod["containers"][0]
        assert controller["livenessProbe"]["httpGet"]["scheme"] == controller["readinessProbe"]["httpGet"]["scheme"]
        assert controller["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
        env = {e["name"]: e.get("value") for e in controller["env"]}
        assert env["TRAINEROP_METRICS_CERT_FILE"] == "/etc/trainer-operator/metrics/tls.crt"
        secrets = {v["name"]: v.get("secret", {}).get("secretName") for v in pod["volumes"]}
        assert secrets["metrics-tls"] == f"{deployment['metadata']['name']}-metrics-tls"
    (monitor,) = [o for o in objects if o["kind"] == "ServiceMonitor"]
    (endpoint,) = monitor["spec"]["endpoints"]
    assert (endpoint["scheme"], endpoint["tlsConfig"]["serverName"]) == ("https", METRICS_NAME)
    assert endpoint["tlsConfig"]["keySecret"]["name"] == "trainer-operator-metrics-scraper-tls"
    components.remove(components[0])
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({"resources": [base], "components": components}))
    cluster.kubectl("apply", "--server-side", "--dry-run=server", "--force-conflicts", "-k", str(overlay))

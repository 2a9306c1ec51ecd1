#!/usr/bin/env python3
"""Kueue for the integration tests: its manager built from its Go module, run as a local process.

    python -m testbed.kueue build   # build it once into the cache; print its path
    python -m testbed.kueue crds    # print the paths of its CRD YAMLs

The manager (`sigs.k8s.io/kueue/cmd/kueue`) is installed with `go install` from the module the Go
proxy serves, once per version, into ~/.cache/trainer-operator/kueue-<version>. It runs out of
the cluster against the admin kubeconfig, with a configuration (:func:`configuration`) that turns
off what needs a cluster-side deployment: leader election, its own certificate management (the
test bed's CA signs its webhook certificate for 127.0.0.1), the metrics server and the
visibility API server. Its webhooks cannot be turned off; the ones for Kueue's own kinds and for
PyTorchJobs are registered by URL (:func:`webhook_configurations`), those of job kinds it does not
manage here (pods, Jobs, ...) are not. It manages PyTorchJobs as its shipped configuration does
(which lists every Kubeflow kind), so that a job it admits itself is seen to be admitted once.
One quirk: without its own certificate management the manager reads a metrics certificate from
the fixed path /etc/kueue/metrics/certs even with metrics off, so :func:`start` writes the test
bed's certificate there (the test bed runs as root).
"""

from __future__ import annotations

import base64
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from testbed import cluster, gomodule

VERSION = "v0.17.0"
MODULE = "sigs.k8s.io/kueue"
BINARY = "kueue"
NAMESPACE = "kueue-system"
WEBHOOK_PORT = cluster.PORT_BASE + 40
HEALTH_PORT = cluster.PORT_BASE + 41
VISIBILITY_PORT = cluster.PORT_BASE + 42  # not served (VisibilityOnDemand off); kept off Kueue's default 8082
METRICS_CERTS = Path("/etc/kueue/metrics/certs")  # fixed in cmd/kueue/main.go
# Trainers as a kind Kueue's core admits through Workloads it does not make itself.
EXTERNAL_FRAMEWORK = "Trainer.v1alpha1.trainer.operator.kubeflow.org"
# A Kubeflow kind Kueue's own integration admits (its shipped configuration lists them all).
PYTORCHJOB_FRAMEWORK = "kubeflow.org/pytorchjob"


def go() -> str:
    return gomodule.go(f"Kueue {VERSION}", "python -m testbed.kueue build")


def binary() -> Path:
    """The Kueue manager, installed once into the cache (several minutes on 2 cores the first time)."""
    ldflags = f"-s -w -X {MODULE}/pkg/version.GitVersion={VERSION}"
    target = cluster.CACHE_ROOT / f"kueue-{VERSION}"
    return gomodule.installed(
        f"Kueue {VERSION}", "python -m testbed.kueue build", f"{MODULE}/cmd/kueue@{VERSION}", target, BINARY, ldflags
    )


def module_dir() -> Path:
    return gomodule.module_dir(go(), MODULE, VERSION)


def crd_files() -> list[Path]:
    """Kueue's CRDs (Workloads, ClusterQueues, LocalQueues, ResourceFlavors, Topologies, ...)."""
    files = sorted((module_dir() / "config" / "components" / "crd" / "bases").glob("kueue.x-k8s.io_*.yaml"))
    if not files:
        raise cluster.ClusterError(f"Kueue {VERSION}'s module has no CRDs under config/components/crd/bases")
    return files


def configuration(cert_dir: Path) -> dict[str, Any]:
    """The manager's Configuration (config.kueue.x-k8s.io/v1beta2) for a local process."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{HEALTH_PORT}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"host": "127.0.0.1", "port": WEBHOOK_PORT, "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "manageJobsWithoutQueueName": False,
        "featureGates": {"VisibilityOnDemand": False},
        "integrations": {
            "frameworks": ["batch/job", PYTORCHJOB_FRAMEWORK],
            "externalFrameworks": [EXTERNAL_FRAMEWORK],
        },
    }


def webhook_configurations(ca_bundle: bytes) -> list[dict[str, Any]]:
    """Kueue's webhook configurations for its own kinds (kueue.x-k8s.io) and for PyTorchJobs
    (their queue label suspends them until admitted), calling the local process by URL; the
    webhooks of other job kinds (pods, Jobs, JobSets, ...) are left out."""
    manifests = module_dir() / "config" / "components" / "webhook" / "manifests.yaml"
    ca = base64.b64encode(ca_bundle).decode()
    configs = []
    for config in (d for d in yaml.safe_load_all(manifests.read_text()) if d):
        hooks = [h for h in config["webhooks"] if all(_served(r) for r in h["rules"])]
        for hook in hooks:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{WEBHOOK_PORT}{path}", "caBundle": ca}
        config["metadata"]["name"] = f"kueue-{config['metadata']['name']}"
        configs.append(config | {"webhooks": hooks})
    return configs


def _served(rule: dict[str, Any]) -> bool:
    """A webhook rule of Kueue's own kinds or of PyTorchJobs (PYTORCHJOB_FRAMEWORK)."""
    groups, resources = list(rule["apiGroups"]), list(rule["resources"])
    return groups == ["kueue.x-k8s.io"] or (groups, resources) == (["kubeflow.org"], ["pytorchjobs"])


def serving_certificate(run: Path) -> Path:
    """The webhook's certificate for 127.0.0.1 from the local cluster's CA, as the manager reads
    it (``tls.crt``/``tls.key`` in a directory; also the metrics certificate it insists on)."""
    pki = cluster.RUN_DIR / "pki"
    if not (pki / "kueue-webhook.crt").exists():
        cluster.issue_certificate(pki, "kueue-webhook", "kueue-webhook", None, ["127.0.0.1"])
    cert_dir = run / "kueue" / "certs"
    for directory in (cert_dir, METRICS_CERTS):
        try:
            directory.mkdir(parents=True, exist_ok=True)
            (directory / "tls.crt").write_bytes((pki / "kueue-webhook.crt").read_bytes())
            (directory / "tls.key").write_bytes((pki / "kueue-webhook.key").read_bytes())
            (directory / "tls.key").chmod(0o600)
        except PermissionError as err:
            raise cluster.ClusterError(
                f"Kueue's manager reads a certificate from {directory} (a path fixed in its code) and it cannot be "
                f"written here ({err}): run the tests as root, as CI does, or create {directory} writable by you"
            ) from err
    return cert_dir


def start(run: Path, kubectl: Callable[..., str]) -> None:
    """Kueue's CRDs, namespace and webhooks in the local cluster, and its manager as a local
    process (``kubectl(*args, stdin=...)`` runs kubectl as the cluster's admin)."""
    built = binary()
    crds = crd_files()
    for crd in crds:
        kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crd))
    kubectl(
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        *[f"crd/{c.stem.split('_', 1)[1]}.kueue.x-k8s.io" for c in crds],
    )
    kubectl(
        "apply",
        "-f",
        "-",
        stdin=yaml.safe_dump({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}),
    )
    config = run / "kueue" / "config.yaml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(yaml.safe_dump(configuration(serving_certificate(run))))
    argv = [
        str(built),
        f"--config={config}",
        f"--kubeconfig={run / 'admin.kubeconfig'}",
        f"--visibility-server-port={VISIBILITY_PORT}",
    ]
    ready = f"http://127.0.0.1:{HEALTH_PORT}/readyz"
    cluster.start(run, cluster.Component("kueue", argv, lambda: cluster.http_ok(ready), timeout=90))
    ca = (cluster.RUN_DIR / "pki" / "ca.crt").read_bytes()
    kubectl(
        "apply", "--server-side", "--force-conflicts", "-f", "-", stdin=yaml.safe_dump_all(webhook_configurations(ca))
    )


def stop(run: Path, kubectl: Callable[..., str]) -> None:
    """The manager stopped and its webhooks unregistered (its CRDs and objects stay)."""
    cluster.stop_processes(run, ["kueue"])
    for config in webhook_configurations(b""):
        kubectl("delete", config["kind"].lower(), config["metadata"]["name"], "--ignore-not-found")


def main(argv: list[str] | None = None) -> int:
    description = __doc__.splitlines()[0] if __doc__ else ""
    return gomodule.main(argv, description, "the Kueue manager", binary, crd_files)


if __name__ == "__main__":
    sys.exit(main())

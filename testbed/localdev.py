#!/usr/bin/env python3
"""Install the operator's CRDs and RBAC and run the seven controllers as local processes.

    python -m testbed.localdev install   # kubectl apply --server-side -k deploy/overlays/local
    python -m testbed.localdev start     # start the controllers (each as its own ServiceAccount)
    python -m testbed.localdev status
    python -m testbed.localdev stop

Until the controllers run as pods on a real node, this is how the demo and the integration
tests run them. Each process authenticates with a token of its own ServiceAccount from
deploy/ (TokenRequest API), so every request it makes is checked by the real RBAC rules.
The cluster is the one in $KUBECONFIG, else the local one from testbed/cluster.py.
"""

from __future__ import annotations

import argparse
import base64
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from testbed import cluster, registry

REPO = Path(__file__).resolve().parent.parent
NAMESPACE = "trainer-operator-system"
CONTROLLERS = ("trainer", "profile", "checkpoint", "quota", "audit", "kubeflow", "verify")
GATES = ("profile", "quota", "checkpoint", "audit", "verify")
# Each controller's metrics port: the first five from PORT_BASE + 20, the kubeflow controller's at
# + 29 (+ 25 to + 28 were taken before it came), the verify controller's at + 43.
METRICS_PORTS = {c: cluster.PORT_BASE + 20 + i for i, c in enumerate(CONTROLLERS[:5])} | {
    "kubeflow": cluster.PORT_BASE + 29,
    "verify": cluster.PORT_BASE + 43,
}
# The controllers that serve admission webhooks, and the port each listens on here.
WEBHOOK_PORTS = {
    "audit": cluster.PORT_BASE + 25,  # after the five metrics ports
    "trainer": cluster.PORT_BASE + 35,
    "profile": cluster.PORT_BASE + 36,
    "quota": cluster.PORT_BASE + 37,
}
AUDIT_WEBHOOK_PORT = WEBHOOK_PORTS["audit"]
WEBHOOK = REPO / "deploy" / "controllers" / "audit" / "webhook.yaml"


def admin_kubeconfig() -> Path:
    env = os.environ.get("KUBECONFIG")
    return Path(env) if env else cluster.RUN_DIR / "admin.kubeconfig"


def state_dir() -> Path:
    path = cluster.RUN_DIR / "controllers"
    (path / "logs").mkdir(parents=True, exist_ok=True)
    (path / "pids").mkdir(parents=True, exist_ok=True)
    return path


def kubectl(*args: str, stdin: str | None = None) -> str:
    result = subprocess.run(
        [str(cluster.bin_dir() / "kubectl"), f"--kubeconfig={admin_kubeconfig()}", *args],
        input=stdin,
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise cluster.ClusterError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout


# What earlier versions installed and this one does not (apply never removes): the cluster-wide
# Secret bindings and the shared webhook CA's Role (docs/deploy.md, Upgrading).
REMOVED = (
    ("clusterrolebinding", "trainer-operator-profile-secret-check", "trainer-operator-checkpoint-credentials"),
    ("-n", NAMESPACE, "role,rolebinding", "trainer-operator-webhook-ca"),
)


def crds_established() -> None:
    """Wait until the API server serves every CRD of the operator's."""
    part_of = "app.kubernetes.io/part-of=trainer-operator"
    kubectl("wait", "--for=condition=Established", "crd", "-l", part_of, "--timeout=60s")


def install() -> None:
    cluster.say("installing CRDs, namespace, ServiceAccounts and RBAC (deploy/overlays/local)")
    # CRDs first: the overlay also holds objects of a CRD it installs (kopf's peering objects).
    kubectl("apply", "--server-side", "--force-conflicts", "-k", str(REPO / "deploy" / "base"))
    crds_established()
    kubectl("apply", "--server-side", "--force-conflicts", "-k", str(REPO / "deploy" / "overlays" / "local"))
    crds_established()  # Kubeflow v1's jobs' CRDs come with the overlay: served before its controller looks
    for removed in REMOVED:  # a cluster kept from an earlier version (docs/deploy.md, Upgrading)
        kubectl("delete", "--ignore-not-found", *removed)
    register_webhooks()


def register_webhooks() -> None:
    """Every controller's admission webhooks, calling its local process."""
    configs = [config for c in WEBHOOK_PORTS for config in local_webhook(c)]
    kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=yaml.safe_dump_all(configs))


def webhook_certificate() -> tuple[Path, Path]:
    """The webhooks' serving certificate for 127.0.0.1, signed by the local cluster's CA."""
    pki = cluster.RUN_DIR / "pki"
    cert = pki / "audit-webhook.crt"
    if not cert.exists():
        cluster.issue_certificate(pki, "audit-webhook", "trainer-operator-audit-webhook", None, ["127.0.0.1"])
    return cert, pki / "audit-webhook.key"


def webhook_configurations(controller: str) -> list[dict[str, Any]]:
    """deploy/'s webhook configurations of one controller, as written."""
    path = REPO / "deploy" / "controllers" / controller / "webhook.yaml"
    return [d for d in yaml.safe_load_all(path.read_text()) if d and d["kind"].endswith("WebhookConfiguration")]


def local_webhook(controller: str = "audit") -> list[dict[str, Any]]:
    """deploy/'s webhook configurations of ``controller``, calling its local process by URL with
    the local cluster's CA instead of a Service with cert-manager's."""
    webhook_certificate()
    ca = base64.b64encode((cluster.RUN_DIR / "pki" / "ca.crt").read_bytes()).decode()
    configs = webhook_configurations(controller)
    for config in configs:
        config["metadata"].pop("annotations", None)  # no cert-manager here: the CA bundle is given
        for hook in config["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{WEBHOOK_PORTS[controller]}{path}", "caBundle": ca}
    return configs


def service_account_kubeconfig(controller: str) -> Path:
    """A kubeconfig that authenticates as the controller's ServiceAccount."""
    admin = yaml.safe_load(admin_kubeconfig().read_text())
    context = next(c for c in admin["contexts"] if c["name"] == admin["current-context"])["context"]
    server = next(c for c in admin["clusters"] if c["name"] == context["cluster"])["cluster"]
    token = kubectl("create", "token", f"trainer-operator-{controller}", "-n", NAMESPACE, "--duration=24h").strip()
    user = f"system:serviceaccount:{NAMESPACE}:trainer-operator-{controller}"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "target", "cluster": server}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "target", "user": user, "namespace": NAMESPACE}}],
        "current-context": "sa",
    }
    path = state_dir() / f"{controller}.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def metrics_port(controller: str) -> int:
    return METRICS_PORTS[controller]


def executable(controller: str) -> str:
    """The console script installed next to this interpreter (a venv or tox env)."""
    candidate = Path(sys.executable).parent / f"trainerop-{controller}"
    if not candidate.exists():
        raise cluster.ClusterError(
            f"{candidate} is missing: install the workspace first (hack/dev-env.sh, or run inside tox)"
        )
    return str(candidate)


def ready_check(port: int) -> Callable[[], bool]:
    """/readyz: the controller watches the API server (and the audit controller serves its webhook).
    Over plain HTTP, else over https (a controller started with --metrics-cert-file: whatever env
    it was started with, which a restart of another controller does not know) unverified, as the
    kubelet's probes are."""
    url = f"127.0.0.1:{port}/readyz"
    return lambda: cluster.http_ok(f"http://{url}") or cluster.http_ok(f"https://{url}")


def start(gates: tuple[str, ...] = GATES, extra_env: dict[str, str] | None = None) -> dict[str, int]:
    """Start every controller that is not running; returns controller -> metrics port."""
    run = state_dir()
    ports = {}
    for controller in CONTROLLERS:
        port = metrics_port(controller)
        ports[controller] = port
        env = {
            **os.environ,
            "KUBECONFIG": str(service_account_kubeconfig(controller)),
            "TRAINEROP_METRICS_ADDRESS": "127.0.0.1",
            "TRAINEROP_METRICS_PORT": str(port),
            "TRAINEROP_RESYNC_SECONDS": "60",
            **(extra_env or {}),
        }
        if controller == "trainer":
            env["TRAINEROP_GATES"] = ",".join(gates)
        if controller == "audit":
            env.setdefault("TRAINEROP_SEAL_SECONDS", "5")  # tests see their records sealed soon
        if controller == "verify":  # the local registry, where the real node pulls docker.io's images
            env.setdefault("TRAINEROP_REGISTRY_MIRRORS", registry_mirrors())
            env.setdefault("TRAINEROP_REGISTRY_CA_FILE", str(cluster.RUN_DIR / "pki" / "ca.crt"))
        if controller in WEBHOOK_PORTS:
            cert, key = webhook_certificate()
            env.setdefault("TRAINEROP_WEBHOOK_ADDRESS", "127.0.0.1")
            env.setdefault("TRAINEROP_WEBHOOK_PORT", str(WEBHOOK_PORTS[controller]))
            env.setdefault("TRAINEROP_WEBHOOK_CERT_FILE", str(cert))
            env.setdefault("TRAINEROP_WEBHOOK_KEY_FILE", str(key))
            # Only the API server's reviews are believed (its client certificate: testbed/cluster.py).
            env.setdefault(
                "TRAINEROP_WEBHOOK_CLIENT_CA_FILE", str(cluster.RUN_DIR / "pki" / f"{cluster.WEBHOOK_CLIENT_CA}.crt")
            )
        comp = cluster.Component(f"controller-{controller}", [executable(controller)], ready_check(port), timeout=60)
        cluster.start(run, comp, env=env)
    return ports


def registry_mirrors() -> str:
    """--registry-mirrors of the verify controller: where the local registry keeps each upstream
    it mirrors (testbed/registry.py), as the real node's containerd reads it."""
    return ",".join(f"{upstream}={registry.address()}/{upstream}" for upstream in registry.MIRRORED)


def restart(controller: str, extra_env: dict[str, str] | None = None) -> None:
    """Restart one controller (the others keep running), e.g. with other settings."""
    cluster.stop_processes(state_dir(), [f"controller-{controller}"])
    start(extra_env=extra_env)


def stop() -> None:
    for name in cluster.stop_processes(state_dir(), [f"controller-{c}" for c in CONTROLLERS]):
        cluster.say(f"stopped {name}")


def status() -> int:
    run = state_dir()
    healthy = True
    for controller in CONTROLLERS:
        pid = cluster.running_pid(run, f"controller-{controller}")
        ok = pid is not None and cluster.http_ok(f"http://127.0.0.1:{metrics_port(controller)}/readyz")
        healthy &= ok
        print(
            f"{controller:12} pid={pid or '-':<8} metrics=http://127.0.0.1:{metrics_port(controller)}/metrics "
            f"{'ready' if ok else 'NOT READY'}  log={run / 'logs' / f'controller-{controller}.log'}"
        )
    return 0 if healthy else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("command", choices=["install", "start", "status", "stop"])
    args = parser.parse_args(argv)
    t0 = time.monotonic()
    try:
        if args.command == "install":
            install()
        elif args.command == "start":
            ports = start()
            cluster.say(f"controllers ready in {time.monotonic() - t0:.1f}s (metrics ports {sorted(ports.values())})")
        elif args.command == "stop":
            stop()
        else:
            return status()
    except cluster.ClusterError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

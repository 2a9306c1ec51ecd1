#!/usr/bin/env python3
"""Deploy the operator in the cluster from deploy/overlays/dev: the five controllers as pods
running the image built from deploy/Dockerfile.

    python hack/deploy.py up       # local cluster with the real node: build + import the image too
    python hack/deploy.py status
    python hack/deploy.py down     # the Deployments and the webhook go; CRDs, RBAC and Trainers stay

On the local cluster (hack/cluster.py + hack/node.py, root) the image is built and imported into
real-0's containerd (hack/images.py), and the operator's namespace gets a default toleration for
the real node (the only node that runs real containers). On another cluster (kind), build and
load the image first (`docker build -f deploy/Dockerfile -t trainer-operator:dev .` and
`kind load docker-image trainer-operator:dev`); `up` then applies the same overlay.

The audit webhook's serving certificate: with cert-manager (issue 10) it comes from a Certificate;
until then `up` issues one from the local cluster's CA, stores it in the Secret the Deployment
mounts, and puts the CA into the webhook configuration (on another cluster, give
--webhook-ca-dir with the ca.crt/ca.key that should sign it, or leave the webhook without a
serving certificate: failurePolicy Ignore, users' actions are then not recorded).
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hack import cluster, images, localdev, node

NAMESPACE = localdev.NAMESPACE
DEPLOYMENTS = tuple(f"trainer-operator-{c}" for c in localdev.CONTROLLERS)
WEBHOOK_SERVICE = "trainer-operator-audit-webhook"
WEBHOOK_SECRET = "trainer-operator-audit-webhook-tls"


def local_cluster() -> bool:
    return localdev.admin_kubeconfig() == cluster.RUN_DIR / "admin.kubeconfig"


def webhook_secret(pki: Path) -> dict[str, Any]:
    """The webhook's serving certificate for its Service's DNS names, signed by the CA in ``pki``."""
    names = [f"{WEBHOOK_SERVICE}.{NAMESPACE}.svc", f"{WEBHOOK_SERVICE}.{NAMESPACE}.svc.cluster.local"]
    if not (pki / "audit-webhook-incluster.crt").exists():
        cluster.issue_certificate(pki, "audit-webhook-incluster", names[0], None, names)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {"name": WEBHOOK_SECRET, "namespace": NAMESPACE},
        "data": {
            "tls.crt": base64.b64encode((pki / "audit-webhook-incluster.crt").read_bytes()).decode(),
            "tls.key": base64.b64encode((pki / "audit-webhook-incluster.key").read_bytes()).decode(),
        },
    }


def webhook_configuration(ca: bytes) -> dict[str, Any]:
    """deploy/'s webhook configuration (the Service) with ``ca`` as its caBundle."""
    config = next(
        d for d in yaml.safe_load_all(localdev.WEBHOOK.read_text()) if d["kind"] == "ValidatingWebhookConfiguration"
    )
    config["metadata"].pop("annotations", None)  # cert-manager's CA injection: not used here
    for hook in config["webhooks"]:
        hook["clientConfig"]["caBundle"] = base64.b64encode(ca).decode()
    return dict(config)


def up(args: argparse.Namespace) -> int:
    t0 = time.monotonic()
    kubectl = localdev.kubectl
    if local_cluster():
        if not node.node_ready(localdev.admin_kubeconfig()):
            raise cluster.ClusterError("the real node is not Ready: run `hack/node.py up` (as root) first")
        images.load("controllers", node.node_dir())
    cluster.say("installing CRDs and the operator's namespace (deploy/base)")
    kubectl("apply", "--server-side", "--force-conflicts", "-k", str(localdev.REPO / "deploy" / "base"))
    kubectl("wait", "--for=condition=Established", "crd", "-l", "app.kubernetes.io/part-of=trainer-operator")
    if local_cluster():
        tolerations = [f"{k}={v}" for k, v in node.NODE_TOLERATIONS.items()]
        kubectl("annotate", "--overwrite", "namespace", NAMESPACE, *tolerations)
    pki = Path(args.webhook_ca_dir) if args.webhook_ca_dir else (cluster.RUN_DIR / "pki" if local_cluster() else None)
    if pki is not None:
        kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=json.dumps(webhook_secret(pki)))
    existing = kubectl("get", "deployments", "-n", NAMESPACE, "-o", "name").split()
    cluster.say("applying deploy/overlays/dev: the five controllers' Deployments, RBAC, webhook")
    kubectl("apply", "--server-side", "--force-conflicts", "-k", str(localdev.REPO / "deploy" / "overlays" / "dev"))
    if pki is not None:
        config = webhook_configuration((pki / "ca.crt").read_bytes())
        kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=json.dumps(config))
    # Pods of an earlier build of the same tag would keep running: roll the Deployments that were there.
    earlier = [name for name in DEPLOYMENTS if f"deployment.apps/{name}" in existing]
    if earlier:
        kubectl("rollout", "restart", "deployment", "-n", NAMESPACE, *earlier)
    for name in DEPLOYMENTS:
        cluster.say(f"waiting for {name} to be available")
        kubectl("rollout", "status", "deployment", name, "-n", NAMESPACE, f"--timeout={args.timeout}s")
    cluster.say(f"the operator runs in the cluster ({time.monotonic() - t0:.0f}s)")
    print(kubectl("get", "pods", "-n", NAMESPACE, "-o", "wide"))
    return 0


def down(_: argparse.Namespace) -> int:
    kubectl = localdev.kubectl
    # Foreground: the command returns once the controllers' pods are gone too.
    kubectl("delete", "deployment", "-n", NAMESPACE, "--ignore-not-found", "--cascade=foreground", *DEPLOYMENTS)
    kubectl("delete", "validatingwebhookconfiguration", "trainer-operator-audit", "--ignore-not-found")
    cluster.say("the controllers' Deployments and the audit webhook are gone")
    return 0


def status(_: argparse.Namespace) -> int:
    print(localdev.kubectl("get", "deployments,pods", "-n", NAMESPACE, "-o", "wide"))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    deploy = commands.add_parser("up")
    deploy.add_argument("--timeout", type=int, default=180, help="seconds to wait for each Deployment")
    deploy.add_argument("--webhook-ca-dir", help="a directory with ca.crt and ca.key to sign the webhook's certificate")
    deploy.set_defaults(fn=up)
    commands.add_parser("down").set_defaults(fn=down)
    commands.add_parser("status").set_defaults(fn=status)
    args = parser.parse_args(argv)
    try:
        return int(args.fn(args))
    except cluster.ClusterError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

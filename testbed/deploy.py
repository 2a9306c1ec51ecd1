#!/usr/bin/env python3
"""Deploy the operator in the cluster from deploy/overlays/dev: the controllers as pods
running the image built from deploy/Dockerfile.

    python -m testbed.deploy up       # local cluster with the real node: build + import the image too
    python -m testbed.deploy up --tls cert-manager   # deploy/overlays/cert-manager (cert-manager installed)
    python -m testbed.deploy status
    python -m testbed.deploy down     # the Deployments and webhooks go; CRDs, RBAC and Trainers stay

On the local cluster (testbed/cluster.py + testbed/node.py, root) the image is built and imported into
real-0's containerd (testbed/images.py), and the operator's namespace gets a default toleration for
the real node (the only node that runs real containers). On another cluster (kind), build and
load the image first (`docker build -f deploy/Dockerfile -t trainer-operator:dev .` and
`kind load docker-image trainer-operator:dev`); `up` then applies the same overlay.

The webhooks' serving certificates: deploy/overlays/dev has each controller issue its own from
the operator's CA (deploy/components/self-signed-tls); `--tls cert-manager` applies
deploy/overlays/cert-manager instead, whose Certificates cert-manager (installed beforehand) issues.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from testbed import cluster, containerd, images, localdev, node

NAMESPACE = localdev.NAMESPACE
DEPLOYMENTS = tuple(f"trainer-operator-{c}" for c in localdev.CONTROLLERS)
OVERLAYS = {"self-signed": "dev", "cert-manager": "cert-manager"}
WEBHOOK_CONFIGURATIONS = {
    "validatingwebhookconfiguration": [f"trainer-operator-{c}" for c in localdev.WEBHOOK_PORTS],
    "mutatingwebhookconfiguration": ["trainer-operator-profile"],
}


def local_cluster() -> bool:
    return localdev.admin_kubeconfig() == cluster.RUN_DIR / "admin.kubeconfig"


def up(args: argparse.Namespace) -> int:
    t0 = time.monotonic()
    kubectl = localdev.kubectl
    if local_cluster():
        if not node.node_ready(localdev.admin_kubeconfig()):
            raise cluster.ClusterError("the real node is not Ready: run `python -m testbed.node up` (as root) first")
        images.load("controllers", containerd.node_dir())
    cluster.say("installing CRDs and the operator's namespace (deploy/base)")
    kubectl("apply", "--server-side", "--force-conflicts", "-k", str(localdev.REPO / "deploy" / "base"))
    kubectl("wait", "--for=condition=Established", "crd", "-l", "app.kubernetes.io/part-of=trainer-operator")
    if local_cluster():
        tolerations = [f"{k}={v}" for k, v in node.NODE_TOLERATIONS.items()]
        kubectl("annotate", "--overwrite", "namespace", NAMESPACE, *tolerations)
    overlay = OVERLAYS[args.tls]
    if args.tls == "cert-manager" and not kubectl("get", "crd", "--ignore-not-found", "certificates.cert-manager.io"):
        raise cluster.ClusterError(
            "cert-manager is not installed in the cluster (no CRD certificates.cert-manager.io): install it first, "
            "or deploy with --tls self-signed"
        )
    existing = kubectl("get", "deployments", "-n", NAMESPACE, "-o", "name").split()
    cluster.say(f"applying deploy/overlays/{overlay}: the controllers' Deployments, RBAC, webhooks")
    kubectl("apply", "--server-side", "--force-conflicts", "-k", str(localdev.REPO / "deploy" / "overlays" / overlay))
    # Pods of an earlier build of the same tag would keep running: roll the Deployments that were there.
    earlier = [name for name in DEPLOYMENTS if f"deployment.apps/{name}" in existing]
    if local_cluster():
        read_the_local_registry()
        earlier = sorted({*earlier, VERIFY})  # it reads its registries when it starts
    if earlier:
        kubectl("rollout", "restart", "deployment", "-n", NAMESPACE, *earlier)
    for name in DEPLOYMENTS:
        cluster.say(f"waiting for {name} to be available")
        kubectl("rollout", "status", "deployment", name, "-n", NAMESPACE, f"--timeout={args.timeout}s")
    cluster.say(f"the operator runs in the cluster ({time.monotonic() - t0:.0f}s)")
    print(kubectl("get", "pods", "-n", NAMESPACE, "-o", "wide"))
    return 0


VERIFY = "trainer-operator-verify"


def read_the_local_registry() -> None:
    """The verify controller reads the registries where the real node pulls: the local registry
    as the mirror of docker.io and registry.k8s.io, trusted through the test bed's CA (its
    ConfigMap, as a platform team edits it: docs/image-verification.md)."""
    data = {"mirrors": localdev.registry_mirrors(), "ca.crt": (cluster.RUN_DIR / "pki" / "ca.crt").read_text()}
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{VERIFY}-registries"}, "data": data}
    localdev.kubectl(
        "apply",
        "-n",
        NAMESPACE,
        "--server-side",
        "--force-conflicts",
        "--field-manager=testbed",
        "-f",
        "-",
        stdin=json.dumps(config_map),
    )


def down(_: argparse.Namespace) -> int:
    kubectl = localdev.kubectl
    # Foreground: the command returns once the controllers' pods are gone too.
    kubectl("delete", "deployment", "-n", NAMESPACE, "--ignore-not-found", "--cascade=foreground", *DEPLOYMENTS)
    for kind, names in WEBHOOK_CONFIGURATIONS.items():
        kubectl("delete", kind, "--ignore-not-found", *names)
    cluster.say("the controllers' Deployments and webhooks are gone")
    return 0


def status(_: argparse.Namespace) -> int:
    print(localdev.kubectl("get", "deployments,pods", "-n", NAMESPACE, "-o", "wide"))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    deploy = commands.add_parser("up")
    deploy.add_argument("--timeout", type=int, default=180, help="seconds to wait for each Deployment")
    deploy.add_argument(
        "--tls",
        choices=list(OVERLAYS),
        default="self-signed",
        help="where the webhooks' certificates come from (deploy/overlays/dev or deploy/overlays/cert-manager)",
    )
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

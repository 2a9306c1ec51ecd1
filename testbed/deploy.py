#!/usr/bin/env python3
"""Deploy the operator in the cluster from one of deploy/overlays: the controllers as pods
running the image built from deploy/Dockerfile.

    python -m testbed.deploy up       # local cluster with the real node: build + import the image too
    python -m testbed.deploy up --overlay production   # cert-manager, two replicas each (cert-manager installed)
    python -m testbed.deploy status
    python -m testbed.deploy down     # the Deployments and webhooks go; CRDs, RBAC and Trainers stay

On the local cluster (testbed/cluster.py + testbed/node.py, root) the image is built and imported into
real-0's containerd (testbed/images.py), and the operator's namespace gets a default toleration for
the real node (the only node that runs real containers). On another cluster (kind), build and
load the image first (`docker build -f deploy/Dockerfile -t trainer-operator:dev .` and
`kind load docker-image trainer-operator:dev`); `up` then applies the same overlay.

The overlays: dev (the default: every controller, the webhooks' certificates from the operator's
own CA, deploy/components/self-signed-tls), minimal (the trainer controller alone), cert-manager
and production (certificates from cert-manager, installed beforehand; production runs two replicas
of each). Deploying another overlay over one removes what only the earlier one installed (its
Deployments, RBAC, admission policies), so the cluster holds what the new overlay ships.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import yaml

from testbed import cluster, containerd, images, localdev, node
from trainerop_common.api import API_VERSION

NAMESPACE = localdev.NAMESPACE
DEPLOYMENTS = tuple(f"trainer-operator-{c}" for c in localdev.CONTROLLERS)
OVERLAYS = ("dev", "minimal", "cert-manager", "production")
CERT_MANAGER_OVERLAYS = ("cert-manager", "production")
# Kept when another overlay is deployed: what every overlay shares, and the Trainers' own data.
KEPT_KINDS = frozenset({"CustomResourceDefinition", "Namespace"})
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
    overlay = args.overlay
    if overlay in CERT_MANAGER_OVERLAYS and not kubectl(
        "get", "crd", "--ignore-not-found", "certificates.cert-manager.io"
    ):
        raise cluster.ClusterError(
            "cert-manager is not installed in the cluster (no CRD certificates.cert-manager.io): install it first, "
            "or deploy --overlay dev"
        )
    existing = kubectl("get", "deployments", "-n", NAMESPACE, "-o", "name").split()
    objects = rendered(overlay)
    remove_what_others_installed(overlay, objects)
    cluster.say(f"applying deploy/overlays/{overlay}: the controllers' Deployments, RBAC, webhooks")
    kubectl("apply", "--server-side", "--force-conflicts", "-k", str(localdev.REPO / "deploy" / "overlays" / overlay))
    deployments = [o["metadata"]["name"] for o in objects if o["kind"] == "Deployment"]
    # Pods of an earlier build of the same tag would keep running: roll the Deployments that were there.
    earlier = [name for name in deployments if f"deployment.apps/{name}" in existing]
    if local_cluster():
        read_the_local_registry()
        if VERIFY in deployments:
            earlier = sorted({*earlier, VERIFY})  # it reads its registries when it starts
    if earlier:
        kubectl("rollout", "restart", "deployment", "-n", NAMESPACE, *earlier)
    for name in deployments:
        cluster.say(f"waiting for {name} to be available")
        kubectl("rollout", "status", "deployment", name, "-n", NAMESPACE, f"--timeout={args.timeout}s")
    webhooks_answer(args.timeout)
    cluster.say(f"the operator runs in the cluster ({time.monotonic() - t0:.0f}s)")
    print(kubectl("get", "pods", "-n", NAMESPACE, "-o", "wide"))
    return 0


VERIFY = "trainer-operator-verify"
# A Trainer no one makes: its server-side dry run passes the schema and goes through every
# webhook on Trainers (scheduling set: the quota's is asked only then).
PROBE = {
    "apiVersion": API_VERSION,
    "kind": "Trainer",
    "metadata": {"name": "webhook-probe"},
    "spec": {"framework": "pytorch", "image": "busybox:1.36", "scheduling": {}},
}


def webhooks_answer(timeout: float) -> None:
    """Wait until the webhooks on Trainers answer (admitting the probe, or denying it): for a
    moment after a rollout the node's service proxy may still send a webhook Service's address to
    a pod that is gone (connection refused), and a user's first Trainer would fail."""
    cluster.say("waiting for the webhooks to answer")
    deadline = time.monotonic() + timeout
    while True:
        try:
            localdev.kubectl("create", "--dry-run=server", "-n", "default", "-f", "-", stdin=json.dumps(PROBE))
            return
        except cluster.ClusterError as err:
            if "admission webhook" in str(err) and "denied the request" in str(err):
                return  # answered
            if time.monotonic() > deadline:
                raise cluster.ClusterError(
                    f"the operator's webhooks do not answer a Trainer's dry run: {err}; see "
                    f"`kubectl get pods -n {NAMESPACE}` and the controllers' logs"
                ) from err
        time.sleep(1)  # the proxy's next sync


def rendered(overlay: str) -> list[dict[str, Any]]:
    """What deploy/overlays/``overlay`` installs (kubectl kustomize)."""
    out = localdev.kubectl("kustomize", str(localdev.REPO / "deploy" / "overlays" / overlay))
    return [doc for doc in yaml.safe_load_all(out) if doc]


Key = tuple[str, str, str]  # kind, namespace, name


def key_of(obj: dict[str, Any]) -> Key:
    meta = obj["metadata"]
    return str(obj["kind"]), str(meta.get("namespace") or ""), str(meta["name"])


def only_in_others(wanted: list[dict[str, Any]], others: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """What the other overlays install and ``wanted`` does not (CRDs and namespaces kept), once each."""
    keep = {key_of(o) for o in wanted}
    found: dict[Key, dict[str, Any]] = {}
    for objects in others:
        for obj in objects:
            if obj["kind"] not in KEPT_KINDS and key_of(obj) not in keep:
                found.setdefault(key_of(obj), obj)
    return list(found.values())


def remove_what_others_installed(overlay: str, wanted: list[dict[str, Any]]) -> None:
    """Delete what another overlay (or deploy/overlays/local, which the tests install for the
    controllers run as processes) put in the cluster and this one does not ship, if it is there."""
    others = [rendered(o) for o in (*OVERLAYS, "local") if o != overlay]
    stale = only_in_others(wanted, others)
    if not stale:
        return
    cluster.say(f"removing {len(stale)} objects other overlays install and this one does not (if present)")
    for obj in stale:
        try:
            localdev.kubectl("delete", "--ignore-not-found", "--wait=false", "-f", "-", stdin=json.dumps(obj))
        except cluster.ClusterError as err:
            if "no matches for kind" not in str(err):  # its CRD is not installed: nothing of it is either
                raise


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
        "--overlay",
        choices=OVERLAYS,
        default="dev",
        help="which of deploy/overlays (cert-manager and production need cert-manager in the cluster)",
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

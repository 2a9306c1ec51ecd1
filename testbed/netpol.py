#!/usr/bin/env python3
"""NetworkPolicies enforced on the real node: kube-router's network policy controller (the one k3s
ships), built from its Go module and run as a process of the node with only that part on.

    python -m testbed.netpol up     # build it once, start it on real-0
    python -m testbed.netpol down   # stop it and remove its rules

The node's bridge network (testbed/node.py) enforces no NetworkPolicy by itself; with this
running, traffic from and to the node's pods passes iptables chains and ipsets that kube-router
keeps equal to the cluster's NetworkPolicies, as on a cluster whose network plugin enforces them.
Like every implementation it lets the node's own addresses through (the kubelet's probes; here
also the API server, which runs on this machine), so what it shows is what pods may reach.

Why kube-router: kube-network-policies (the network SIG's, which kind ships) needs nftables'
queue expression, which this machine's kernel lacks (CONFIG_NFT_QUEUE); kube-router uses iptables
and ipset. The Go module proxy serves only v2.1.0, whose reported flaw is in its service proxy
(external IPs), which is not run here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from testbed import cluster, containerd, gomodule, localdev, node

VERSION = "v2.1.0"
MODULE = "github.com/cloudnativelabs/kube-router/v2"
NAME = "kube-router"
HEALTH_PORT = cluster.PORT_BASE + 47
INGRESS_CHAIN = "KUBE-ROUTER-FORWARD"  # its chain in the filter table, there once it has synced
CHAIN_PREFIXES = ("KUBE-ROUTER-", "KUBE-POD-FW-", "KUBE-NWPLCY-")  # its chains, all in the filter table
IPSET_PREFIXES = ("KUBE-SRC-", "KUBE-DST-")


def binary() -> Path:
    """kube-router, installed once into the cache (about a minute and a half on 2 cores)."""
    target = cluster.CACHE_ROOT / f"kube-router-{VERSION}"
    return gomodule.installed(
        f"kube-router {VERSION}", "python -m testbed.netpol up", f"{MODULE}/cmd/kube-router@{VERSION}", target, NAME
    )


def rbac() -> list[dict[str, Any]]:
    """What its network policy controller reads (its own daemonset manifests' ClusterRole, less
    what the router and the service proxy need), for the user of its client certificate."""
    meta = {"name": NAME, "labels": {"app.kubernetes.io/name": NAME}}
    reads = ["get", "list", "watch"]
    rules = [
        {"apiGroups": [""], "resources": ["namespaces", "pods", "services", "nodes", "endpoints"], "verbs": reads},
        {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": reads},
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": reads},
        {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
    ]
    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": meta, "rules": rules},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": NAME}],
        },
    ]


def test_bed_egress(namespace: str) -> dict[str, Any]:
    """What the operator's pods reach here that no shipped policy names (docs/deploy.md: "an API
    server or storage elsewhere needs its own policy"): the API server, on this machine's address
    and the test bed's port, and the test bed's services (S3, the registry) on a link-local address."""
    api_server = cluster.host_ip()
    if api_server is None:
        raise cluster.ClusterError("this machine has no global IPv4 address for the API server")
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "testbed-egress", "namespace": namespace, "labels": {"app.kubernetes.io/name": NAME}},
        "spec": {
            "podSelector": {"matchLabels": {"app.kubernetes.io/part-of": "trainer-operator"}},
            "policyTypes": ["Egress"],
            "egress": [
                {
                    "to": [{"ipBlock": {"cidr": f"{api_server}/32"}}],
                    "ports": [{"port": cluster.PORTS.apiserver, "protocol": "TCP"}],
                },
                {"to": [{"ipBlock": {"cidr": f"{cluster.SERVICES_ADDRESS}/32"}}]},
            ],
        },
    }


def argv(program: Path, kubeconfig: Path) -> list[str]:
    """Only the firewall: the node's bridge network routes, kube-proxy serves Services."""
    return [
        str(program),
        f"--kubeconfig={kubeconfig}",
        f"--hostname-override={node.NODE}",
        "--run-firewall=true",
        "--run-router=false",
        "--run-service-proxy=false",
        "--enable-cni=false",
        "--enable-pod-egress=false",
        f"--health-port={HEALTH_PORT}",
        f"--service-cluster-ip-range={cluster.SERVICE_CIDR}",
        "--v=1",
    ]


def _exists(namespace: str) -> bool:
    try:
        cluster.kubectl(cluster.RUN_DIR, cluster.bin_dir(), "get", "namespace", namespace)
    except cluster.ClusterError:
        return False
    return True


def enforcing() -> bool:
    """Its chains are in place and it answers its health check."""
    listed = subprocess.run(["iptables", "-t", "filter", "-S", INGRESS_CHAIN], capture_output=True)
    return listed.returncode == 0 and cluster.http_ok(f"http://127.0.0.1:{HEALTH_PORT}/healthz")


def up() -> int:
    if os.geteuid() != 0:
        raise cluster.ClusterError("iptables needs root: run `python -m testbed.netpol up` as root")
    program = binary()
    allowances = [test_bed_egress(localdev.NAMESPACE)] if _exists(localdev.NAMESPACE) else []
    cluster.kubectl(
        cluster.RUN_DIR, cluster.bin_dir(), "apply", "-f", "-", stdin=yaml.safe_dump_all(rbac() + allowances)
    )
    pki = cluster.RUN_DIR / "pki"
    if not (pki / f"{NAME}.crt").exists():
        cluster.issue_certificate(pki, NAME, NAME, None)
    run = containerd.node_dir()
    component = cluster.Component(NAME, argv(program, cluster.kubeconfig(cluster.RUN_DIR, NAME)), enforcing)
    cluster.start(run, component)
    cluster.say(f"NetworkPolicies are enforced on {node.NODE} (logs: {run / 'logs' / (NAME + '.log')})")
    if not allowances:
        cluster.say(f"deploy the operator, then run this again: {localdev.NAMESPACE} needs the test bed's egress")
    return 0


def down() -> int:
    """Stop it, then remove its chains and ipsets: it leaves them when stopped, and its own
    --cleanup-config (v2.1.0) crashes in the service proxy's part and would delete every IPVS service."""
    for name in cluster.stop_processes(containerd.node_dir(), [NAME]):
        cluster.say(f"stopped {name}")
    if os.geteuid() != 0:
        return 0
    saved = subprocess.run(["iptables-save", "-t", "filter"], capture_output=True, text=True, check=True).stdout
    if any(prefix in saved for prefix in CHAIN_PREFIXES):
        subprocess.run(["iptables-restore", "-w", "5"], input=without_its_chains(saved), text=True, check=True)
    listed = subprocess.run(["ipset", "list", "-n"], capture_output=True, text=True).stdout.split()
    for ipset in [name for name in listed if name.startswith(IPSET_PREFIXES)]:
        subprocess.run(["ipset", "destroy", ipset], capture_output=True)
    return 0


def without_its_chains(saved: str) -> str:
    """``iptables-save`` output of the filter table less kube-router's chains and every rule in or
    jumping to one of them."""

    def its(line: str) -> bool:
        words = line.split()
        if line.startswith(":"):
            return line[1:].startswith(CHAIN_PREFIXES)
        if line.startswith("-A"):
            target = words[words.index("-j") + 1] if "-j" in words else ""
            return words[1].startswith(CHAIN_PREFIXES) or target.startswith(CHAIN_PREFIXES)
        return False

    return "".join(line + "\n" for line in saved.splitlines() if not its(line))


def main(argv: list[str] | None = None) -> int:
    """``build``, and ``up``/``down``: the errors of those two on stderr."""

    def guarded(step: Callable[[], int]) -> Callable[[], int]:
        def run() -> int:
            try:
                return step()
            except cluster.ClusterError as err:
                print(f"error: {err}", file=sys.stderr)
                return 1

        return run

    more = {
        "up": gomodule.Command("build kube-router once and enforce NetworkPolicies on the node", guarded(up)),
        "down": gomodule.Command("stop it and remove its rules", guarded(down)),
    }
    return gomodule.main(argv, __doc__.split("\n\n")[0] if __doc__ else "", "kube-router", binary, lambda: [], more)


if __name__ == "__main__":
    sys.exit(main())

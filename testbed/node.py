#!/usr/bin/env python3
"""A real node in the local cluster: containerd, runc and the CNI plugins from Debian, the kubelet
from the binary cache, images built locally and pulled from the cluster's registry (testbed/registry.py,
docker.io's and registry.k8s.io's mirror).

    python -m testbed.node up       # after `python -m testbed.cluster up`; needs root
    python -m testbed.node status
    python -m testbed.node down     # before `python -m testbed.cluster down`

It needs the Debian packages containerd, runc, containernetworking-plugins, buildah,
busybox-static and debootstrap (testbed/packages.py lists them; up says which are missing,
hack/demo.sh installs them) and Go (the pause image is built from testbed/pause, CoreDNS from its
Go module, once, into the cache). CoreDNS serves cluster.local on 10.0.0.10 (added to lo), the
kubelet's clusterDNS, so headless Services resolve in pods. The node is named real-0, labelled and tainted
trainer.operator.kubeflow.org/real-node=true (NoSchedule), so only pods that tolerate the taint
run there; kwok's fake GPU nodes keep everything else. Its state and logs live in
~/.cache/trainer-operator/cluster/node; containerd's root (its images) in
~/.cache/trainer-operator/node-containerd, kept across clusters.

What this machine needed (found by trying): containerd's CRI with restrict_oom_score_adj (the
sandbox forbids a negative oom_score_adj, which containerd sets on every pod sandbox), shared mount
propagation on / for the kubelet, the kubelet's cgroupfs driver with failCgroupV1 false (cgroup v1).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from testbed import cluster, containerd, gomodule, packages, registry
from testbed import images as built

NODE = "real-0"
NODE_LABEL = "trainer.operator.kubeflow.org/real-node"
PACKAGES = packages.PACKAGES  # what `up` needs installed
CNI_DIR = Path("/usr/lib/cni")
POD_SUBNET = "10.88.0.0/16"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"  # the kubelet's default sandbox image name
BUSYBOX_IMAGE = "docker.io/library/busybox:1.36"  # the controllers' --init-image default
# What the tests' pods and the rendezvous wait (sh, nslookup, grep) use.
BUSYBOX_APPLETS = (
    "sh",
    "sleep",
    "echo",
    "cat",
    "ls",
    "env",
    "hostname",
    "nslookup",
    "grep",
    "true",
    "false",
    "wget",
    "seq",
)
KUBELET_HEALTH = 10248
DNS_IP = "10.0.0.10"  # the kubelet's clusterDNS, in the Service range; CoreDNS binds it on lo
COREDNS_VERSION = "v1.12.4"
COREDNS_HEALTH = cluster.PORT_BASE + 26
KUBE_PROXY_HEALTH = cluster.PORT_BASE + 27  # and + 28: its metrics


def containerd_config(run: Path) -> str:
    """containerd 1.6's configuration (version 2) for the kubelet's CRI."""
    return f"""version = 2
root = "{containerd.image_store() / "root"}"
state = "{run / "containerd" / "state"}"
[grpc]
  address = "{containerd.socket(run)}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  # This machine refuses a negative oom_score_adj, which containerd gives every pod sandbox:
  # keep scores at or above containerd's own.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_DIR}"
    conf_dir = "{run / "cni"}"
  # Images come from the local registry, the mirror of docker.io and registry.k8s.io (testbed/registry.py).
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{containerd.hosts_dir(run)}"
"""


def cni_config() -> dict[str, Any]:
    """A bridge with host-local addresses; pods reach the host through the bridge's gateway."""
    bridge = {
        "type": "bridge",
        "bridge": "trainerop0",
        "isGateway": True,
        "ipMasq": False,
        "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_SUBNET}]], "routes": [{"dst": "0.0.0.0/0"}]},
    }
    return {
        "cniVersion": "1.0.0",
        "name": "trainerop",
        "plugins": [bridge, {"type": "portmap", "capabilities": {"portMappings": True}}],
    }


def host_ip() -> str:
    """The machine's address: the node's (the kubelet refuses loopback)."""
    address = cluster.host_ip()
    if address is None:
        raise cluster.ClusterError("this machine has no global IPv4 address for the node (`ip -4 addr` shows none)")
    return address


# Pods in a namespace with this annotation tolerate real-0's taint (PodTolerationRestriction), so
# unmodified manifests such as examples/jax/trainer.yaml run on it, and not on the kwok nodes.
NODE_TOLERATIONS = {
    "scheduler.alpha.kubernetes.io/defaultTolerations": json.dumps(
        [{"key": NODE_LABEL, "operator": "Exists", "effect": "NoSchedule"}]
    )
}


def pod_on_the_node(name: str, container: dict[str, Any]) -> dict[str, Any]:
    """A bare Pod of one ``container`` that runs once on the real node (its image already there, unless the
    container names another pull policy)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {NODE_LABEL: "true"},
            "tolerations": [{"key": NODE_LABEL, "operator": "Exists", "effect": "NoSchedule"}],
            "automountServiceAccountToken": False,
            "containers": [{"imagePullPolicy": "Never", **container}],
        },
    }


def team_namespace(name: str) -> dict[str, Any]:
    """A namespace whose pods run on the real node."""
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "annotations": NODE_TOLERATIONS}}


def checkpoint_secret(namespace: str, name: str = "checkpoint-credentials") -> dict[str, Any]:
    """The local S3 server's credentials (its endpoint is on lo, which pods reach through the bridge)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "stringData": cluster.s3_credentials(),
    }


def print_namespace(args: argparse.Namespace) -> int:
    """The namespace and, in it, the checkpoint credentials Secret (for kubectl apply -f -)."""
    print(yaml.safe_dump_all([team_namespace(args.name), checkpoint_secret(args.name)]), end="")
    return 0


def kubelet_config(run: Path, ca: Path, address: str, tainted: bool = True) -> dict[str, Any]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "containerRuntimeEndpoint": f"unix://{containerd.socket(run)}",
        "cgroupDriver": "cgroupfs",  # containerd 1.6 cannot tell the kubelet its driver
        "failCgroupV1": False,
        "failSwapOn": False,
        "address": address,  # the API server reaches it there for logs and exec
        "port": 10250,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": KUBELET_HEALTH,
        "authentication": {
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(ca)},
            "anonymous": {"enabled": False},
        },
        "authorization": {"mode": "Webhook"},
        "clusterDNS": [DNS_IP],
        "clusterDomain": "cluster.local",
        "resolvConf": "/etc/resolv.conf",
        "runtimeRequestTimeout": "2m",
        # A development machine's disk is not the node's to guard: no disk-pressure evictions.
        "evictionHard": {"nodefs.available": "0%", "nodefs.inodesFree": "0%", "imagefs.available": "0%"},
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "localStorageCapacityIsolation": False,
        # Untainted (`up --untainted`), the node takes any pod, as a bare cluster's would.
        "registerWithTaints": [{"key": NODE_LABEL, "value": "true", "effect": "NoSchedule"}] if tainted else [],
    }


def pause_image(run: Path) -> str:
    """The sandbox image (PAUSE_IMAGE), built here (cached layers); its image ID."""
    context = run / "build" / "pause"
    shutil.rmtree(context, ignore_errors=True)
    (context / "rootfs").mkdir(parents=True)
    subprocess.run(
        ["go", "build", "-trimpath", "-ldflags", "-s -w", "-o", str(context / "rootfs" / "pause"), "."],
        cwd=Path(__file__).resolve().parent / "pause",
        env={**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"},
        check=True,
    )
    return built.build_image(PAUSE_IMAGE, context, 'FROM scratch\nCOPY rootfs/ /\nENTRYPOINT ["/pause"]\n')


def images(run: Path) -> None:
    """The sandbox (pause) image and a busybox image, built here (cached layers), pushed to the
    registry and pulled by containerd when they changed."""
    t0 = time.monotonic()
    built.publish(run, PAUSE_IMAGE, pause_image(run))
    context = run / "build" / "busybox"
    shutil.rmtree(context, ignore_errors=True)
    (context / "rootfs" / "bin").mkdir(parents=True)
    shutil.copy2(shutil.which("busybox") or "/bin/busybox", context / "rootfs" / "bin" / "busybox")
    for applet in BUSYBOX_APPLETS:
        (context / "rootfs" / "bin" / applet).symlink_to("busybox")
    image = built.build_image(BUSYBOX_IMAGE, context, 'FROM scratch\nCOPY rootfs/ /\nCMD ["/bin/sh"]\n')
    built.publish(run, BUSYBOX_IMAGE, image)
    cluster.say(f"images {PAUSE_IMAGE} and {BUSYBOX_IMAGE} in containerd ({time.monotonic() - t0:.1f}s)")


def corefile(kubeconfig: Path) -> str:
    """cluster.local from the API server (Services, headless Services' pods); nothing else: no upstream."""
    return f"""cluster.local:53 in-addr.arpa:53 ip6.arpa:53 {{
    bind {DNS_IP}
    errors
    health 127.0.0.1:{COREDNS_HEALTH}
    kubernetes cluster.local in-addr.arpa ip6.arpa {{
        kubeconfig {kubeconfig}
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }}
    cache 5
}}
"""


def coredns_binary() -> Path:
    """CoreDNS built from its Go module, once, into the cache (about 3 minutes on 2 cores)."""
    return gomodule.installed(
        f"CoreDNS {COREDNS_VERSION}",
        "python -m testbed.node up",
        f"github.com/coredns/coredns@{COREDNS_VERSION}",
        cluster.CACHE_ROOT / f"coredns-{COREDNS_VERSION}",
        "coredns",
    )


def dns(run: Path, admin: Path) -> None:
    """CoreDNS serving cluster.local on the clusterDNS address, which pods reach through the bridge."""
    on_lo = subprocess.run(["ip", "-4", "-o", "addr", "show", "dev", "lo"], capture_output=True, text=True).stdout
    if f" {DNS_IP}/" not in on_lo:
        subprocess.run(["ip", "addr", "add", f"{DNS_IP}/32", "dev", "lo"], check=True)
    (run / "Corefile").write_text(corefile(admin))
    coredns = cluster.Component(
        "coredns",
        [str(coredns_binary()), "-conf", str(run / "Corefile")],
        lambda: cluster.http_ok(f"http://127.0.0.1:{COREDNS_HEALTH}/health"),
        timeout=60,
    )
    cluster.start(run, coredns)


def kube_proxy_binary() -> Path:
    return kubernetes_binary("kube-proxy")


def kubernetes_binary(name: str) -> Path:
    """k8s.io/kubernetes/cmd/``name`` (kube-proxy for the node, kubeadm for kind's node image) of
    the kubelet's version, built once from the foundation's Go module (a copy of it: the extra
    go.sum lines must not change the key of the binary cache)."""
    kubelet = cluster.bin_dir() / "kubelet"
    target = cluster.CACHE_ROOT / name / cluster.bin_dir().parent.name
    return cluster.built_once(target / name, lambda: _build_kubernetes_binary(name, kubelet, target))


def _build_kubernetes_binary(name: str, kubelet: Path, target: Path) -> None:
    binary = target / name
    version = subprocess.run([str(kubelet), "--version"], capture_output=True, text=True, check=True).stdout.split()[-1]
    minor = version.split(".")[1]
    ldflags = "-s -w"
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        ldflags += f" -X {package}.gitVersion={version} -X {package}.gitMajor=1 -X {package}.gitMinor={minor}"
        ldflags += f" -X {package}.gitTreeState=clean -X {package}.buildDate=1970-01-01T00:00:00Z"
    cluster.say(f"building {name} {version} from the k8s.io/kubernetes module (once; a minute or more)")
    work = target.parent / "module"
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(cluster.REPO / "hack" / "k8s-tools", work, ignore=shutil.ignore_patterns("bin"))
    target.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["go", "build", "-trimpath", "-ldflags", ldflags, "-o", f"{binary}.tmp", f"k8s.io/kubernetes/cmd/{name}"],
        cwd=work,
        env={**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0"},
        check=True,
    )
    Path(f"{binary}.tmp").rename(binary)  # complete, or not there: a reader never runs half a binary
    shutil.rmtree(work, ignore_errors=True)


def kube_proxy(run: Path) -> None:
    """kube-proxy (iptables mode) on the node: the kubernetes Service leads pods that use their
    ServiceAccount (the training SDK's heartbeats and checkpoints, in-cluster controllers) to the
    API server, and this machine (the API server) reaches Services backed by pods (the audit
    webhook). A pod reaching a Service backed by a pod on the same bridge also needs the kernel's
    br_netfilter (bridge-nf-call-iptables); nothing here does that (training uses headless Services)."""
    pki = cluster.RUN_DIR / "pki"
    if not (pki / "kube-proxy.crt").exists():
        cluster.issue_certificate(pki, "kube-proxy", "system:kube-proxy", None)
    config = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "iptables",
        "clientConnection": {"kubeconfig": str(cluster.kubeconfig(cluster.RUN_DIR, "kube-proxy"))},
        "hostnameOverride": NODE,
        "clusterCIDR": POD_SUBNET,
        "bindAddress": "0.0.0.0",
        "healthzBindAddress": f"127.0.0.1:{KUBE_PROXY_HEALTH}",
        "metricsBindAddress": f"127.0.0.1:{KUBE_PROXY_HEALTH + 1}",
        # This machine's conntrack table is not ours to resize.
        "conntrack": {"maxPerCore": 0},
        "iptables": {"localhostNodePorts": False},
        "nodePortAddresses": ["primary"],
    }
    (run / "kube-proxy.yaml").write_text(yaml.safe_dump(config))
    proxy = cluster.Component(
        "kube-proxy",
        [str(kube_proxy_binary()), f"--config={run / 'kube-proxy.yaml'}"],
        lambda: cluster.http_ok(f"http://127.0.0.1:{KUBE_PROXY_HEALTH}/healthz"),
        timeout=60,
    )
    cluster.start(run, proxy)


def node_ready(kubeconfig: Path) -> bool:
    result = subprocess.run(
        [str(cluster.bin_dir() / "kubectl"), f"--kubeconfig={kubeconfig}", "get", "node", NODE, "-o", "json"],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        return False
    conditions = json.loads(result.stdout).get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def up(args: argparse.Namespace) -> int:
    if os.geteuid() != 0:
        raise cluster.ClusterError("the kubelet and containerd need root: run `python -m testbed.node up` as root")
    missing = packages.missing()
    if missing:
        raise cluster.ClusterError(
            f"missing Debian packages; install them with: apt-get install -y {' '.join(missing)}"
        )
    admin = cluster.RUN_DIR / "admin.kubeconfig"
    pki = cluster.RUN_DIR / "pki"
    if not admin.exists():
        raise cluster.ClusterError("no local cluster: run `python -m testbed.cluster up` first")
    run = containerd.node_dir()
    t0 = time.monotonic()
    propagation = subprocess.run(["findmnt", "-no", "PROPAGATION", "/"], capture_output=True, text=True).stdout
    if "shared" not in propagation:
        cluster.say("making / a shared mount (the kubelet's volume mounts need it)")
        subprocess.run(["mount", "--make-rshared", "/"], check=True)
    (run / "cni").mkdir(exist_ok=True)
    (run / "cni" / "10-trainerop.conflist").write_text(json.dumps(cni_config(), indent=2))
    (run / "containerd.toml").write_text(containerd_config(run))
    registry.start(cluster.RUN_DIR)
    registry.hosts(cluster.RUN_DIR, containerd.hosts_dir(run))
    daemon = cluster.Component(
        "containerd",
        ["containerd", "--config", str(run / "containerd.toml")],
        lambda: containerd.serving(run),
        timeout=60,
    )
    cluster.start(run, daemon)
    remove_containers(run)  # an earlier node's, if it was not taken down
    images(run)
    dns(run, admin)
    if not (pki / f"kubelet-{NODE}.crt").exists():
        cluster.issue_certificate(pki, f"kubelet-{NODE}", f"system:node:{NODE}", "system:nodes")
    kubeconfig = cluster.kubeconfig(cluster.RUN_DIR, f"kubelet-{NODE}")
    address = host_ip()
    tainted = not getattr(args, "untainted", False)
    (run / "kubelet.yaml").write_text(yaml.safe_dump(kubelet_config(run, pki / "ca.crt", address, tainted)))
    kubelet = cluster.Component(
        "kubelet",
        [
            str(cluster.bin_dir() / "kubelet"),
            f"--config={run / 'kubelet.yaml'}",
            f"--kubeconfig={kubeconfig}",
            f"--hostname-override={NODE}",
            f"--node-ip={address}",
            f"--root-dir={run / 'kubelet'}",
            f"--cert-dir={run / 'kubelet-pki'}",
            f"--node-labels={NODE_LABEL}=true",
        ],
        lambda: cluster.http_ok(f"http://127.0.0.1:{KUBELET_HEALTH}/healthz") and node_ready(admin),
        timeout=120,
    )
    cluster.start(run, kubelet)
    kube_proxy(run)
    cluster.say(f"node {NODE} is Ready in {time.monotonic() - t0:.1f}s (logs: {run / 'logs'})")
    return 0


def remove_containers(run: Path) -> None:
    """Kill and remove every container of the node: containerd's shims outlive containerd, and the
    next cluster starts from empty state that knows nothing of them (the pods' processes would run
    on); containerd's root, kept across clusters (its images), would still list them."""
    listing = subprocess.run(containerd.ctr_argv(run, "tasks", "ls", "-q"), capture_output=True, text=True)
    if cluster.running_pid(run, "containerd") is not None and listing.returncode == 0:
        tasks = listing.stdout.split()
        for task in tasks:
            subprocess.run(containerd.ctr_argv(run, "tasks", "kill", "--signal", "SIGKILL", task), capture_output=True)
        for task in tasks:
            subprocess.run(containerd.ctr_argv(run, "tasks", "delete", "--force", task), capture_output=True)
        if tasks:
            cluster.say(f"killed {len(tasks)} containers")
        containers = subprocess.run(containerd.ctr_argv(run, "containers", "ls", "-q"), capture_output=True, text=True)
        for container in containers.stdout.split():
            subprocess.run(containerd.ctr_argv(run, "containers", "delete", container), capture_output=True)
    # A shim whose containerd is already gone (an earlier, interrupted down).
    shims = subprocess.run(
        ["pgrep", "-f", f"containerd-shim.*-address {containerd.socket(run)}"], capture_output=True, text=True
    )
    for pid in shims.stdout.split():
        subprocess.run(["pkill", "-KILL", "-P", pid], capture_output=True)
        subprocess.run(["kill", "-KILL", pid], capture_output=True)


def down(_: argparse.Namespace) -> int:
    run = containerd.node_dir()
    for name in cluster.stop_processes(run, ["kube-proxy", "kubelet"]):
        cluster.say(f"stopped {name}")
    remove_containers(run)
    for name in cluster.stop_processes(run, ["containerd", "coredns"]):
        cluster.say(f"stopped {name}")
    for name in cluster.stop_processes(cluster.RUN_DIR, ["registry"]):
        cluster.say(f"stopped {name}")
    proxy = cluster.CACHE_ROOT / "kube-proxy" / cluster.bin_dir().parent.name / "kube-proxy"
    if proxy.exists():  # its iptables rules
        subprocess.run([str(proxy), "--cleanup"], capture_output=True)
    admin = cluster.RUN_DIR / "admin.kubeconfig"
    if admin.exists() and cluster.http_ok(
        f"https://127.0.0.1:{cluster.PORTS.apiserver}/readyz", ca=cluster.RUN_DIR / "pki" / "ca.crt"
    ):
        subprocess.run(
            [str(cluster.bin_dir() / "kubectl"), f"--kubeconfig={admin}", "delete", "node", NODE, "--ignore-not-found"],
            capture_output=True,
        )
    # The pods' bridge and the DNS address: a stale bridge with the same subnet would take the
    # replies meant for the next node's pods.
    subprocess.run(["ip", "link", "del", cni_config()["plugins"][0]["bridge"]], capture_output=True)
    subprocess.run(["ip", "addr", "del", f"{DNS_IP}/32", "dev", "lo"], capture_output=True)
    # What the kubelet and containerd left mounted (volumes, sandbox /dev/shm, overlay roots).
    mounts = subprocess.run(["findmnt", "-rno", "TARGET"], capture_output=True, text=True).stdout.split()
    held = (str(run), str(containerd.image_store()))
    for target in sorted((m for m in mounts if m.startswith(held)), key=len, reverse=True):
        subprocess.run(["umount", "-l", target], capture_output=True)
    return 0


def status(_: argparse.Namespace) -> int:
    run = containerd.node_dir()
    healthy = True
    parts = [("registry", cluster.RUN_DIR), *((n, run) for n in ("containerd", "coredns", "kubelet", "kube-proxy"))]
    for name, where in parts:
        pid = cluster.running_pid(where, name)
        healthy &= pid is not None
        print(f"{name:12} pid={pid or '-':<8} log={where / 'logs' / f'{name}.log'}")
    ready = node_ready(cluster.RUN_DIR / "admin.kubeconfig")
    print(f"node {NODE}: {'Ready' if ready else 'not Ready'}")
    return 0 if healthy and ready else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    commands = parser.add_subparsers(dest="command", required=True)
    starts = commands.add_parser("up")
    starts.add_argument("--untainted", action="store_true", help="no taint of ours: the node takes any pod")
    starts.set_defaults(fn=up)
    for name, fn in (("down", down), ("status", status)):
        commands.add_parser(name).set_defaults(fn=fn)
    namespace = commands.add_parser(
        "namespace", help="print a namespace whose pods run on the real node, with S3 checkpoint credentials"
    )
    namespace.add_argument("name")
    namespace.set_defaults(fn=print_namespace)
    args = parser.parse_args(argv)
    try:
        return int(args.fn(args))
    except (cluster.ClusterError, subprocess.CalledProcessError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""A real node in the local cluster: containerd, runc and the CNI plugins from Debian, the kubelet
from the binary cache, images built and imported locally (there is no registry).

    python hack/node.py up       # after `python hack/cluster.py up`; needs root
    python hack/node.py status
    python hack/node.py down     # before `python hack/cluster.py down`

It needs the Debian packages containerd, runc, containernetworking-plugins, buildah and
busybox-static (`apt-get install -y ...`; up says which are missing) and Go (the pause image is
built from hack/images/pause, CoreDNS from its Go module, once, into the cache). CoreDNS serves
cluster.local on 10.0.0.10 (added to lo), the kubelet's clusterDNS, so headless Services resolve
in pods. The node is named real-0, labelled and tainted
trainer.operator.kubeflow.org/real-node=true (NoSchedule), so only pods that tolerate the taint
run there; kwok's fake GPU nodes keep everything else. Its state and logs live in
~/.cache/trainer-operator/cluster/node.

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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hack import cluster

REPO = Path(__file__).resolve().parent.parent
NODE = "real-0"
NODE_LABEL = "trainer.operator.kubeflow.org/real-node"
PACKAGES = {
    "containerd": "containerd",
    "runc": "runc",
    "buildah": "buildah",
    "busybox": "busybox-static",
    "/usr/lib/cni/bridge": "containernetworking-plugins",
}
CNI_DIR = Path("/usr/lib/cni")
POD_SUBNET = "10.88.0.0/16"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"  # the kubelet's default sandbox image name
BUSYBOX_IMAGE = "docker.io/library/busybox:1.36"  # the controllers' --init-image default
KUBELET_HEALTH = 10248
DNS_IP = "10.0.0.10"  # the kubelet's clusterDNS, in the Service range; CoreDNS binds it on lo
COREDNS_VERSION = "v1.12.4"
COREDNS_HEALTH = cluster.PORT_BASE + 26


def node_dir() -> Path:
    path = cluster.RUN_DIR / "node"
    for sub in ("logs", "pids"):
        (path / sub).mkdir(parents=True, exist_ok=True)
    return path


def missing_packages() -> list[str]:
    missing = [pkg for tool, pkg in PACKAGES.items() if not (Path(tool).exists() or shutil.which(tool))]
    return sorted(set(missing))


def containerd_config(run: Path) -> str:
    """containerd 1.6's configuration (version 2) for the kubelet's CRI."""
    return f"""version = 2
root = "{run / "containerd" / "root"}"
state = "{run / "containerd" / "state"}"
[grpc]
  address = "{socket(run)}"
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
    """The machine's first global IPv4 address: the node's address (the kubelet refuses loopback)."""
    out = subprocess.run(["ip", "-4", "-o", "addr", "show", "scope", "global"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        fields = line.split()
        if "inet" in fields and fields[1] != "lo":  # lo also holds the cluster DNS address
            return fields[fields.index("inet") + 1].split("/")[0]
    raise cluster.ClusterError("this machine has no global IPv4 address for the node (`ip -4 addr` shows none)")


def kubelet_config(run: Path, ca: Path, address: str) -> dict[str, Any]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "containerRuntimeEndpoint": f"unix://{socket(run)}",
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
        "registerWithTaints": [{"key": NODE_LABEL, "value": "true", "effect": "NoSchedule"}],
    }


def socket(run: Path) -> Path:
    return run / "containerd" / "containerd.sock"


def ctr(run: Path, *args: str) -> str:
    result = subprocess.run(
        ["ctr", "--address", str(socket(run)), "-n", "k8s.io", *args], capture_output=True, text=True
    )
    if result.returncode != 0:
        raise cluster.ClusterError(f"ctr {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout


def build_image(run: Path, name: str, context: Path, containerfile: str) -> Path:
    """An OCI archive of a FROM-scratch image built with buildah (vfs storage under the node's dir)."""
    archive = run / "images" / f"{name.rsplit('/', 1)[-1].replace(':', '-')}.tar"
    archive.parent.mkdir(parents=True, exist_ok=True)
    (context / "Containerfile").write_text(containerfile)
    storage = [
        "--storage-driver",
        "vfs",
        "--root",
        str(run / "buildah" / "root"),
        "--runroot",
        str(run / "buildah" / "run"),
    ]
    for argv in (
        ["buildah", *storage, "bud", "-q", "-t", f"localhost/{name}", str(context)],
        ["buildah", *storage, "push", f"localhost/{name}", f"oci-archive:{archive}:{name}"],
    ):
        result = subprocess.run(argv, capture_output=True, text=True)
        if result.returncode != 0:
            raise cluster.ClusterError(f"{' '.join(argv[:4])} failed: {result.stderr.strip()[-2000:]}")
    return archive


def images(run: Path) -> None:
    """The sandbox (pause) image and a busybox image, built here and imported into containerd."""
    have = set(ctr(run, "images", "ls", "-q").split())
    t0 = time.monotonic()
    if PAUSE_IMAGE not in have:
        context = run / "build" / "pause"
        shutil.rmtree(context, ignore_errors=True)
        (context / "rootfs").mkdir(parents=True)
        source = REPO / "hack" / "images" / "pause"
        subprocess.run(
            ["go", "build", "-ldflags", "-s -w", "-o", str(context / "rootfs" / "pause"), "."],
            cwd=source,
            env={**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"},
            check=True,
        )
        archive = build_image(run, PAUSE_IMAGE, context, 'FROM scratch\nCOPY rootfs/ /\nENTRYPOINT ["/pause"]\n')
        ctr(run, "images", "import", str(archive))
    if BUSYBOX_IMAGE not in have:
        context = run / "build" / "busybox"
        shutil.rmtree(context, ignore_errors=True)
        (context / "rootfs" / "bin").mkdir(parents=True)
        shutil.copy2(shutil.which("busybox") or "/bin/busybox", context / "rootfs" / "bin" / "busybox")
        applets = ("sh", "sleep", "echo", "cat", "ls", "env", "hostname", "nslookup", "true", "false", "wget", "seq")
        for applet in applets:
            (context / "rootfs" / "bin" / applet).symlink_to("busybox")
        archive = build_image(run, BUSYBOX_IMAGE, context, 'FROM scratch\nCOPY rootfs/ /\nCMD ["/bin/sh"]\n')
        ctr(run, "images", "import", str(archive))
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
    target = cluster.CACHE_ROOT / f"coredns-{COREDNS_VERSION}"
    binary = target / "coredns"
    if not binary.exists():
        cluster.say(f"building CoreDNS {COREDNS_VERSION} from its Go module (once; a few minutes)")
        target.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["go", "install", f"github.com/coredns/coredns@{COREDNS_VERSION}"],
            env={**os.environ, "GOBIN": str(target)},
            cwd=target,
            check=True,
        )
    return binary


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


def up(_: argparse.Namespace) -> int:
    if os.geteuid() != 0:
        raise cluster.ClusterError("the kubelet and containerd need root: run hack/node.py as root")
    missing = missing_packages()
    if missing:
        raise cluster.ClusterError(
            f"missing Debian packages; install them with: apt-get install -y {' '.join(missing)}"
        )
    admin = cluster.RUN_DIR / "admin.kubeconfig"
    pki = cluster.RUN_DIR / "pki"
    if not admin.exists():
        raise cluster.ClusterError("no local cluster: run `python hack/cluster.py up` first")
    run = node_dir()
    t0 = time.monotonic()
    propagation = subprocess.run(["findmnt", "-no", "PROPAGATION", "/"], capture_output=True, text=True).stdout
    if "shared" not in propagation:
        cluster.say("making / a shared mount (the kubelet's volume mounts need it)")
        subprocess.run(["mount", "--make-rshared", "/"], check=True)
    (run / "cni").mkdir(exist_ok=True)
    (run / "cni" / "10-trainerop.conflist").write_text(json.dumps(cni_config(), indent=2))
    (run / "containerd.toml").write_text(containerd_config(run))
    containerd = cluster.Component(
        "containerd",
        ["containerd", "--config", str(run / "containerd.toml")],
        lambda: (
            socket(run).exists()
            and subprocess.run(["ctr", "--address", str(socket(run)), "version"], capture_output=True).returncode == 0
        ),
        timeout=60,
    )
    cluster.start(run, containerd)
    images(run)
    dns(run, admin)
    if not (pki / f"kubelet-{NODE}.crt").exists():
        cluster.issue_certificate(pki, f"kubelet-{NODE}", f"system:node:{NODE}", "system:nodes")
    kubeconfig = cluster.kubeconfig(cluster.RUN_DIR, f"kubelet-{NODE}")
    address = host_ip()
    (run / "kubelet.yaml").write_text(yaml.safe_dump(kubelet_config(run, pki / "ca.crt", address)))
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
    cluster.say(f"node {NODE} is Ready in {time.monotonic() - t0:.1f}s (logs: {run / 'logs'})")
    return 0


def down(_: argparse.Namespace) -> int:
    run = node_dir()
    for name in cluster.stop_processes(run, ["kubelet", "containerd", "coredns"]):
        cluster.say(f"stopped {name}")
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
    for target in sorted((m for m in mounts if m.startswith(str(run))), key=len, reverse=True):
        subprocess.run(["umount", "-l", target], capture_output=True)
    return 0


def status(_: argparse.Namespace) -> int:
    run = node_dir()
    healthy = True
    for name in ("containerd", "coredns", "kubelet"):
        pid = cluster.running_pid(run, name)
        healthy &= pid is not None
        print(f"{name:12} pid={pid or '-':<8} log={run / 'logs' / f'{name}.log'}")
    ready = node_ready(cluster.RUN_DIR / "admin.kubeconfig")
    print(f"node {NODE}: {'Ready' if ready else 'not Ready'}")
    return 0 if healthy and ready else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    commands = parser.add_subparsers(dest="command", required=True)
    for name, fn in (("up", up), ("down", down), ("status", status)):
        commands.add_parser(name).set_defaults(fn=fn)
    args = parser.parse_args(argv)
    try:
        return int(args.fn(args))
    except (cluster.ClusterError, subprocess.CalledProcessError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

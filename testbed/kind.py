#!/usr/bin/env python3
"""kind — the local cluster the product's design names — on this machine: podman runs its node
(there is no Docker engine here), and what kind would download is built here.

    python -m testbed.kind build   # kind, kubeadm and the node image, once into the cache
    python -m testbed.kind up      # a one-node kind cluster; prints its KUBECONFIG
    python -m testbed.kind down

`up` needs the local cluster (`python -m testbed.cluster up`) for its registry: the kind node's
containerd pulls registry.k8s.io and docker.io through it, as the real node does, so the images
kubeadm runs and the operator's are the ones built here.

- kind VERSION from its Go module. Its node image from testbed/kind-node.Containerfile, which
  follows kind's images/base Dockerfile with kind's own files (from its module) and Debian's
  packages, plus kubeadm, kubelet and kubectl of the test bed's Kubernetes.
- The images kubeadm runs: kube-apiserver, kube-controller-manager and kube-scheduler from the
  test bed's binaries, kube-proxy on Debian's iptables, etcd and CoreDNS at the test bed's
  versions (kubeadm is told their tags by a ClusterConfiguration patch), the real node's pause.

What this machine needs, found by trying (docs/local-cluster.md "kind"):
- podman's default rlimits are refused: a containers.conf of ours (CONTAINERS_CONF) gives
  nofile 20000 and nproc 32768, the most this machine allows.
- kind mounts /lib/modules, which this machine lacks: an empty one is made.
- a negative oom_score_adj is refused: containerd's restrict_oom_score_adj, as on the real node.
- kindnetd and local-path-provisioner are not Go modules the proxy serves: kind's
  disableDefaultCNI, and the CNI plugins' ptp for the one node (what kindnetd writes on each
  node); kind's fallback StorageClass.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from testbed import cluster, gomodule, images, node, packages, registry

VERSION = "v0.33.0"
MODULE = "sigs.k8s.io/kind"
NAME = "trainer-operator"  # the kind cluster's
NODE_IMAGE = "localhost/trainer-operator/kind-node"
CONTAINERFILE = Path(__file__).resolve().parent / "kind-node.Containerfile"
ULIMITS = ("nofile=20000:20000", "nproc=32768:32768")
NODE_POD_CIDR = "10.244.0.0/24"  # the one node's share of kind's default podSubnet, 10.244.0.0/16
CONTROL_PLANE = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
CONTAINERD_PATCH = """[plugins."io.containerd.grpc.v1.cri"]
  restrict_oom_score_adj = true
[plugins."io.containerd.grpc.v1.cri".registry]
  config_path = "/etc/containerd/certs.d"
"""


def run_dir() -> Path:
    """kind's configuration and kubeconfig: in the local cluster's run directory, whose registry it needs."""
    return cluster.RUN_DIR / "kind"


KIND_DIR = cluster.CACHE_ROOT / f"kind-{VERSION}"  # kind itself, and podman's settings for it


def binary() -> Path:
    """kind, installed once into the cache (a minute or two on 2 cores the first time)."""
    return gomodule.installed(
        f"kind {VERSION}", "python -m testbed.kind build", f"{MODULE}@{VERSION}", KIND_DIR, "kind"
    )


def containers_conf() -> str:
    """podman's settings for kind's node: the rlimits this machine allows."""
    return "[containers]\ndefault_ulimits = [" + ", ".join(f'"{u}"' for u in ULIMITS) + "]\n"


def cni_conflist() -> dict[str, Any]:
    """The node's pod network: ptp veths, addresses from the node's pod CIDR, masqueraded outside it."""
    ipam = {"type": "host-local", "ranges": [[{"subnet": NODE_POD_CIDR}]], "routes": [{"dst": "0.0.0.0/0"}]}
    return {
        "cniVersion": "0.4.0",
        "name": "kind-ptp",
        "plugins": [
            {"type": "ptp", "ipMasq": True, "mtu": 1500, "ipam": ipam},
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def cluster_config(run: Path, ca: Path, etcd_tag: str, coredns_tag: str) -> dict[str, Any]:
    """kind's Cluster: one node, our CNI, containerd pulling through the local registry (hosts in
    ``run``/certs.d, trusted through ``ca``), kubeadm told the etcd and CoreDNS tags built here."""
    kubeadm = {
        "kind": "ClusterConfiguration",
        "etcd": {"local": {"imageTag": etcd_tag}},
        "dns": {"imageTag": coredns_tag},
    }
    mounts = [
        {"hostPath": str(run / "certs.d"), "containerPath": "/etc/containerd/certs.d", "readOnly": True},
        {"hostPath": str(run / "cni"), "containerPath": "/etc/cni/net.d", "readOnly": True},
        {"hostPath": str(ca), "containerPath": str(ca), "readOnly": True},
    ]
    return {
        "kind": "Cluster",
        "apiVersion": "kind.x-k8s.io/v1alpha4",
        "networking": {"disableDefaultCNI": True},
        "containerdConfigPatches": [CONTAINERD_PATCH],
        "kubeadmConfigPatches": [yaml.safe_dump(kubeadm)],
        "nodes": [{"role": "control-plane", "extraMounts": mounts}],
    }


def version_of(program: Path, word: str) -> str:
    """The version ``program --version`` prints after ``word`` ("Kubernetes v1.34.4", "etcd Version: 3.6.4")."""
    said = subprocess.run([str(program), "--version"], capture_output=True, text=True, check=True).stdout.split()
    return said[said.index(word) + 1]


def kind_env() -> dict[str, str]:
    """kind's environment: podman as its provider, with our containers.conf (kept beside kind, not in
    the cluster's run directory: `kind down` must still work after `testbed.cluster down`)."""
    conf = KIND_DIR / "containers.conf"
    if not conf.exists() or conf.read_text() != containers_conf():
        KIND_DIR.mkdir(parents=True, exist_ok=True)
        conf.write_text(containers_conf())
    return {**os.environ, "KIND_EXPERIMENTAL_PROVIDER": "podman", "CONTAINERS_CONF": str(conf)}


def scratch_image(ref: str, program: Path, entrypoint: str) -> None:
    """``program`` alone at ``entrypoint``, as ``ref``, pushed to the local registry."""
    context = images.IMAGES_DIR / "kind" / ref.rsplit("/", 1)[-1].replace(":", "-")
    shutil.rmtree(context, ignore_errors=True)
    (context / "rootfs" / Path(entrypoint).parent.relative_to("/")).mkdir(parents=True)
    shutil.copy2(program, context / "rootfs" / entrypoint.lstrip("/"))
    containerfile = (
        f'FROM scratch\nCOPY rootfs/ /\nENV PATH=/usr/local/bin:/usr/bin:/bin\nENTRYPOINT ["{entrypoint}"]\n'
    )
    images.build_image(ref, context, containerfile)
    images.push(cluster.RUN_DIR, ref)


def kube_proxy_image(ref: str) -> None:
    context = images.IMAGES_DIR / "kind" / "kube-proxy"
    shutil.rmtree(context, ignore_errors=True)
    context.mkdir(parents=True)
    shutil.copy2(node.kube_proxy_binary(), context / "kube-proxy")
    (context / "Containerfile").write_text(
        f"FROM {images.base()}\n"
        "RUN apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "
        "iptables conntrack ipset kmod && rm -rf /var/lib/apt/lists/*\n"
        "COPY kube-proxy /usr/local/bin/kube-proxy\n"
    )
    images.buildah("bud", "-q", "--layers", "--isolation", "chroot", "-t", ref, str(context))
    images.push(cluster.RUN_DIR, ref)


def control_plane_images(kubernetes: str, etcd_tag: str) -> None:
    """What kubeadm runs, in the local registry under the names it asks for."""
    cluster.say("building kubeadm's images from the test bed's binaries (cached layers)")
    bins = cluster.bin_dir()
    for program in CONTROL_PLANE:
        scratch_image(f"registry.k8s.io/{program}:{kubernetes}", bins / program, f"/usr/local/bin/{program}")
    scratch_image(f"registry.k8s.io/etcd:{etcd_tag}", bins / "etcd", "/usr/local/bin/etcd")
    scratch_image(f"registry.k8s.io/coredns/coredns:{node.COREDNS_VERSION}", node.coredns_binary(), "/coredns")
    kube_proxy_image(f"registry.k8s.io/kube-proxy:{kubernetes}")
    node.pause_image(cluster.RUN_DIR)  # the sandbox image kind's containerd configuration names
    images.push(cluster.RUN_DIR, node.PAUSE_IMAGE)
    cluster.say("kubeadm's images are in the local registry")


def node_image() -> str:
    """kind's node image for the test bed's Kubernetes, built (cached layers) and put in podman's storage."""
    kubernetes = version_of(cluster.bin_dir() / "kubelet", "Kubernetes")
    ref = f"{NODE_IMAGE}:{kubernetes}"
    context = images.IMAGES_DIR / "kind" / "node"
    shutil.rmtree(context, ignore_errors=True)
    source = gomodule.module_dir(gomodule.go(f"kind {VERSION}", "python -m testbed.kind build"), MODULE, VERSION)
    shutil.copytree(source / "images" / "base" / "files", context / "files")
    (context / "bin").mkdir()
    for program in (node.kubernetes_binary("kubeadm"), cluster.bin_dir() / "kubelet", cluster.bin_dir() / "kubectl"):
        shutil.copy2(program, context / "bin" / program.name)
    subprocess.run(["chmod", "-R", "u+w", str(context)], check=True)  # the module cache is read-only
    shutil.copyfile(CONTAINERFILE, context / "Containerfile")
    args = ["--build-arg", f"BASE={images.base()}", "--build-arg", f"VERSION={kubernetes}"]
    cluster.say(f"building kind's node image {ref} (Debian's packages: minutes the first time, then cached)")
    with cluster.build_lock(images.IMAGES_DIR / "image-kind-node"):
        images.buildah("bud", "-q", "--layers", "--isolation", "chroot", *args, "-t", ref, str(context))
    to_podman(ref, images.built_id(ref))
    return ref


def to_podman(ref: str, built: str) -> None:
    """``ref`` copied from buildah's store (the test bed's) into podman's, where kind finds it."""
    needs_podman()
    have = subprocess.run(["podman", "image", "inspect", "--format", "{{.Id}}", ref], capture_output=True, text=True)
    if have.returncode == 0 and have.stdout.strip() == built:
        return
    store = json.loads(
        subprocess.run(["podman", "info", "--format", "json"], capture_output=True, text=True, check=True).stdout
    )["store"]
    where = f"[{store['graphDriverName']}@{store['graphRoot']}+{store['runRoot']}]"
    images.buildah("push", "-q", ref, f"containers-storage:{where}{ref}")
    cluster.say(f"node image {ref} in podman's storage")


def build() -> Path:
    binary()
    node_image()
    return binary()


def prepare(run: Path) -> Path:
    """The files kind's node mounts and kind's configuration; returns the configuration's path."""
    ca = cluster.RUN_DIR / "pki" / "ca.crt"
    if not ca.exists():
        raise cluster.ClusterError(
            "kind's node pulls through the local cluster's registry: run `python -m testbed.cluster up` first"
        )
    shutil.rmtree(run, ignore_errors=True)
    (run / "cni").mkdir(parents=True)
    (run / "cni" / "10-kind-ptp.conflist").write_text(json.dumps(cni_conflist()))
    registry.hosts(cluster.RUN_DIR, run / "certs.d")
    etcd_tag = version_of(cluster.bin_dir() / "etcd", "Version:") + "-0"  # as registry.k8s.io tags etcd
    config = cluster_config(run, ca, etcd_tag, node.COREDNS_VERSION)
    (run / "kind.yaml").write_text(yaml.safe_dump(config))
    return run / "kind.yaml"


def needs_podman() -> None:
    if shutil.which("podman") is None:
        needed = " ".join(packages.KIND_PACKAGES.values())
        raise cluster.ClusterError(f"kind runs its node with podman here: apt-get install -y {needed}")
    if os.geteuid() != 0:
        raise cluster.ClusterError("kind's node runs in rootful podman here (cgroup v1): run as root")


def up() -> Path:
    """A one-node kind cluster (a stale one of ours deleted first); its kubeconfig."""
    needs_podman()
    run = run_dir()
    down()
    config = prepare(run)
    if not Path("/lib/modules").exists():
        cluster.say("making an empty /lib/modules (kind mounts it into its node; this machine has none)")
        Path("/lib/modules").mkdir(parents=True)
    registry.start(cluster.RUN_DIR)
    kubernetes = version_of(cluster.bin_dir() / "kubelet", "Kubernetes")
    control_plane_images(kubernetes, version_of(cluster.bin_dir() / "etcd", "Version:") + "-0")
    image = node_image()
    kubeconfig = run / "kubeconfig"
    argv = [str(binary()), "create", "cluster", "--name", NAME, "--image", image, "--config", str(config)]
    created = subprocess.run([*argv, "--kubeconfig", str(kubeconfig), "--wait", "3m"], env=kind_env())
    if created.returncode != 0:
        raise cluster.ClusterError(f"kind create cluster failed (exit {created.returncode}); see its messages above")
    return kubeconfig


def down() -> None:
    """Delete our kind cluster, if there is one (its volumes go with it; podman's kind network and
    the empty /lib/modules stay, for the next cluster)."""
    if not (KIND_DIR / "kind").exists():
        return  # kind was never built here: no cluster of it
    kind = str(KIND_DIR / "kind")
    listed = subprocess.run([kind, "get", "clusters"], env=kind_env(), capture_output=True, text=True)
    if listed.returncode != 0:
        raise cluster.ClusterError(f"kind get clusters failed: {listed.stderr.strip()}")
    if NAME in listed.stdout.split():
        subprocess.run([kind, "delete", "cluster", "--name", NAME], env=kind_env(), check=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=("build", "up", "down"))
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            print(build())
        elif args.command == "up":
            print(f"export KUBECONFIG={up()}")
        else:
            down()
    except (cluster.ClusterError, subprocess.CalledProcessError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

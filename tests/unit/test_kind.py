"""testbed/kind.py's settings for a kind cluster on this machine (the cluster itself runs in the
quickstart tier: tests/quickstart/test_kind.py)."""

import ipaddress
import tomllib
from pathlib import Path

import yaml

from testbed import kind


def test_podman_gives_the_node_only_the_rlimits_this_machine_allows() -> None:
    ulimits = tomllib.loads(kind.containers_conf())["containers"]["default_ulimits"]
    limits = dict(u.split("=") for u in ulimits)
    assert limits == {"nofile": "20000:20000", "nproc": "32768:32768"}


def test_the_nodes_pods_get_addresses_from_its_share_of_kinds_pod_subnet() -> None:
    conflist = kind.cni_conflist()
    ptp, portmap = conflist["plugins"]
    assert (ptp["type"], portmap["type"]) == ("ptp", "portmap")
    [[pool]] = ptp["ipam"]["ranges"]
    assert ipaddress.IPv4Network(pool["subnet"]).subnet_of(ipaddress.IPv4Network("10.244.0.0/16"))  # kind's default
    assert ptp["ipMasq"] is True  # pods reach the registry and the other cluster through the node


def test_the_cluster_pulls_through_the_registry_and_runs_kubeadm_with_the_tags_built_here() -> None:
    config = kind.cluster_config(Path("/run/kind"), Path("/pki/ca.crt"), "3.6.4-0", "v1.12.4")
    assert config["networking"] == {"disableDefaultCNI": True}  # our conflist instead of kindnetd
    [patch] = config["containerdConfigPatches"]
    cri = tomllib.loads(patch)["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["restrict_oom_score_adj"] is True  # this machine refuses a negative oom_score_adj
    [only] = config["nodes"]
    mounts = {m["containerPath"]: m["hostPath"] for m in only["extraMounts"]}
    assert mounts[cri["registry"]["config_path"]] == "/run/kind/certs.d"
    assert mounts["/etc/cni/net.d"] == "/run/kind/cni"
    assert mounts["/pki/ca.crt"] == "/pki/ca.crt"  # where the hosts files say the CA is
    [kubeadm] = (yaml.safe_load(p) for p in config["kubeadmConfigPatches"])
    assert kubeadm["etcd"]["local"]["imageTag"] == "3.6.4-0"
    assert kubeadm["dns"]["imageTag"] == "v1.12.4"


def test_the_node_image_follows_kinds_entrypoint_and_gets_the_kubernetes_binaries() -> None:
    containerfile = kind.CONTAINERFILE.read_text()
    assert 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' in containerfile
    assert "COPY bin/ /usr/bin/" in containerfile  # where kind's kubelet unit starts the kubelet
    assert "containernetworking-plugins" in containerfile

"""The real node's configuration (testbed/node.py): what this machine was found to need."""

import json
import tomllib
from pathlib import Path

import pytest

from testbed import cluster, containerd, node, packages


def test_containerd_keeps_oom_scores_it_may_set_and_uses_debians_cni_plugins() -> None:
    config = tomllib.loads(node.containerd_config(Path("/run/x")))
    cri = config["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["restrict_oom_score_adj"] is True  # a negative score is refused on this machine
    assert cri["sandbox_image"] == node.PAUSE_IMAGE
    assert cri["containerd"]["runtimes"]["runc"]["options"]["SystemdCgroup"] is False
    assert cri["cni"]["bin_dir"] == "/usr/lib/cni"
    assert config["grpc"]["address"] == "/run/x/containerd/containerd.sock"


def test_containerds_images_outlive_the_cluster_and_its_state_does_not() -> None:
    """`cluster down` removes the run directory: containerd's root (images, snapshots) is kept in
    the cache beside it, so the next node does not pull the example images' 5 GB again (issue 50)."""
    config = tomllib.loads(node.containerd_config(Path("/run/x")))
    assert Path(config["root"]) == containerd.image_store() / "root"
    assert not Path(config["root"]).is_relative_to(cluster.RUN_DIR)
    assert config["state"] == "/run/x/containerd/state"


def test_the_kubelet_runs_on_cgroup_v1_with_cgroupfs_and_taints_its_node() -> None:
    config = node.kubelet_config(Path("/run/x"), Path("/pki/ca.crt"), "192.0.2.2")
    assert (config["cgroupDriver"], config["failCgroupV1"]) == ("cgroupfs", False)
    assert config["containerRuntimeEndpoint"] == "unix:///run/x/containerd/containerd.sock"
    assert config["address"] == "192.0.2.2"
    assert config["authentication"]["anonymous"] == {"enabled": False}
    assert config["registerWithTaints"] == [{"key": node.NODE_LABEL, "value": "true", "effect": "NoSchedule"}]


def test_pods_get_addresses_from_the_bridge() -> None:
    bridge, portmap = node.cni_config()["plugins"]
    assert bridge["type"] == "bridge"
    assert bridge["ipam"]["ranges"] == [[{"subnet": node.POD_SUBNET}]]
    assert portmap["type"] == "portmap"


def test_coredns_serves_cluster_local_on_the_kubelets_dns_address_only() -> None:
    corefile = node.corefile(Path("/k/admin.kubeconfig"))
    assert f"bind {node.DNS_IP}" in corefile
    assert "kubeconfig /k/admin.kubeconfig" in corefile
    assert "forward" not in corefile  # no upstream: this machine has no internet
    assert node.kubelet_config(Path("/r"), Path("/ca"), "192.0.2.2")["clusterDNS"] == [node.DNS_IP]


def test_ci_installs_every_package_the_node_the_image_builds_and_kind_need() -> None:
    ci = (Path(__file__).resolve().parents[2] / ".ci" / "run").read_text()
    line = next(line for line in ci.splitlines() if line.startswith("NODE_PACKAGES="))
    needed = {*node.PACKAGES.values(), *packages.KIND_PACKAGES.values()}
    assert set(line.split("=", 1)[1].strip('"').split()) == needed


def test_namespaces_for_the_real_node_tolerate_its_taint_and_hold_reachable_s3_credentials(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(cluster, "services_address", lambda: cluster.SERVICES_ADDRESS)
    (tmp_path / "s3-secret-key").write_text("k3y\n")
    monkeypatch.setattr(cluster, "RUN_DIR", tmp_path)
    namespace = node.team_namespace("team")
    (toleration,) = json.loads(namespace["metadata"]["annotations"]["scheduler.alpha.kubernetes.io/defaultTolerations"])
    assert toleration == {"key": node.NODE_LABEL, "operator": "Exists", "effect": "NoSchedule"}
    assert (
        node.kubelet_config(Path("/r"), Path("/ca"), "192.0.2.7")["registerWithTaints"][0]["key"] == toleration["key"]
    )
    secret = node.checkpoint_secret("team")
    assert secret["metadata"] == {"name": "checkpoint-credentials", "namespace": "team"}
    # Not 127.0.0.1: pods on the node reach the services address (on lo) through the bridge.
    assert secret["stringData"]["AWS_ENDPOINT_URL"] == f"http://169.254.20.11:{cluster.PORTS.s3}"
    assert secret["stringData"]["AWS_SECRET_ACCESS_KEY"] == "k3y"

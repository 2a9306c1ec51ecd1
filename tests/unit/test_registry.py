"""testbed/registry.py: where the mirror keeps an image, and the hosts configuration that makes the
real node's containerd pull docker.io's and registry.k8s.io's images from it over TLS."""

import tomllib
from pathlib import Path

import pytest

from testbed import cluster, registry


@pytest.mark.parametrize(
    ("ref", "path"),
    [
        ("docker.io/library/trainer-operator:dev", "docker.io/library/trainer-operator:dev"),
        ("registry.k8s.io/pause:3.10", "registry.k8s.io/pause:3.10"),
        ("docker.io/library/x@sha256:" + "a" * 64, "docker.io/library/x@sha256:" + "a" * 64),
    ],
)
def test_a_mirrored_image_lives_under_its_upstream_registry(ref: str, path: str) -> None:
    assert registry.mirror_path(ref) == f"{registry.address()}/{path}"


def test_only_the_mirrored_registries_are_held() -> None:
    with pytest.raises(cluster.ClusterError, match=r"mirrors only docker\.io, registry\.k8s\.io"):
        registry.mirror_path("ghcr.io/acme/x:1")


def test_containerd_pulls_each_upstream_from_the_registry_trusting_the_test_ca(tmp_path: Path) -> None:
    hosts = registry.hosts(tmp_path / "run", tmp_path / "certs.d")
    for upstream, server in (
        ("docker.io", "https://registry-1.docker.io"),
        ("registry.k8s.io", "https://registry.k8s.io"),
    ):
        config = tomllib.loads((hosts / upstream / "hosts.toml").read_text())
        assert config["server"] == server  # the upstream, tried only if the mirror fails
        (mirror,) = config["host"].items()
        assert mirror[0] == f"https://{registry.address()}/v2/{upstream}"
        assert mirror[1] == {
            "capabilities": ["pull", "resolve"],
            "ca": str(tmp_path / "run" / "pki" / "ca.crt"),
            "override_path": True,  # the path above as it is: the mirror keeps each upstream apart
        }

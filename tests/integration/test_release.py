"""A release (hack/release.py) as a platform team and a data scientist receive it: each overlay's
manifest names the release's image everywhere the operator's image is named; the client installs
with pip into a fresh virtualenv from the release's wheels alone (and PyPI), and `kubectl
trainer` with krew (built from its Go module) from the release's archive and manifest."""

import hashlib
import json
import os
import subprocess
import venv
from pathlib import Path
from typing import Any

import pytest
import yaml

from hack import release
from testbed import cluster, krew

IMAGE = "registry.example.com:5000/acme/trainer-operator:0.2.0"


def named_images(obj: dict[str, Any]) -> list[str]:
    """Every image ``obj`` names: its pods' containers, or a ConfigMap's data.image."""
    if obj["kind"] == "ConfigMap":
        return [obj["data"]["image"]] if "image" in obj.get("data", {}) else []
    pod = obj.get("spec", {}).get("template", {}).get("spec", {})
    return [c["image"] for c in pod.get("containers", []) + pod.get("initContainers", [])]


@pytest.mark.parametrize("overlay", release.OVERLAYS)
def test_a_release_manifest_names_the_releases_image_everywhere(overlay: str) -> None:
    rendered = release.render(overlay, IMAGE)
    objects = [o for o in yaml.safe_load_all(rendered) if o]
    named = [image for obj in objects for image in named_images(obj)]
    deployments = [o for o in objects if o["kind"] == "Deployment"]
    assert len(named) >= len(deployments) + 1  # the Deployments and at least the model initializer
    assert set(named) == {IMAGE}
    assert "trainer-operator:dev" not in rendered


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every package's wheel, as a release holds them."""
    folder = tmp_path_factory.mktemp("release") / "wheels"
    release.build_wheels(folder)
    return folder


def test_the_client_installs_from_the_releases_wheels_into_a_fresh_virtualenv(wheels: Path, tmp_path: Path) -> None:
    built = sorted(wheels.glob("*.whl"))
    assert {w.name.split("-")[0] for w in built} >= {"trainerop_client", "trainerop_sdk", "trainerop_trainer"}
    venv.create(tmp_path / "venv", with_pip=True)
    python = tmp_path / "venv" / "bin" / "python"
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, "--find-links", str(wheels), "trainerop-client"], check=True)
    help_text = subprocess.run(
        [str(tmp_path / "venv" / "bin" / "kubectl-trainer"), "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert "usage: kubectl trainer" in help_text
    listed = subprocess.run([str(python), "-m", "pip", "list", "--format=json"], capture_output=True, text=True)
    ours = {p["name"] for p in json.loads(listed.stdout) if p["name"].startswith("trainerop")}
    assert ours == {"trainerop-client", "trainerop-sdk"}


def test_kubectl_trainer_installs_with_krew_from_the_releases_archive(wheels: Path, tmp_path: Path) -> None:
    version = release.versions()["trainerop-client"]
    archive = release.plugin_archive(wheels, tmp_path, version)
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    manifest = release.krew_manifest(version, f"https://downloads.example.com/{archive.name}", digest)
    (tmp_path / "trainer.yaml").write_text(yaml.safe_dump(manifest))
    env = {
        **os.environ,
        "KREW_ROOT": str(tmp_path / "krew"),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),  # where the launcher makes its virtualenv
        "PATH": f"{tmp_path / 'krew' / 'bin'}:{cluster.bin_dir()}:{os.environ['PATH']}",
    }
    install = [str(krew.binary()), "install", f"--manifest={tmp_path / 'trainer.yaml'}", f"--archive={archive}"]
    subprocess.run(install, env=env, check=True)
    first = subprocess.run(["kubectl", "trainer", "--help"], env=env, capture_output=True, text=True, check=True)
    assert "usage: kubectl trainer" in first.stdout
    assert f"kubectl trainer {version}: installing its Python packages" in first.stderr  # once
    again = subprocess.run(["kubectl", "trainer", "--help"], env=env, capture_output=True, text=True, check=True)
    assert again.stderr == ""
    # krew uninstalls only with an index: the default one is a clone of GitHub's krew-index, which
    # this machine cannot reach; an empty one of the same shape stands for it.
    index = tmp_path / "krew" / "index" / "default"
    (index / "plugins").mkdir(parents=True)
    subprocess.run(["git", "init", "--quiet", str(index)], check=True)
    subprocess.run([str(krew.binary()), "uninstall", release.PLUGIN], env=env, check=True)
    assert not (tmp_path / "krew" / "bin" / "kubectl-trainer").exists()

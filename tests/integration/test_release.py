"""A release (hack/release.py) as a platform team and a data scientist receive it: each overlay's
manifest names the release's image everywhere the operator's image is named, and the client
installs with pip into a fresh virtualenv from the release's wheels alone (and PyPI)."""

import json
import subprocess
import venv
from pathlib import Path
from typing import Any

import pytest
import yaml

from hack import release

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


def test_the_client_installs_from_the_releases_wheels_into_a_fresh_virtualenv(tmp_path: Path) -> None:
    wheels = release.build_wheels(tmp_path / "wheels")
    assert {w.name.split("-")[0] for w in wheels} >= {"trainerop_client", "trainerop_sdk", "trainerop_trainer"}
    venv.create(tmp_path / "venv", with_pip=True)
    python = tmp_path / "venv" / "bin" / "python"
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, "--find-links", str(tmp_path / "wheels"), "trainerop-client"], check=True)
    help_text = subprocess.run(
        [str(tmp_path / "venv" / "bin" / "kubectl-trainer"), "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert "usage: kubectl trainer" in help_text
    listed = subprocess.run([str(python), "-m", "pip", "list", "--format=json"], capture_output=True, text=True)
    ours = {p["name"] for p in json.loads(listed.stdout) if p["name"].startswith("trainerop")}
    assert ours == {"trainerop-client", "trainerop-sdk"}

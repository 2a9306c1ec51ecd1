"""hack/release.py: what it refuses to release, and what it names (its manifests are rendered in
tests/integration/test_release.py)."""

import pytest
import yaml

from hack import release

CHANGELOG = """# Changelog

## 0.2.0

- Hang detection.

## 0.1.0

The first release.
"""


SDK = "trainerop-sdk"


@pytest.mark.parametrize(
    ("version", "versions", "tag", "expected"),
    [
        ("0.2.0", {SDK: "0.2.0"}, "v0.2.0", []),
        ("0.2.0", {SDK: "0.2.0"}, None, []),
        ("0.2.0", {SDK: "0.1.0"}, None, [f"{SDK} is at 0.1.0: run `python hack/release.py set-version 0.2.0`"]),
        ("0.3.0", {SDK: "0.3.0"}, None, ["CHANGELOG.md has no entry `## 0.3.0`: write what changed"]),
        ("0.2.0", {SDK: "0.2.0"}, "v0.2.1", ["the tag v0.2.1 does not name version 0.2.0"]),
        (
            "v0.2",
            {},
            None,
            [
                "'v0.2' is not a version like 0.2.0 or 0.2.0rc1",
                "CHANGELOG.md has no entry `## v0.2`: write what changed",
            ],
        ),
    ],
)
def test_what_stops_a_release(version: str, versions: dict[str, str], tag: str | None, expected: list[str]) -> None:
    assert release.problems(version, versions, CHANGELOG, tag) == expected


def test_a_versions_changelog_entry_ends_at_the_next_version() -> None:
    assert release.changelog_entry(CHANGELOG, "0.2.0") == "- Hang detection."
    assert release.changelog_entry(CHANGELOG, "0.1.0") == "The first release."
    assert release.changelog_entry(CHANGELOG, "0.1") == ""


def test_set_version_changes_the_projects_version_only() -> None:
    text = '[project]\nname = "trainerop-sdk"\nversion = "0.1.0"\n\n[tool.x]\ntarget-version = "py311"\n'
    assert release.with_version(text, "0.2.0") == text.replace('version = "0.1.0"', 'version = "0.2.0"')
    with pytest.raises(release.ReleaseError):
        release.with_version("[project]\nname = 'x'\n", "0.2.0")


def test_every_package_and_the_workspace_carry_one_version() -> None:
    assert len(set(release.versions().values())) == 1
    assert {"trainerop-client", "trainerop-sdk", "trainerop-trainer"} <= set(release.versions())


@pytest.mark.parametrize(
    ("overlay", "name"),
    [
        ("dev", "trainer-operator-0.2.0.yaml"),
        ("minimal", "trainer-operator-minimal-0.2.0.yaml"),
        ("production", "trainer-operator-production-0.2.0.yaml"),
    ],
)
def test_manifest_names(overlay: str, name: str) -> None:
    assert release.manifest_name(overlay, "0.2.0") == name


def test_the_overlay_is_rendered_with_one_images_entry() -> None:
    image = "registry.example.com:5000/acme/trainer-operator"
    assert release.kustomization("production", f"{image}:0.2.0") == (
        "resources:\n- ../../overlays/production\n"
        f"images:\n- name: trainer-operator\n  newName: {image}\n  newTag: 0.2.0\n"
    )


def test_the_krew_manifest_installs_the_launcher_its_wheels_and_the_license() -> None:
    manifest = release.krew_manifest("0.2.0", "https://example.com/kubectl-trainer-0.2.0.tar.gz", "ab" * 32)
    assert manifest["metadata"] == {"name": "trainer"}
    spec = manifest["spec"]
    assert isinstance(spec, dict)
    assert spec["version"] == "v0.2.0"  # krew wants the v
    (platform,) = spec["platforms"]
    assert platform["bin"] == "kubectl-trainer"
    assert platform["sha256"] == "ab" * 32
    assert [f["from"] for f in platform["files"]] == ["kubectl-trainer", "wheels", "LICENSE"]


def test_the_chart_holds_the_manifests_objects_with_the_image_a_value() -> None:
    image = "registry.example.com/acme/trainer-operator:0.2.0"
    rendered = f"kind: Deployment\nimage: {image}\n---\nkind: ConfigMap\ndata:\n  image: {image}\n  note: '{{{{x}}}}'\n"
    files = release.chart(rendered, image, "0.2.0")
    assert set(files) == {"Chart.yaml", "values.yaml", "templates/trainer-operator.yaml", "templates/NOTES.txt"}
    template = files["templates/trainer-operator.yaml"]
    assert template.count("image: {{ .Values.image.repository }}:{{ .Values.image.tag }}") == 2
    assert image not in template
    assert "note: '{{ \"{{\" }}x}}'" in template  # Helm prints it as it was
    values = yaml.safe_load(files["values.yaml"])
    assert values == {"image": {"repository": "registry.example.com/acme/trainer-operator", "tag": "0.2.0"}}
    chart = yaml.safe_load(files["Chart.yaml"])
    assert (chart["name"], chart["version"], chart["appVersion"]) == ("trainer-operator", "0.2.0", "0.2.0")

"""Every property of every CRD we serve has a description, so `kubectl explain` answers for every
field: every version, every depth, array items' and additionalProperties' properties; an object
whose fields the API server keeps unpruned (x-kubernetes-preserve-unknown-fields) is one property.
Not yet: the corev1.PodTemplateSpec inside the Kubeflow kinds' replica specs (issue 52), whose
descriptions hack/pod-template-schema.py drops (with them each of those CRDs would pass the 256 KiB
a client-side `kubectl apply` can hold)."""

from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CRD_DIRS = (REPO / "deploy" / "crds", REPO / "deploy" / "components" / "kubeflow" / "crds")
OURS = sorted((REPO / "deploy" / "crds").glob("*.yaml"))
KUBEFLOW = sorted((REPO / "deploy" / "components" / "kubeflow" / "crds").glob("*.yaml"))
# A replica type's corev1.PodTemplateSpec in the Kubeflow kinds (crdgen's pod_template_schema.json).
POD_TEMPLATE = "ReplicaSpecs{}.template."


def properties(node: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    """(path, schema) of every property under node: nested properties, array items' properties
    (path[]) and additionalProperties' properties (path{}), at every depth."""
    out: list[tuple[str, dict[str, Any]]] = []
    for name, prop in (node.get("properties") or {}).items():
        out.append((f"{path}.{name}", prop))
        out.extend(properties(prop, f"{path}.{name}"))
    for key, mark in (("items", "[]"), ("additionalProperties", "{}")):
        if isinstance(node.get(key), dict):
            out.extend(properties(node[key], path + mark))
    return out


def undescribed(crd_file: Path) -> tuple[int, list[str]]:
    """How many properties the CRD's versions have, and those without a description."""
    crd = yaml.safe_load(crd_file.read_text())
    if crd.get("kind") != "CustomResourceDefinition":
        return 0, []
    total, missing = 0, []
    for version in crd["spec"]["versions"]:
        props = properties(version["schema"]["openAPIV3Schema"])
        total += len(props)
        name = f"{crd['spec']['names']['kind']} {version['name']}"
        # The API server refuses a CRD whose schema says anything of metadata but its type.
        described = [(path, prop) for path, prop in props if path != ".metadata"]
        missing += [f"{name}: {path}" for path, prop in described if not str(prop.get("description") or "").strip()]
    return total, missing


def crd_files(files: list[Path]) -> list[Path]:
    return [f for f in files if yaml.safe_load(f.read_text()).get("kind") == "CustomResourceDefinition"]


def test_the_walk_reaches_every_kind_of_property() -> None:
    schema = {
        "type": "object",
        "properties": {
            "list": {"type": "array", "items": {"type": "object", "properties": {"a": {"type": "string"}}}},
            "map": {
                "type": "object",
                "additionalProperties": {"type": "object", "properties": {"b": {"type": "string"}}},
            },
            "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True, "description": "kept as is"},
            "deep": {
                "type": "object",
                "properties": {"c": {"type": "object", "properties": {"d": {"type": "integer"}}}},
            },
        },
    }
    paths = [p for p, _ in properties(schema)]
    assert paths == [".list", ".list[].a", ".map", ".map{}.b", ".free", ".deep", ".deep.c", ".deep.c.d"]


def test_every_served_crd_is_checked() -> None:
    for directory in CRD_DIRS:
        assert crd_files(sorted(directory.glob("*.yaml"))), f"no CRD in {directory}"
    assert all(undescribed(f)[0] > 0 for f in crd_files(OURS + KUBEFLOW))


@pytest.mark.parametrize("crd_file", crd_files(OURS), ids=lambda f: f.name)
def test_every_property_of_our_crds_has_a_description(crd_file: Path) -> None:
    total, missing = undescribed(crd_file)
    assert not missing, f"{len(missing)} of {total} properties have no description:\n" + "\n".join(missing)


@pytest.mark.parametrize("crd_file", crd_files(KUBEFLOW), ids=lambda f: f.name)
def test_every_kubeflow_property_outside_the_pod_template_has_a_description(crd_file: Path) -> None:
    total, missing = undescribed(crd_file)
    missing = [m for m in missing if POD_TEMPLATE not in m]
    assert not missing, f"{len(missing)} of {total} properties have no description:\n" + "\n".join(missing)

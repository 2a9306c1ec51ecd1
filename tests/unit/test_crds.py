"""The CRDs in deploy/crds are generated from the models and fit Kubernetes' rules."""

from pathlib import Path
from typing import Any

import pytest

from trainerop_common import crdgen
from trainerop_common.api import CATEGORY, KINDS, KUBEFLOW_KINDS, KindInfo

REPO = Path(__file__).resolve().parents[2]


def walk(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    out = []
    if isinstance(node, dict):
        out.append((path, node))
        for key, value in node.items():
            out.extend(walk(value, f"{path}.{key}"))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            out.extend(walk(value, f"{path}[{i}]"))
    return out


def test_deploy_crds_are_not_stale() -> None:
    stale = crdgen.stale_files(REPO / "deploy" / "crds")
    assert stale == [], f"run: python -m trainerop_common.crdgen deploy/crds  (stale: {stale})"


def test_staleness_is_detected(tmp_path: Path) -> None:
    crdgen.write(tmp_path)
    assert crdgen.stale_files(tmp_path) == []
    target = tmp_path / "trainer.operator.kubeflow.org_trainers.yaml"
    target.write_text(target.read_text().replace("minimum: 1", "minimum: 0", 1))
    (tmp_path / "leftover.yaml").write_text("{}")
    assert crdgen.stale_files(tmp_path) == ["leftover.yaml", target.name]


@pytest.mark.parametrize("info", KINDS, ids=lambda i: i.kind)
def test_every_kind_is_discoverable_like_a_builtin(info: KindInfo) -> None:
    crd = crdgen.crd(info)
    names = crd["spec"]["names"]
    assert CATEGORY in names["categories"]
    assert names["shortNames"]
    version = crd["spec"]["versions"][0]
    assert version["additionalPrinterColumns"], "kubectl get must say what it is doing"
    assert ("status" in version.get("subresources", {})) is info.has_status


@pytest.mark.parametrize("info", KINDS, ids=lambda i: i.kind)
def test_schema_is_structural(info: KindInfo) -> None:
    schema = crdgen.crd(info)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in walk(schema):
        if path.endswith(".x-kubernetes-validations") or ".x-kubernetes-validations[" in path:
            continue
        for keyword in ("$ref", "$defs", "title"):
            assert keyword not in node, path
        if "anyOf" in node:
            assert node.get("x-kubernetes-int-or-string") is True, path
        if "properties" in node or "additionalProperties" in node:
            assert node.get("type") == "object", path
        assert node.get("additionalProperties") is not False, path


@pytest.mark.parametrize("info", [i for i in KINDS if i.has_status], ids=lambda i: i.kind)
def test_status_has_no_defaults_and_conditions_are_a_list_map(info: KindInfo) -> None:
    status = crdgen.crd(info)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    assert all("default" not in node for _, node in walk(status))
    conditions = status["properties"]["conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    assert "observedGeneration" in conditions["items"]["properties"]


def test_trainer_scales_through_its_workers() -> None:
    trainer = next(i for i in KINDS if i.kind == "Trainer")
    scale = crdgen.crd(trainer)["spec"]["versions"][0]["subresources"]["scale"]
    assert scale == {
        "specReplicasPath": ".spec.topology.workers",
        "statusReplicasPath": ".status.topology.workers",
        "labelSelectorPath": ".status.topology.selector",
    }


def test_audit_log_spec_is_immutable() -> None:
    audit = next(i for i in KINDS if i.kind == "AuditLog")
    spec = crdgen.crd(audit)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert {"rule": "self == oldSelf", "message": "AuditLog records are immutable"} in spec["x-kubernetes-validations"]


def test_a_fields_own_rules_keep_its_models_rules() -> None:
    """spec.model is immutable (the field's rule) and its source's credentials must match its scheme
    (the model's rules): both hold, neither replaces the other."""
    trainer = next(i for i in KINDS if i.kind == "Trainer")
    spec = crdgen.crd(trainer)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    rules = [r["rule"] for r in spec["properties"]["model"]["x-kubernetes-validations"]]
    assert "self == oldSelf" in rules
    assert "!self.source.startsWith('s3://') || has(self.credentialsSecret)" in rules


@pytest.mark.parametrize("info", KUBEFLOW_KINDS, ids=lambda i: i.kind)
def test_kubeflow_jobs_are_served_as_upstream_serves_them(info: KindInfo) -> None:
    crd = crdgen.crd(info)
    assert crd["metadata"]["name"] == f"{info.plural}.kubeflow.org"
    assert crd["spec"]["group"] == "kubeflow.org"
    assert "shortNames" not in crd["spec"]["names"]  # upstream has none; no category of ours either
    (version,) = crd["spec"]["versions"]
    assert version["name"] == "v1"
    assert [c["name"] for c in version["additionalPrinterColumns"]] == ["State", "Age"]
    assert version["additionalPrinterColumns"][0]["jsonPath"] == ".status.conditions[-1:].type"
    schema = version["schema"]["openAPIV3Schema"]
    specs = next(v for k, v in schema["properties"]["spec"]["properties"].items() if k.endswith("ReplicaSpecs"))
    template = specs["additionalProperties"]["properties"]["template"]
    containers = template["properties"]["spec"]["properties"]["containers"]
    assert containers["x-kubernetes-list-map-keys"] == ["name"]  # a pod template, as the API server knows it
    assert set(template["properties"]["metadata"]["properties"]) == {
        "annotations",
        "finalizers",
        "labels",
        "name",
        "namespace",
    }
    for path, node in walk(schema):
        if "anyOf" in node:
            assert node.get("x-kubernetes-int-or-string") is True, path
        if "properties" in node or "additionalProperties" in node:
            assert node.get("type") == "object", path
        extensions = {k for k in node if k.startswith("x-") and not path.endswith("x-kubernetes-validations")}
        assert extensions <= crdgen.CRD_EXTENSIONS, (path, extensions)


def test_the_scale_of_a_pytorchjob_is_its_workers() -> None:
    pytorch = next(i for i in KUBEFLOW_KINDS if i.kind == "PyTorchJob")
    assert crdgen.crd(pytorch)["spec"]["versions"][0]["subresources"]["scale"] == {
        "specReplicasPath": ".spec.pytorchReplicaSpecs.Worker.replicas",
        "statusReplicasPath": ".status.replicaStatuses.Worker.active",
        "labelSelectorPath": ".status.replicaStatuses.Worker.selector",
    }


@pytest.mark.parametrize("info", KINDS, ids=lambda i: i.kind)
def test_every_kind_is_served_as_v1alpha1_and_v1_and_stored_as_v1(info: KindInfo) -> None:
    versions = crdgen.crd(info)["spec"]["versions"]
    assert [(v["name"], v["served"], v["storage"]) for v in versions] == [("v1alpha1", True, False), ("v1", True, True)]
    first, stable = versions
    # The API server converts by apiVersion alone: only the same schema round-trips every field.
    assert {k: v for k, v in first.items() if k not in ("name", "storage")} == {
        k: v for k, v in stable.items() if k not in ("name", "storage")
    }

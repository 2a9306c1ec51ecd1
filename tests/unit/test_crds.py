"""The CRDs in deploy/crds are generated from the models and fit Kubernetes' rules."""

from pathlib import Path
from typing import Any

import pytest

from trainerop_common import crdgen
from trainerop_common.api import CATEGORY, KINDS, KindInfo

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

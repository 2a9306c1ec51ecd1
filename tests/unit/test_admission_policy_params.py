"""An admission policy with a parameter matches only objects labelled as the operator's: when the
API server cannot find the parameter it refuses what the policy matches (parameterNotFoundAction
Deny), and it loses a ConfigMap parameter for good when the policy's last binding is deleted and
made again in the same process (kubernetes/kubernetes#130887: an uninstall, then an install). A
policy with a parameter matching every pod refused every pod of the cluster after a reinstall
(found by tests/quickstart)."""

from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]


def parameterised() -> list[tuple[str, dict[str, Any]]]:
    """Every ValidatingAdmissionPolicy with a paramKind under deploy/, by file."""
    found = []
    for path in sorted((REPO / "deploy").rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "ValidatingAdmissionPolicy" and "paramKind" in doc["spec"]:
                found.append((str(path.relative_to(REPO)), doc))
    return found


def selects_labelled_objects_only(constraints: dict[str, Any]) -> bool:
    selector = constraints.get("objectSelector") or {}
    return bool(selector.get("matchLabels") or selector.get("matchExpressions"))


def test_the_checkpoint_image_policy_is_among_them() -> None:
    assert "trainer-operator-checkpoint-storage-pod-image" in [doc["metadata"]["name"] for _, doc in parameterised()]


def named(value: object) -> str:
    return value if isinstance(value, str) else str(value["metadata"]["name"])  # type: ignore[index]


@pytest.mark.parametrize(("path", "policy"), parameterised(), ids=named)
def test_a_policy_with_a_parameter_matches_labelled_objects_only(path: str, policy: dict[str, Any]) -> None:
    assert selects_labelled_objects_only(policy["spec"]["matchConstraints"]), (
        f"{path}: {policy['metadata']['name']} has a paramKind; give its matchConstraints an objectSelector"
    )


@pytest.mark.parametrize(
    ("constraints", "selective"),
    [
        ({"resourceRules": []}, False),
        ({"objectSelector": {}}, False),
        ({"objectSelector": {"matchExpressions": [{"key": "a", "operator": "Exists"}]}}, True),
        ({"objectSelector": {"matchLabels": {"a": "b"}}}, True),
    ],
)
def test_what_counts_as_labelled_objects_only(constraints: dict[str, Any], selective: bool) -> None:
    assert selects_labelled_objects_only(constraints) is selective

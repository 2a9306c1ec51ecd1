"""The admission policy trainer-operator-status-sections says what each controller's StatusSection
says (docs/design/status-protocol.md), and compares every field of the Trainer's status: a new
section, field or condition type cannot be left out of it unnoticed."""

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from trainerop_audit.decide import SECTION as AUDIT
from trainerop_checkpoint.decide import SECTION as CHECKPOINT
from trainerop_common.outcome import StatusSection
from trainerop_profile.decide import SECTION as PROFILE
from trainerop_quota.model import SECTION as QUOTA
from trainerop_trainer.run import SECTION as TRAINER
from trainerop_verify.decide import SECTION as VERIFY

REPO = Path(__file__).resolve().parents[2]
POLICY = REPO / "deploy/base/status-sections-policy.yaml"
CRD = REPO / "deploy/crds/trainer.operator.kubeflow.org_trainers.yaml"
SECTIONS: dict[str, StatusSection] = {
    "trainer": TRAINER,
    "profile": PROFILE,
    "quota": QUOTA,
    "checkpoint": CHECKPOINT,
    "audit": AUDIT,
    "verify": VERIFY,
}


def variables() -> dict[str, str]:
    policy = next(d for d in yaml.safe_load_all(POLICY.read_text()) if d["kind"] == "ValidatingAdmissionPolicy")
    return {v["name"]: v["expression"] for v in policy["spec"]["variables"]}


def status_fields() -> set[str]:
    crd: dict[str, Any] = yaml.safe_load(CRD.read_text())
    fields: set[str] = set()
    for version in crd["spec"]["versions"]:
        fields |= set(version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"])
    return fields - {"conditions"}


@pytest.mark.parametrize("controller", sorted(SECTIONS))
def test_each_controllers_section_in_the_policy_is_its_status_section(controller: str) -> None:
    section = SECTIONS[controller]
    assert json.loads(variables()["fields"])[controller] == list(section.fields)
    assert sorted(json.loads(variables()["conditionTypes"])[controller]) == sorted(section.conditions)


def test_the_policy_names_no_controller_without_a_section() -> None:
    assert set(json.loads(variables()["fields"])) == set(SECTIONS)
    assert set(json.loads(variables()["conditionTypes"])) == set(SECTIONS)


def test_the_policy_compares_every_field_of_a_trainers_status() -> None:
    changed = variables()["changed"]
    compared = {f for f in status_fields() if f"object.?status.?{f} != oldObject.?status.?{f}" in changed}
    assert compared == status_fields()
    owned = {f for section in SECTIONS.values() for f in section.fields}
    assert owned == status_fields()  # every field has its owner

import logging

import kopf

from trainerop_common import kopf_settings
from trainerop_common.config import ControllerConfig

CONTROLLERS = ("trainer", "profile", "checkpoint", "quota", "audit")


def settings_for(controller: str, **kw: object) -> kopf.OperatorSettings:
    settings = kopf.OperatorSettings()
    kopf_settings.apply(settings, ControllerConfig(controller=controller, **kw))  # type: ignore[arg-type]
    return settings


def test_each_controller_has_its_own_finalizer_and_storage_prefix() -> None:
    finalizers = {settings_for(c).persistence.finalizer for c in CONTROLLERS}
    assert len(finalizers) == 5
    assert all(f.startswith("trainer.operator.kubeflow.org/") for f in finalizers)
    prefixes = {kopf_settings.annotation_prefix(c) for c in CONTROLLERS}
    assert len(prefixes) == 5
    assert all(p.endswith(".trainer.operator.kubeflow.org") for p in prefixes)


def test_events_are_posted_from_warning_up_with_the_controller_as_source() -> None:
    s = settings_for("quota", pod_name="quota-abc")
    assert s.posting.level == logging.WARNING
    assert s.posting.reporting_component == "trainer-operator-quota"
    assert s.posting.reporting_instance == "quota-abc"


def test_peering_is_opt_in_and_per_controller() -> None:
    assert settings_for("audit").peering.standalone is True
    peered = settings_for("audit", peering=True, peering_priority=7, peering_lifetime=5)
    assert peered.peering.mandatory is True
    assert peered.peering.name == "trainer-operator-audit"
    assert (peered.peering.priority, peered.peering.lifetime) == (7, 5)


def test_replicas_draw_different_priorities_unless_one_is_set() -> None:
    assert len({settings_for("audit", peering=True).peering.priority for _ in range(5)}) > 1
    assert settings_for("audit", peering=True, peering_priority=3).peering.priority == 3

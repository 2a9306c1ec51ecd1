import json
import logging

import kopf
import kopf._cogs.clients.api as kopf_api
import orjson
import pytest

from trainerop_common import kopf_settings
from trainerop_common.config import ControllerConfig

CONTROLLERS = ("trainer", "profile", "checkpoint", "quota", "audit", "verify")


def settings_for(controller: str, **kw: object) -> kopf.OperatorSettings:
    settings = kopf.OperatorSettings()
    kopf_settings.apply(settings, ControllerConfig(controller=controller, **kw))  # type: ignore[arg-type]
    return settings


def test_each_controller_has_its_own_finalizer_and_storage_prefix() -> None:
    finalizers = {settings_for(c).persistence.finalizer for c in CONTROLLERS}
    assert len(finalizers) == len(CONTROLLERS)
    assert all(f.startswith("trainer.operator.kubeflow.org/") for f in finalizers)
    prefixes = {kopf_settings.annotation_prefix(c) for c in CONTROLLERS}
    assert len(prefixes) == len(CONTROLLERS)
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


def test_a_replicas_priority_is_its_pods_unless_one_is_set() -> None:
    """Stable across restarts of the process in its pod, different between pods."""
    pods = [f"trainer-operator-audit-7d9f-{suffix}" for suffix in ("x2k4p", "q8w1z", "m3n5b")]
    first = [settings_for("audit", peering=True, pod_name=pod).peering.priority for pod in pods]
    again = [settings_for("audit", peering=True, pod_name=pod).peering.priority for pod in pods]
    assert first == again
    assert len(set(first)) == len(pods)
    assert all(1 <= p <= 1_000_000 for p in first)
    assert settings_for("audit", peering=True, peering_priority=3, pod_name=pods[0]).peering.priority == 3


@pytest.mark.parametrize(
    ("labels", "selector"),
    [
        (None, None),
        ({}, None),
        ({"trainer-name": kopf.PRESENT}, "trainer-name"),
        ({"purpose": "verify", "a": kopf.ABSENT}, "!a,purpose=verify"),
        ({"trainer-name": lambda value, **_: True}, None),  # a callable stays client-side
    ],
)
def test_label_filters_as_server_side_selectors(labels: dict[str, object] | None, selector: str | None) -> None:
    assert kopf_settings.label_selector(labels) == selector


def handle(**_: object) -> None:
    return None


def test_a_resource_is_filtered_on_the_server_only_when_every_handler_filters_it_alike() -> None:
    registry = kopf.OperatorRegistry()
    kopf.on.event("v1", "pods", labels={"purpose": kopf.PRESENT}, registry=registry)(handle)
    kopf.on.event("", "v1", "pods", labels={"purpose": kopf.PRESENT}, id="again", registry=registry)(handle)
    kopf.on.event("v1", "persistentvolumeclaims", labels={"a": "1"}, registry=registry)(handle)
    kopf.on.event("v1", "persistentvolumeclaims", id="all", registry=registry)(handle)  # needs every claim
    kopf.on.event("v1", "nodes", labels={"a": "1"}, registry=registry)(handle)
    kopf.on.event("v1", "nodes", labels={"b": "1"}, id="other", registry=registry)(handle)
    settings = kopf.OperatorSettings()
    assert kopf_settings.filter_on_server(settings, registry) == {"pods": "purpose"}
    assert list(settings.watching.label_selectors.values()) == ["purpose"]


WATCH_LINE = (
    '{"type":"MODIFIED","object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"t-worker-0",'
    '"resourceVersion":"18446744","labels":{"trainer-name":"t"},"annotations":{"note":"caf\\u00e9 \\ud83d\\ude80"}},'
    '"spec":{"priority":2147483647,"overhead":null,"activeDeadlineSeconds":0.5},"status":{"phase":"Running",'
    '"conditions":[{"type":"Ready","status":"True"}],"containerStatuses":[]}}}'
)


def test_kopf_decodes_watch_streams_with_orjson_into_the_same_values() -> None:
    settings_for("trainer")
    decoder = getattr(kopf_api, "json")  # noqa: B009 (kopf exports no name for it)
    assert decoder.loads is orjson.loads  # what kopf's stream() calls for every line
    assert decoder.loads(WATCH_LINE) == json.loads(WATCH_LINE)
    assert decoder.JSONDecodeError is json.JSONDecodeError  # the rest of the module is the standard one
    settings_for("quota")  # applied twice: still one replacement
    assert getattr(kopf_api, "json") is decoder  # noqa: B009

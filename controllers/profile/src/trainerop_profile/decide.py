"""The profile controller's decision core: pure, table-tested, no I/O.

A Trainer without ``spec.profile`` passes the gate at once (reason NoProfile). A Trainer that
names a profile gets the profile's settings as a pod contribution (DESIGN §3), or a False
condition that says what to fix when the profile does not exist.
"""

from dataclasses import dataclass
from typing import Any

from trainerop_common.api import Contribution, PodContribution
from trainerop_common.api.profile import TrainingProfileSpec
from trainerop_common.conditions import Desired

CONDITION = "ProfileResolved"
OWNED_FIELDS = ("profile",)
SECRET_VOLUME = "profile-runtime-secret"


@dataclass(frozen=True)
class Decision:
    status: dict[str, Any]
    conditions: tuple[Desired, ...]
    problem: Desired | None = None  # set when the user must fix something (an Event is posted)


def contribution(spec: TrainingProfileSpec, generation: int) -> Contribution:
    pod = PodContribution(
        env=list(spec.env_vars) if spec.env_vars else None,
        node_selector=dict(spec.node_selector) if spec.node_selector else None,
        tolerations=list(spec.tolerations) if spec.tolerations else None,
        resources=spec.resources,
    )
    if spec.runtime_config is not None:
        pod.volumes = [{"name": SECRET_VOLUME, "secret": {"secretName": spec.runtime_config.secret}}]
        pod.volume_mounts = [{"name": SECRET_VOLUME, "mountPath": spec.runtime_config.mount_path, "readOnly": True}]
    return Contribution(generation=generation, pod=pod)


def decide(namespace: str, profile_name: str | None, profile: TrainingProfileSpec | None, generation: int) -> Decision:
    if not profile_name:
        return Decision(status={}, conditions=(Desired.true(CONDITION, "NoProfile", "spec.profile is not set"),))
    if profile is None:
        problem = Desired.false(
            CONDITION,
            "ProfileNotFound",
            f"TrainingProfile {profile_name!r} does not exist in namespace {namespace!r}; "
            "create it or change spec.profile",
        )
        return Decision(status={"profile": {"name": profile_name}}, conditions=(problem,), problem=problem)
    section = {"name": profile_name, "contribution": contribution(profile, generation).to_k8s()}
    return Decision(
        status={"profile": section},
        conditions=(Desired.true(CONDITION, "Resolved", f"TrainingProfile {profile_name!r} applied"),),
    )

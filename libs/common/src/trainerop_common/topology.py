"""A run's roles and replica counts, and its *effective* topology: the spec as it runs after the
quota grant (pure). One definition for the trainer (which pods exist, and so how many shards a
checkpoint has), the quota controller (what a run reserves) and the profile controller and the
webhooks (which roles a run has)."""

from collections.abc import Mapping
from typing import Any

from pydantic.alias_generators import to_camel

from .api.base import ROLE_NAMES, Grant, ResourceRequirements, RestartPolicy, RoleName
from .api.trainer import MASTER_FRAMEWORKS, TrainerSpec

Role = RoleName
ROLES: tuple[Role, ...] = ROLE_NAMES


# The spec.podTemplateOverrides field (its Python name) that shapes each role's pods.
OVERRIDE_FIELDS: dict[Role, str] = {
    "master": "master",
    "worker": "worker",
    "ps": "parameter_server",
    "chief": "chief",
    "evaluator": "evaluator",
}


def override_name(role: Role) -> str:
    """The role's field of spec.podTemplateOverrides as the user writes it (parameterServer)."""
    return to_camel(OVERRIDE_FIELDS[role])


def role_override(spec: TrainerSpec, role: Role) -> Mapping[str, Any] | None:
    """The role's pod template override (a PodTemplateSpec fragment), if the Trainer has one."""
    overrides = spec.pod_template_overrides
    fragment = getattr(overrides, OVERRIDE_FIELDS[role]) if overrides is not None else None
    return fragment or None


def has_master(spec: TrainerSpec) -> bool:
    """topology.master as set; unset: pytorch and xgboost runs have a master, except elastic
    pytorch (rendezvous on worker 0)."""
    if spec.topology.master is not None:
        return spec.topology.master == 1
    elastic_pytorch = spec.framework == "pytorch" and spec.topology.elastic is not None
    return spec.framework in MASTER_FRAMEWORKS and not elastic_pytorch


def leader(spec: TrainerSpec) -> Role | None:
    """The replica whose success ends the run by default: the master, else the chief."""
    if has_master(spec):
        return "master"
    return "chief" if spec.topology.chief else None


def is_master_replica(spec: TrainerSpec, role: Role, index: int) -> bool:
    """Kubeflow's master role: the master or chief where the run has one, else worker 0."""
    first = leader(spec)
    return role == first if first is not None else (role, index) == ("worker", 0)


def restart_policy(spec: TrainerSpec, role: Role) -> RestartPolicy | None:
    """The role's restart policy: runPolicy.restartPolicies', else runPolicy.restartPolicy (None:
    the profile's or the default, which the caller resolved into the spec)."""
    own = (spec.run_policy.restart_policies or {}).get(role)
    return own or spec.run_policy.restart_policy


def role_counts(spec: TrainerSpec, workers: int | None = None) -> dict[Role, int]:
    """Replicas per role, with ``workers`` workers (default: the spec's)."""
    return {
        "master": 1 if has_master(spec) else 0,
        "worker": spec.topology.workers if workers is None else workers,
        "ps": spec.topology.parameter_servers,
        "chief": spec.topology.chief or 0,
        "evaluator": spec.topology.evaluators or 0,
    }


def worker_bounds(spec: TrainerSpec) -> tuple[int, int]:
    """The fewest and most workers the run may be admitted with."""
    elastic = spec.topology.elastic
    most = spec.topology.workers
    return (min(elastic.min_workers, most) if elastic else most), most


def shard_writers(spec: TrainerSpec) -> int:
    """Replicas that write a checkpoint shard each: the workers, the master and the chief (not
    parameter servers or evaluators)."""
    counts = role_counts(spec)
    return counts["worker"] + counts["master"] + counts["chief"]


def effective(spec: TrainerSpec, grant: Grant | None) -> TrainerSpec:
    """The spec as the run is admitted: at most the granted workers, and the granted per-pod
    resources over the Trainer's own. ``kubectl scale`` changes the spec itself."""
    if grant is None:
        return spec
    update: dict[str, Any] = {}
    if grant.workers < spec.topology.workers:
        update["topology"] = spec.topology.model_copy(update={"workers": grant.workers})
    if grant.resources is not None:
        own = spec.resources or ResourceRequirements()
        update["resources"] = ResourceRequirements(
            requests={**(own.requests or {}), **(grant.resources.requests or {})} or None,
            limits={**(own.limits or {}), **(grant.resources.limits or {})} or None,
        )
    return spec.model_copy(update=update) if update else spec

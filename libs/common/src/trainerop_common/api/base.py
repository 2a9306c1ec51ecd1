"""Building blocks shared by every API kind: the camelCase base model, quantities, conditions.

The pydantic models are the single source of truth for the CRDs in ``deploy/crds``
(see :mod:`trainerop_common.crdgen`). Schema-only facts that pydantic cannot express
(CEL rules, list-map keys, int-or-string) travel in ``json_schema_extra``.
"""

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, WithJsonSchema
from pydantic.alias_generators import to_camel
from pydantic.config import JsonDict

from trainerop_sdk.names import DNS_SUBDOMAIN, MAX_NAME

CATEGORY = "trainer-operator"


class K8sModel(BaseModel):
    """A Kubernetes-style object fragment: camelCase on the wire, snake_case in Python.

    Unknown fields are ignored when parsing so that an older controller can read an object
    written by a newer API version; the API server prunes unknown fields on write anyway.
    """

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")

    def to_k8s(self) -> dict[str, Any]:
        """The object as the API server wants it: camelCase keys, unset fields left out."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


def cel(rule: str, message: str, **extra: str) -> JsonDict:
    """One ``x-kubernetes-validations`` entry."""
    return {"rule": rule, "message": message, **extra}


def list_map(key: str, max_items: int, **extra: Any) -> JsonDict:
    """A list whose items are keyed by ``key`` (server-side apply merges it item by item, each
    manager owning its own items), of at most ``max_items``."""
    return {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": [key], "maxItems": max_items, **extra}


# A non-negative Kubernetes resource quantity ("500m", "40Gi", 8). The pattern is the one the API
# server uses for resource.Quantity, without the minus sign; the schema checks a string with it and
# an integer with minimum 0, as controller-gen's schemas of resource.Quantity do. No CEL rule: the
# API server of Kubernetes 1.30 costs a rule on an int-or-string value as if its string were
# unbounded and refuses the CRD (found by python -m testbed.versions smoke).
NON_NEGATIVE_QUANTITY = (
    r"^\+?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)


def _check_quantity(value: int | str) -> int | str:
    if isinstance(value, int):
        if value < 0:
            raise ValueError("a quantity must not be negative")
        return value
    if not re.match(NON_NEGATIVE_QUANTITY, value):
        raise ValueError(f"{value!r} is not a non-negative quantity such as 500m, 4 or 40Gi")
    return value


QUANTITY_SCHEMA: dict[str, Any] = {
    "anyOf": [{"type": "integer"}, {"type": "string"}],
    "x-kubernetes-int-or-string": True,
    "maxLength": 64,
    "minimum": 0,
    "pattern": NON_NEGATIVE_QUANTITY,
}

Quantity = Annotated[int | str, AfterValidator(_check_quantity), WithJsonSchema(QUANTITY_SCHEMA)]

# Resource maps are bounded so that the API server can estimate the cost of the CEL rule.
ResourceList = Annotated[dict[str, Quantity], Field(json_schema_extra={"maxProperties": 16})]

ObjectName = Annotated[str, Field(min_length=1, max_length=MAX_NAME, pattern=DNS_SUBDOMAIN)]

# Free-form Kubernetes structures (volumes, affinity, valueFrom...) are kept as objects whose
# inner schema the API server does not prune; the controllers validate them when used.
FreeForm = Annotated[
    dict[str, Any],
    WithJsonSchema({"type": "object", "x-kubernetes-preserve-unknown-fields": True}),
]

ConditionStatus = Literal["True", "False", "Unknown"]
RestartPolicy = Literal["Never", "OnFailure", "Always", "ExitCode"]
PluginChoice = Literal["Ask", "Skip"]  # whether the quota controller asks its placement plugin


class Condition(K8sModel):
    """A metav1.Condition: one entry of ``status.conditions``, keyed by ``type``."""

    type: str = Field(
        min_length=1, max_length=316, description="The condition's type in CamelCase (e.g. Ready); one entry per type."
    )
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: str = Field(min_length=1, max_length=1024, description="CamelCase reason code.")
    message: str = Field(default="", max_length=32768, description="Details of the transition, for a person.")
    last_transition_time: str = Field(
        json_schema_extra={"format": "date-time"},
        description="When status last changed; untouched while status stays the same.",
    )
    observed_generation: int = Field(
        default=0, ge=0, description="metadata.generation this condition was computed for."
    )


Conditions = Annotated[
    list[Condition],
    Field(json_schema_extra=list_map("type", 32), description="The latest observations of the object, one per type."),
]


class EnvVar(K8sModel):
    """An environment variable for training containers (corev1.EnvVar)."""

    name: str = Field(min_length=1, max_length=256, description="corev1.EnvVar name: the variable's name.")
    value: str | None = Field(
        default=None, description="corev1.EnvVar value: the literal value (unset: valueFrom's, else empty)."
    )
    value_from: FreeForm | None = Field(
        default=None, description="corev1.EnvVarSource: secretKeyRef, configMapKeyRef, fieldRef..."
    )


EnvList = Annotated[list[EnvVar], Field(json_schema_extra=list_map("name", 256))]


class Toleration(K8sModel):
    """corev1.Toleration."""

    key: str | None = Field(default=None, description="The taint key it matches; empty with Exists: every key.")
    operator: Literal["Exists", "Equal"] | None = Field(
        default=None, description="Equal (the default): the taint's value must be value; Exists: any value."
    )
    value: str | None = Field(default=None, description="The taint value it matches (Equal); empty with Exists.")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        default=None, description="The taint effect it matches; empty: every effect."
    )
    toleration_seconds: int | None = Field(
        default=None,
        description="NoExecute only: seconds the pod stays bound after the taint is added (unset: forever).",
    )


class ResourceRequirements(K8sModel):
    """Requests and limits of a training container (corev1.ResourceRequirements)."""

    requests: ResourceList | None = Field(
        default=None, description="Resource name (cpu, memory, nvidia.com/gpu...) -> the quantity each container needs."
    )
    limits: ResourceList | None = Field(
        default=None, description="Resource name -> the most each container may use (at least its request)."
    )


class PodSecurity(K8sModel):
    """Who the training pods run as (a profile sets or relaxes it; docs/profile.md). Unset fields keep
    the operator's default: any non-root user the image names (Pod Security "restricted")."""

    run_as_user: int | None = Field(
        default=None, ge=0, le=2147483647, description="corev1.PodSecurityContext runAsUser: the containers' user id."
    )
    run_as_group: int | None = Field(
        default=None, ge=0, le=2147483647, description="corev1.PodSecurityContext runAsGroup: their primary group id."
    )
    fs_group: int | None = Field(
        default=None,
        ge=0,
        le=2147483647,
        description="corev1.PodSecurityContext fsGroup: the group that owns the pods' volumes, added to the "
        "containers' groups.",
    )
    run_as_non_root: bool | None = Field(
        default=None, description="false lets an image run as root (the pods then fail a restricted namespace)."
    )


class PodContribution(K8sModel):
    """The restricted pod-spec fragment a concern may contribute to training pods (docs/design/contributions.md)."""

    env: list[EnvVar] | None = Field(default=None, description="Environment variables of the training containers.")
    volumes: list[FreeForm] | None = Field(default=None, description="corev1.Volume entries added to the pods.")
    volume_mounts: list[FreeForm] | None = Field(
        default=None, description="corev1.VolumeMount entries added to the training containers."
    )
    node_selector: dict[str, str] | None = Field(
        default=None, description="Node labels the pods require (corev1.PodSpec nodeSelector)."
    )
    tolerations: list[Toleration] | None = Field(
        default=None, description="Taints the pods tolerate (corev1.PodSpec tolerations)."
    )
    affinity: FreeForm | None = Field(default=None, description="corev1.Affinity of the pods.")
    service_account_name: str | None = Field(default=None, description="The ServiceAccount the pods run as.")
    resources: ResourceRequirements | None = None
    annotations: dict[str, str] | None = Field(default=None, description="Annotations added to the pods.")
    labels: dict[str, str] | None = Field(default=None, description="Labels added to the pods.")
    security_context: PodSecurity | None = None
    scheduling_gates: list[Annotated[str, Field(min_length=1, max_length=316)]] | None = Field(
        default=None,
        max_length=8,
        description="Scheduling gates the pods are created with (names); whoever asked for one removes it "
        "from the pods (e.g. Kueue's topology ungater once it has chosen their domains).",
    )
    images: dict[str, Annotated[str, Field(min_length=1, max_length=1024)]] | None = Field(
        default=None,
        json_schema_extra={"maxProperties": 32},
        description="Image references as the Trainer writes them -> the reference by digest the pods pull "
        "instead (what the verify controller checked is what runs).",
    )


class RunPolicyDefaults(K8sModel):
    """Run-policy fields a concern proposes for a Trainer that leaves them unset."""

    restart_policy: RestartPolicy | None = Field(
        default=None,
        description="Never, OnFailure, Always or ExitCode (exit codes 1-127 permanent, 128-255 retryable); "
        "as a Trainer's spec.runPolicy.restartPolicy.",
    )
    backoff_limit: int | None = Field(
        default=None, ge=0, le=1000, description="Restarts before the run fails; as spec.runPolicy.backoffLimit."
    )


# The roles a run's replicas may have (trainerop_common.topology.Role).
RoleName = Literal["master", "worker", "ps", "chief", "evaluator"]
ROLE_NAMES: tuple[RoleName, ...] = ("master", "worker", "ps", "chief", "evaluator")


class Grant(K8sModel):
    """An admission the trainer controller applies over the Trainer's own spec (only the quota
    concern sets one). Pods carry the id they were created under; a pod of another id is replaced."""

    id: str = Field(min_length=1, max_length=63, description="Changes when the run must move (new placement).")
    workers: int = Field(ge=0, le=4096, description="Workers admitted (within the elastic bounds).")
    resources: ResourceRequirements | None = Field(
        default=None, description="Per-pod requests/limits lowered by the policy; they replace the Trainer's own."
    )
    placement: dict[str, Annotated[list[str], Field(max_length=4096)]] | None = Field(
        default=None,
        json_schema_extra={"maxProperties": len(ROLE_NAMES)},
        description="Node of each replica by role (master, worker, ps, chief, evaluator) and index, as admitted: "
        "a pod is created pinned to its node, so what was admitted is what the scheduler places (empty: not pinned).",
    )


class Contribution(K8sModel):
    """A concern's pod contribution and the Trainer generation it was computed for."""

    generation: int = Field(ge=0, description="The Trainer's metadata.generation it was computed for.")
    pod: PodContribution = Field(default_factory=PodContribution)
    run_policy: RunPolicyDefaults | None = Field(
        default=None, description="Defaults for spec.runPolicy fields the Trainer leaves unset."
    )
    grant: Grant | None = Field(default=None, description="The quota admission: worker count and placement id.")
    roles: dict[RoleName, PodContribution] | None = Field(
        default=None,
        json_schema_extra={"maxProperties": len(ROLE_NAMES)},
        description="Fragments for one role's pods only (master, worker, ps, chief, evaluator), merged over pod: "
        "an admission that sends roles to different nodes.",
    )

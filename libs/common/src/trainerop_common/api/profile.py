"""The ``TrainingProfile`` kind and its cluster-scoped twin ``ClusterTrainingProfile``: reusable
infrastructure settings (the "where") that a Trainer (the "what") points to by name."""

from pydantic import Field

from .base import (
    Conditions,
    EnvList,
    K8sModel,
    ObjectName,
    PluginChoice,
    PodSecurity,
    ResourceRequirements,
    RunPolicyDefaults,
    Toleration,
    cel,
)
from .model import ModelSpec
from .quota import Packing

# The rule for secret-looking variable names (docs/architecture.md), as RE2 for CEL (see trainerop_common.redaction).
SECRET_NAME_RE2 = "(?i)(token|key|secret|password|passwd)"


class RuntimeConfig(K8sModel):
    """A Secret from the Trainer's own namespace, mounted read-only into every training container."""

    secret: ObjectName = Field(description="The Secret's name (in the Trainer's namespace).")
    mount_path: str = Field(min_length=2, max_length=1024, pattern=r"^/.*", description="Absolute path.")


class RetryPolicy(RunPolicyDefaults):
    """Restart defaults for Trainers that use the profile (fields set in their own runPolicy win)."""


class TrainingProfileSpec(K8sModel):
    """Where and how a Trainer runs, separated from what it trains."""

    node_selector: dict[str, str] | None = Field(
        default=None,
        json_schema_extra={"maxProperties": 64},
        description="Node labels the training pods require (corev1.PodSpec nodeSelector).",
    )
    tolerations: list[Toleration] | None = Field(
        default=None,
        json_schema_extra={"maxItems": 64},
        description="Taints the training pods tolerate (corev1.PodSpec tolerations).",
    )
    runtime_config: RuntimeConfig | None = None
    env_vars: EnvList | None = Field(
        default=None,
        description="Environment variables of the training containers; a Trainer's own spec.env wins by name.",
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(
                    f"self.all(e, !has(e.value) || !e.name.matches('{SECRET_NAME_RE2}'))",
                    "envVars: a variable whose name contains token, key, secret or password must not have a "
                    "literal value (the operator copies profile values into Trainer status); use "
                    "valueFrom.secretKeyRef, or set it in the Trainer's own spec.env",
                )
            ]
        },
    )
    resources: ResourceRequirements | None = None
    retry_policy: RetryPolicy | None = None
    security_context: PodSecurity | None = Field(
        default=None,
        description="The training pods' user and groups; runAsNonRoot false lets an image run as root.",
    )
    placement_plugin: PluginChoice | None = Field(
        default=None,
        description="Whether the quota controller asks its placement plugin where this profile's runs go "
        "(Ask) or not (Skip); unset: the cluster's choice (--placement-plugin-default).",
    )
    packing: Packing | None = Field(
        default=None,
        description="Where in the interconnect its runs' pods go (as a Trainer's spec.scheduling.packing, "
        "which wins); unset: Preferred at the finest level.",
    )
    model: ModelSpec | None = Field(
        default=None,
        description="The weights its runs start from (as a Trainer's spec.model, which wins): docs/models.md.",
    )


class TrainingProfileStatus(K8sModel):
    """Written by the profile controller."""

    conditions: Conditions | None = None


class TrainingProfile(K8sModel):
    """A namespaced profile: usable by Trainers in its own namespace only."""

    spec: TrainingProfileSpec = Field(default_factory=TrainingProfileSpec)
    status: TrainingProfileStatus | None = None


class ClusterTrainingProfile(TrainingProfile):
    """A platform-wide profile: usable by Trainers in every namespace; the Secrets it names are
    always taken from the Trainer's own namespace."""

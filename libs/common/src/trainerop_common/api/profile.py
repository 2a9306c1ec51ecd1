"""The ``TrainingProfile`` kind: reusable infrastructure settings a Trainer points to."""

from typing import Literal

from pydantic import Field

from .base import Conditions, EnvList, K8sModel, ObjectName, ResourceRequirements, Toleration


class RuntimeConfig(K8sModel):
    """A Secret mounted into every training container."""

    secret: ObjectName
    mount_path: str = Field(min_length=2, max_length=1024, pattern=r"^/.*", description="Absolute path.")


class RetryPolicy(K8sModel):
    """Restart defaults for Trainers that use the profile (their own runPolicy wins)."""

    backoff_limit: int | None = Field(default=None, ge=0, le=1000)
    restart_policy: Literal["Never", "OnFailure", "Always", "ExitCode"] | None = None


class TrainingProfileSpec(K8sModel):
    """Where and how a Trainer runs, separated from what it trains."""

    node_selector: dict[str, str] | None = None
    tolerations: list[Toleration] | None = None
    runtime_config: RuntimeConfig | None = None
    env_vars: EnvList | None = None
    resources: ResourceRequirements | None = None
    retry_policy: RetryPolicy | None = None


class TrainingProfileStatus(K8sModel):
    """Written by the profile controller."""

    conditions: Conditions | None = None


class TrainingProfile(K8sModel):
    spec: TrainingProfileSpec = Field(default_factory=TrainingProfileSpec)
    status: TrainingProfileStatus | None = None

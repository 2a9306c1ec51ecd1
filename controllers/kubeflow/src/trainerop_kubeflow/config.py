"""The kubeflow controller's own flags (docs/controllers.md)."""

from dataclasses import dataclass

from trainerop_common.config import flag


@dataclass(frozen=True)
class KubeflowConfig:
    upstream_check_seconds: float = flag(
        30.0,
        "how long the answer to whether Kubeflow's own Training Operator is installed (its validating webhook "
        "of a job kind is registered) is trusted",
    )

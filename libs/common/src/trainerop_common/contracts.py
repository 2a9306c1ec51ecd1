"""What the trainer controller puts into training pods (docs/trainer.md) that other concerns must
know: the variables it sets itself (a contribution cannot set them: the operator's value wins; the
profile controller reports such a clash; a trainer unit test keeps the list complete), the
training container's name, and the labels and annotations on the pods.
"""

from collections.abc import Mapping
from dataclasses import dataclass

from trainerop_sdk.names import (
    AUDIT_TRAINER_LABEL,
    CHECKPOINT_REQUESTED_ANNOTATION,
    DEFAULT_CONTAINER_ANNOTATION,
    EPOCH_ANNOTATION,
    MAX_METRICS,
    METRIC_NAME,
    METRICS_ANNOTATION,
    REPLICA_INDEX_LABEL,
    REPLICA_TYPE_LABEL,
    SAVE_AT_STEP_ANNOTATION,
    SECONDS_PER_EPOCH_ANNOTATION,
    SECONDS_PER_STEP_ANNOTATION,
    STEP_ANNOTATION,
    STEPS_PER_BEAT_ANNOTATION,
    TOTAL_STEPS_ANNOTATION,
    TRAINER_NAME_LABEL,
    TRAINER_UID_LABEL,
    USER_REQUEST,
    save_request_id,
)

from .api import GROUP
from .api.trainer import Framework, TrainerSpec

__all__ = [
    "ADMISSION_ANNOTATION",
    "AUDIT_TRAINER_LABEL",
    "CHECKPOINT_REQUESTED_ANNOTATION",
    "CONCERNS",
    "CONTRACTS",
    "DEFAULT_CONTAINER_ANNOTATION",
    "EPOCH_ANNOTATION",
    "GATE_CONDITIONS",
    "GENERATION_ANNOTATION",
    "GRANT_RECHECK_SECONDS",
    "GRANT_WAIT_SECONDS",
    "KUBEFLOW_JOB_KIND_LABEL",
    "KUBEFLOW_JOB_NAME_LABEL",
    "KUBEFLOW_JOB_ROLE_LABEL",
    "KUBEFLOW_REPLICA_INDEX_LABEL",
    "KUBEFLOW_REPLICA_TYPE_LABEL",
    "MAX_METRICS",
    "METRICS_ANNOTATION",
    "METRIC_NAME",
    "NODE_ANNOTATION",
    "OPERATOR_ENV",
    "REPLICA_INDEX_LABEL",
    "REPLICA_TYPE_LABEL",
    "RUNNER_SERVICE_ACCOUNT",
    "SAVE_AT_STEP_ANNOTATION",
    "SECONDS_PER_EPOCH_ANNOTATION",
    "SECONDS_PER_STEP_ANNOTATION",
    "SECRET_READER_ROLES",
    "STEPS_PER_BEAT_ANNOTATION",
    "STEP_ANNOTATION",
    "TOTAL_STEPS_ANNOTATION",
    "TRAINER_NAME_LABEL",
    "TRAINER_UID_LABEL",
    "TRAINING_CONTAINER",
    "USER_REQUEST",
    "FrameworkContract",
    "asks",
    "awaiting_grant",
    "replica_index",
    "save_request_id",
    "set_by_operator",
]

# Kubeflow's default container names (TF_CONFIG only goes to "tensorflow").
TRAINING_CONTAINER = {
    "pytorch": "pytorch",
    "tensorflow": "tensorflow",
    "jax": "jax",
    "xgboost": "xgboost",
    "generic": "trainer",
}


@dataclass(frozen=True)
class FrameworkContract:
    """A framework's training container and rendezvous port, named as Kubeflow v1 names them."""

    container: str
    port_name: str
    port: int


CONTRACTS: dict[Framework, FrameworkContract] = {
    "pytorch": FrameworkContract(TRAINING_CONTAINER["pytorch"], "pytorchjob-port", 23456),
    "tensorflow": FrameworkContract(TRAINING_CONTAINER["tensorflow"], "tfjob-port", 2222),
    "jax": FrameworkContract(TRAINING_CONTAINER["jax"], "jaxjob-port", 6666),
    "xgboost": FrameworkContract(TRAINING_CONTAINER["xgboost"], "xgboostjob-port", 9999),
    "generic": FrameworkContract(TRAINING_CONTAINER["generic"], "trainer-port", 29500),
}


# The ServiceAccount training pods run as, one per namespace (made by the trainer controller).
RUNNER_SERVICE_ACCOUNT = "trainer-operator-runner"

# The gates whose controllers read the Secrets a Trainer names (the profile's, the checkpoint
# credentials), and the ClusterRole that allows it. The trainer controller binds each in a
# namespace when it meets a Trainer there (a RoleBinding of the same name, for that controller's
# ServiceAccount); it is never bound cluster-wide. A controller forbidden to read a new Trainer's
# Secret looks again for up to GRANT_WAIT_SECONDS before it says so: the binding is made by
# another process at the same moment.
SECRET_READER_ROLES = {
    "profile": "trainer-operator-profile-secret-check",
    "checkpoint": "trainer-operator-checkpoint-credentials",
}
GRANT_WAIT_SECONDS = 15.0
GRANT_RECHECK_SECONDS = 1.0


def awaiting_grant(forbidden: bool, age: float | None) -> bool:
    """A Secret of a Trainer this young that the controller may not read yet: the trainer
    controller is binding the Secrets' ClusterRole in its namespace; look again shortly."""
    return forbidden and age is not None and age < GRANT_WAIT_SECONDS


# The concerns beside the trainer, and the condition type each owns (the status protocol,
# docs/architecture.md): the trainer's gates. The audit concern records and never gates.
CONCERNS = ("profile", "quota", "checkpoint", "audit", "verify")
GATE_CONDITIONS = {
    "profile": "ProfileResolved",
    "quota": "QuotaAdmitted",
    "checkpoint": "CheckpointReady",
    "verify": "ImagesVerified",
}


def asks(spec: TrainerSpec, concern: str) -> bool:
    """Whether a Trainer of this spec gives ``concern`` something to decide: the profile concern
    only when ``spec.profile`` names one (admission has already put a namespace's default profile
    there), the checkpoint concern only when ``spec.checkpoint`` is set, quota and verify always
    (a QuotaPolicy or an ImagePolicy governs a namespace whatever the spec says). A concern not asked writes nothing
    about the Trainer and the trainer does not wait for it (docs/design/status-protocol.md)."""
    if concern == "profile":
        return bool(spec.profile)
    if concern == "checkpoint":
        return spec.checkpoint is not None
    return True


# The quota admission (status.quota.contribution.grant.id) a pod was created under; the trainer
# replaces pods of an earlier admission (the run moved to other capacity or lost its admission).
ADMISSION_ANNOTATION = f"{GROUP}/admission"
# The node the admission placed the pod's replica on (the pod is pinned to it by node affinity).
NODE_ANNOTATION = f"{GROUP}/node"
# The Trainer generation a pod was created for.
GENERATION_ANNOTATION = f"{GROUP}/generation"


# The labels Kubeflow's Training Operator v1 gives a job's pods; every Trainer's pods carry them
# too (the Trainer's name as the job's), so tools written for Kubeflow jobs find them.
KUBEFLOW_JOB_NAME_LABEL = "training.kubeflow.org/job-name"
KUBEFLOW_REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
KUBEFLOW_REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
KUBEFLOW_JOB_ROLE_LABEL = "training.kubeflow.org/job-role"  # "master" on the run's master replica
# On a Trainer that carries out a Kubeflow v1 job: the job's kind (the kubeflow controller watches only these).
KUBEFLOW_JOB_KIND_LABEL = f"{GROUP}/kubeflow-job-kind"

OPERATOR_ENV = frozenset(
    {
        # The operator's own contract, every framework.
        "TRAINER_NAME",
        "TRAINER_UID",
        "REPLICA_TYPE",
        "REPLICA_INDEX",
        "EPOCHS",
        "CHECKPOINT_DIR",
        "RESUME_FROM",
        "CHECKPOINT_REPLICATION_FACTOR",
        "CHECKPOINT_SHARDS",
        "CHECKPOINT_SHARD",
        "CHECKPOINT_INTERVAL_MINUTES",
        "POD_NAME",
        # Kubeflow-compatible rendezvous variables.
        "MASTER_ADDR",
        "MASTER_PORT",
        "WORLD_SIZE",
        "RANK",
        "TF_CONFIG",
        "COORDINATOR_ADDRESS",
        "COORDINATOR_PORT",
        "NUM_PROCESSES",
        "PROCESS_ID",
        "WORKER_PORT",
        "WORKER_ADDRS",
        "PYTHONUNBUFFERED",
    }
)
OPERATOR_ENV_PREFIXES = ("PET_",)  # torch elastic (torchrun) settings


def replica_index(labels: Mapping[str, str]) -> int:
    """A pod's replica index from its label (0 when missing or not a number: a pod that says
    nothing sensible still holds its place)."""
    index = str(labels.get(REPLICA_INDEX_LABEL, "0"))
    return int(index) if index.isdigit() else 0


def set_by_operator(name: str) -> bool:
    return name in OPERATOR_ENV or name.startswith(OPERATOR_ENV_PREFIXES)

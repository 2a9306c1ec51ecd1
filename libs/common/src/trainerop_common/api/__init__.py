"""API models of the Trainer Operator and the facts the CRDs are generated from."""

from dataclasses import dataclass, field
from typing import Any, Literal

from trainerop_sdk.names import API_VERSION, GROUP, VERSION

from .audit import AuditLog
from .base import (
    CATEGORY,
    Condition,
    Contribution,
    Grant,
    K8sModel,
    PodContribution,
    PodSecurity,
    RunPolicyDefaults,
)
from .checkpoint import Checkpoint
from .images import ImagePolicy
from .kubeflow import KUBEFLOW_GROUP, KUBEFLOW_VERSION, JAXJob, PyTorchJob, TFJob, XGBoostJob
from .profile import ClusterTrainingProfile, TrainingProfile
from .quota import QuotaPolicy
from .trainer import MAX_TRAINER_NAME, TRAINER_NAME_PATTERN, Trainer, TrainerSpec, TrainerStatus

__all__ = [
    "API_VERSION",
    "CATEGORY",
    "GROUP",
    "KINDS",
    "KUBEFLOW_KINDS",
    "STORAGE_VERSION",
    "VERSION",
    "AuditLog",
    "Checkpoint",
    "ClusterTrainingProfile",
    "Condition",
    "Contribution",
    "Grant",
    "ImagePolicy",
    "K8sModel",
    "KindInfo",
    "PodContribution",
    "PodSecurity",
    "QuotaPolicy",
    "RunPolicyDefaults",
    "Trainer",
    "TrainerSpec",
    "TrainerStatus",
    "TrainingProfile",
    "kind_info",
]


# The stable version of the operator's kinds: served beside v1alpha1 with the same schema, and the
# one the API server stores (a conversion of apiVersion alone, no webhook: docs/api.md, Versions).
STORAGE_VERSION = "v1"


@dataclass(frozen=True)
class PrinterColumn:
    name: str
    json_path: str
    type: Literal["string", "integer", "date", "boolean", "number"] = "string"
    priority: int = 0
    description: str = ""


@dataclass(frozen=True)
class KindInfo:
    """Everything the CRD of one kind needs beyond the model's schema."""

    kind: str
    plural: str
    model: type[K8sModel]
    scope: Literal["Namespaced", "Cluster"] = "Namespaced"
    short_names: tuple[str, ...] = ()
    columns: tuple[PrinterColumn, ...] = ()
    has_status: bool = True
    scale: dict[str, str] | None = None
    # Rules on the whole object; the only place metadata.name can be checked.
    root_rules: tuple[dict[str, str], ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)
    group: str = GROUP
    version: str = VERSION  # the version the operator's own clients speak
    categories: tuple[str, ...] = (CATEGORY,)
    # The versions served, and the one objects are stored in (docs/api.md, Versions).
    served: tuple[str, ...] = (VERSION, STORAGE_VERSION)
    storage: str = STORAGE_VERSION

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def crd_name(self) -> str:
        return f"{self.plural}.{self.group}"


def _cond(type_: str, field_: str) -> str:
    return f'.status.conditions[?(@.type=="{type_}")].{field_}'


AGE = PrinterColumn("Age", ".metadata.creationTimestamp", "date")
PROFILE_COLUMNS = (
    PrinterColumn("Restart-Policy", ".spec.retryPolicy.restartPolicy"),
    PrinterColumn("Backoff-Limit", ".spec.retryPolicy.backoffLimit", "integer"),
    PrinterColumn("Secret", ".spec.runtimeConfig.secret"),
    PrinterColumn("Valid", _cond("Valid", "status")),
    AGE,
)

KINDS: tuple[KindInfo, ...] = (
    KindInfo(
        kind="Trainer",
        plural="trainers",
        model=Trainer,
        short_names=("tr", "trn"),
        columns=(
            PrinterColumn("Framework", ".spec.framework"),
            PrinterColumn("Workers", ".spec.topology.workers", "integer", description="Desired workers"),
            PrinterColumn("Ready", ".status.topology.readyWorkers", "integer", description="Ready workers"),
            PrinterColumn("Phase", ".status.phase"),
            PrinterColumn("Progress", ".status.progress.percent", "integer", description="Percent done"),
            PrinterColumn("ETA", ".status.progress.estimatedCompletionTime", description="Estimated completion"),
            PrinterColumn("Restarts", ".status.topology.replicas.worker.restarts", "integer"),
            PrinterColumn("Checkpoint", ".status.checkpoint.latest", description="Latest committed checkpoint"),
            PrinterColumn("Reason", ".status.reason", description="What the run is doing"),
            PrinterColumn("Message", ".status.message", priority=1, description="What it is doing and why"),
            PrinterColumn("Epoch", ".status.progress.epoch", "integer", priority=1),
            PrinterColumn("Profile", ".spec.profile", priority=1),
            PrinterColumn("Quota", _cond("QuotaAdmitted", "reason"), priority=1),
            PrinterColumn("Capacity", ".status.quota.capacityType", priority=1),
            AGE,
        ),
        scale={
            "specReplicasPath": ".spec.topology.workers",
            "statusReplicasPath": ".status.topology.workers",
            "labelSelectorPath": ".status.topology.selector",
        },
        root_rules=(
            {
                "rule": f"size(self.metadata.name) <= {MAX_TRAINER_NAME}",
                "message": f"metadata.name must be at most {MAX_TRAINER_NAME} characters: pods and Services "
                "are named <name>-worker-<index> and must fit a 63-character DNS label",
            },
            {
                "rule": f"self.metadata.name.matches('{TRAINER_NAME_PATTERN}')",
                "message": "metadata.name must start with a letter and contain only lower-case letters, "
                "digits and '-' (it becomes a DNS label)",
            },
        ),
    ),
    KindInfo(
        kind="TrainingProfile",
        plural="trainingprofiles",
        model=TrainingProfile,
        short_names=("tp", "tprof"),
        columns=PROFILE_COLUMNS,
    ),
    KindInfo(
        kind="ClusterTrainingProfile",
        plural="clustertrainingprofiles",
        model=ClusterTrainingProfile,
        scope="Cluster",
        short_names=("ctp", "ctprof"),
        columns=PROFILE_COLUMNS,
    ),
    KindInfo(
        kind="Checkpoint",
        plural="checkpoints",
        model=Checkpoint,
        short_names=("ckpt",),
        columns=(
            PrinterColumn("Trainer", ".spec.trainer"),
            PrinterColumn("Epoch", ".spec.epoch", "integer"),
            PrinterColumn("Step", ".spec.step", "integer"),
            PrinterColumn("Phase", ".status.phase"),
            PrinterColumn("Shards", ".spec.shardCount", "integer", description="Shards the checkpoint has"),
            PrinterColumn("Verified", ".status.verifiedShards", "integer", description="Shards with a quorum"),
            PrinterColumn(
                "Replicas", ".status.committedReplicas", "integer", description="Copies of the weakest shard"
            ),
            PrinterColumn("Reason", ".status.reason", priority=1),
            PrinterColumn("Message", ".status.message", priority=1),
            AGE,
        ),
    ),
    KindInfo(
        kind="ImagePolicy",
        plural="imagepolicies",
        model=ImagePolicy,
        short_names=("ip", "imgpol"),
        columns=(
            PrinterColumn("Mode", ".spec.mode"),
            PrinterColumn("Images", ".spec.images", priority=1),
            PrinterColumn("Valid", _cond("Valid", "status")),
            AGE,
        ),
    ),
    KindInfo(
        kind="QuotaPolicy",
        plural="quotapolicies",
        model=QuotaPolicy,
        scope="Cluster",
        short_names=("qp",),
        columns=(
            PrinterColumn("Preference", ".spec.preference"),
            PrinterColumn("On-Demand-GPUs", ".spec.budgets.onDemand.nvidia\\.com/gpu", description="Per namespace"),
            PrinterColumn("Spot-GPUs", ".spec.budgets.spot.nvidia\\.com/gpu", description="Per namespace"),
            PrinterColumn("Admitted", ".status.admittedTrainers", "integer"),
            PrinterColumn("Pending", ".status.pendingTrainers", "integer"),
            AGE,
        ),
    ),
    KindInfo(
        kind="AuditLog",
        plural="auditlogs",
        model=AuditLog,
        short_names=("audit",),
        has_status=False,
        columns=(
            PrinterColumn("Resource", ".spec.objectRef.resource"),
            PrinterColumn("Object", ".spec.objectRef.name"),
            PrinterColumn("Action", ".spec.action"),
            PrinterColumn("User", ".spec.user.username"),
            PrinterColumn("Verb", ".spec.verb", priority=1),
            PrinterColumn("Reason", ".spec.reason", priority=1),
            PrinterColumn("Time", ".spec.stageTimestamp", "date"),
        ),
    ),
)


# Kubeflow v1's jobs, served when the kubeflow component is deployed (docs/kubeflow.md): named,
# versioned and printed as upstream's CRDs do (no short names or categories of their own).
_STATE = PrinterColumn("State", ".status.conditions[-1:].type")


def _kubeflow(kind: str, plural: str, model: type[K8sModel], specs: str, scales: bool) -> KindInfo:
    scale = {
        "specReplicasPath": f".spec.{specs}.Worker.replicas",
        "statusReplicasPath": ".status.replicaStatuses.Worker.active",
        "labelSelectorPath": ".status.replicaStatuses.Worker.selector",
    }
    return KindInfo(
        kind=kind,
        plural=plural,
        model=model,
        columns=(_STATE, AGE),
        scale=scale if scales else None,
        group=KUBEFLOW_GROUP,
        version=KUBEFLOW_VERSION,
        categories=(),
        served=(KUBEFLOW_VERSION,),
        storage=KUBEFLOW_VERSION,
    )


KUBEFLOW_KINDS: tuple[KindInfo, ...] = (
    _kubeflow("PyTorchJob", "pytorchjobs", PyTorchJob, "pytorchReplicaSpecs", scales=True),
    _kubeflow("TFJob", "tfjobs", TFJob, "tfReplicaSpecs", scales=False),
    _kubeflow("JAXJob", "jaxjobs", JAXJob, "jaxReplicaSpecs", scales=True),
    _kubeflow("XGBoostJob", "xgboostjobs", XGBoostJob, "xgbReplicaSpecs", scales=False),
)


def kind_info(kind: str) -> KindInfo:
    for info in (*KINDS, *KUBEFLOW_KINDS):
        if info.kind == kind:
            return info
    raise KeyError(kind)

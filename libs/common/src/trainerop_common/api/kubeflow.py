"""Kubeflow's Training Operator v1 jobs (``kubeflow.org/v1``): ``PyTorchJob``, ``TFJob``,
``JAXJob`` and ``XGBoostJob``, with the fields and status shape of upstream v1.9, so that the
manifests written for it run unchanged (docs/kubeflow.md). Each job is carried out by a Trainer
the kubeflow controller makes for it.
"""

from typing import Literal

from pydantic import Field

from .base import FreeForm, K8sModel, Quantity

KUBEFLOW_GROUP = "kubeflow.org"
KUBEFLOW_VERSION = "v1"
KUBEFLOW_API_VERSION = f"{KUBEFLOW_GROUP}/{KUBEFLOW_VERSION}"

# runPolicy.managedBy: the upstream operator acts on a job without it or with its own name.
UPSTREAM_MANAGER = "kubeflow.org/training-operator"

KubeflowRestartPolicy = Literal["Always", "OnFailure", "Never", "ExitCode"]
CleanPodPolicy = Literal["All", "Running", "None"]
JobConditionType = Literal["Created", "Running", "Restarting", "Succeeded", "Failed", "Suspended"]


class SchedulingPolicy(K8sModel):
    """Gang-scheduling hints for Volcano or the scheduler plugins (upstream's)."""

    min_available: int | None = Field(default=None, ge=0)
    queue: str | None = Field(
        default=None,
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": "self == oldSelf", "message": "spec.runPolicy.schedulingPolicy.queue is immutable"}
            ]
        },
    )
    min_resources: dict[str, Quantity] | None = Field(default=None, json_schema_extra={"maxProperties": 16})
    priority_class: str | None = None
    schedule_timeout_seconds: int | None = Field(default=None, ge=0)


class JobRunPolicy(K8sModel):
    """Kubeflow's RunPolicy."""

    clean_pod_policy: CleanPodPolicy | None = None
    ttl_seconds_after_finished: int | None = Field(default=None, ge=0)
    active_deadline_seconds: int | None = Field(default=None, ge=0)
    backoff_limit: int | None = Field(default=None, ge=0)
    scheduling_policy: SchedulingPolicy | None = None
    suspend: bool = Field(default=False, json_schema_extra={"default": False})
    managed_by: str | None = Field(
        default=None,
        max_length=63,
        description="The controller that acts on the job: unset or kubeflow.org/training-operator, this "
        "operator's kubeflow controller where the upstream operator is not running (docs/kubeflow.md).",
    )


# Marks the schema node crdgen replaces with corev1.PodTemplateSpec's structural schema
# (pod_template_schema.json, read only when the CRDs are generated).
POD_TEMPLATE_MARK = "x-trainer-operator-pod-template"


class ReplicaSpec(K8sModel):
    """One replica type: how many, their pod template and their restart policy."""

    replicas: int | None = Field(default=None, ge=0, description="Unset: 1.")
    template: FreeForm = Field(
        default_factory=dict, description="A corev1.PodTemplateSpec.", json_schema_extra={POD_TEMPLATE_MARK: True}
    )
    restart_policy: KubeflowRestartPolicy | None = None


class RDZVConf(K8sModel):
    key: str | None = None
    value: str | None = None


class JobElasticPolicy(K8sModel):
    """PyTorchJob's elasticPolicy (torchrun's rendezvous)."""

    min_replicas: int | None = Field(default=None, ge=1)
    max_replicas: int | None = Field(default=None, ge=1)
    rdzv_backend: Literal["c10d", "etcd", "etcd-v2"] | None = None
    rdzv_port: int | None = Field(default=None, ge=1, le=65535)
    rdzv_host: str | None = None
    rdzv_id: str | None = None
    rdzv_conf: list[RDZVConf] | None = None
    standalone: bool | None = None
    n_proc_per_node: int | None = Field(default=None, ge=1, description="Deprecated: use spec.nprocPerNode.")
    max_restarts: int | None = Field(default=None, ge=0)
    metrics: list[FreeForm] | None = None


ReplicaSpecs = dict[str, ReplicaSpec]


class PyTorchJobSpec(K8sModel):
    run_policy: JobRunPolicy = Field(default_factory=JobRunPolicy)
    elastic_policy: JobElasticPolicy | None = None
    pytorch_replica_specs: ReplicaSpecs
    nproc_per_node: str | None = None


class TFJobSpec(K8sModel):
    run_policy: JobRunPolicy = Field(default_factory=JobRunPolicy)
    success_policy: Literal["", "AllWorkers"] | None = None
    tf_replica_specs: ReplicaSpecs
    enable_dynamic_worker: bool | None = None


class JAXJobSpec(K8sModel):
    run_policy: JobRunPolicy = Field(default_factory=JobRunPolicy)
    jax_replica_specs: ReplicaSpecs


class XGBoostJobSpec(K8sModel):
    run_policy: JobRunPolicy = Field(default_factory=JobRunPolicy)
    xgb_replica_specs: ReplicaSpecs


class JobCondition(K8sModel):
    type: JobConditionType
    status: Literal["True", "False", "Unknown"]
    reason: str | None = None
    message: str | None = None
    last_update_time: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    last_transition_time: str | None = Field(default=None, json_schema_extra={"format": "date-time"})


class JobReplicaStatus(K8sModel):
    active: int | None = None
    succeeded: int | None = None
    failed: int | None = None
    label_selector: FreeForm | None = None
    selector: str | None = None


class JobStatus(K8sModel):
    """Upstream's JobStatus: conditions in the order they were set (the State column shows the
    last), counts per replica type, and when the job started and finished."""

    conditions: list[JobCondition] | None = None
    replica_statuses: dict[str, JobReplicaStatus] | None = None
    start_time: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    completion_time: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    last_reconcile_time: str | None = Field(default=None, json_schema_extra={"format": "date-time"})


class PyTorchJob(K8sModel):
    spec: PyTorchJobSpec
    status: JobStatus | None = None


class TFJob(K8sModel):
    spec: TFJobSpec
    status: JobStatus | None = None


class JAXJob(K8sModel):
    spec: JAXJobSpec
    status: JobStatus | None = None


class XGBoostJob(K8sModel):
    spec: XGBoostJobSpec
    status: JobStatus | None = None

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


# Descriptions are upstream's (the CRDs of the Go module github.com/kubeflow/training-operator v1.9.3),
# word for word with line breaks as spaces, except where upstream has none or this operator's behaviour
# differs (managedBy, replicas, template, elasticPolicy.nProcPerNode, xgbReplicaSpecs, rdzv*, schedulingPolicy's).


class SchedulingPolicy(K8sModel):
    """Gang-scheduling hints for Volcano or the scheduler plugins (upstream's)."""

    min_available: int | None = Field(
        default=None, ge=0, description="Pods of the job that must be schedulable together (the PodGroup's minMember)."
    )
    queue: str | None = Field(
        default=None,
        description="The gang scheduler's queue the job's PodGroup goes to (Volcano). Immutable.",
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": "self == oldSelf", "message": "spec.runPolicy.schedulingPolicy.queue is immutable"}
            ]
        },
    )
    min_resources: dict[str, Quantity] | None = Field(
        default=None,
        json_schema_extra={"maxProperties": 16},
        description="Resource name -> quantity the gang needs before any of its pods start (the PodGroup's "
        "minResources).",
    )
    priority_class: str | None = Field(default=None, description="The PriorityClass of the job's PodGroup.")
    schedule_timeout_seconds: int | None = Field(
        default=None, ge=0, description="Seconds the scheduler plugins' coscheduling waits for the whole gang."
    )


class JobRunPolicy(K8sModel):
    """Kubeflow's RunPolicy."""

    clean_pod_policy: CleanPodPolicy | None = Field(
        default=None,
        description="CleanPodPolicy defines the policy to kill pods after the job completes. Default to None.",
    )
    ttl_seconds_after_finished: int | None = Field(
        default=None,
        ge=0,
        description="TTLSecondsAfterFinished is the TTL to clean up jobs. It may take extra ReconcilePeriod seconds "
        "for the cleanup, since reconcile gets called periodically. Default to infinite.",
    )
    active_deadline_seconds: int | None = Field(
        default=None,
        ge=0,
        description="Specifies the duration in seconds relative to the startTime that the job may be active before "
        "the system tries to terminate it; value must be positive integer.",
    )
    backoff_limit: int | None = Field(
        default=None, ge=0, description="Optional number of retries before marking this job failed."
    )
    scheduling_policy: SchedulingPolicy | None = Field(
        default=None,
        description="SchedulingPolicy defines the policy related to scheduling, e.g. gang-scheduling",
    )
    suspend: bool = Field(
        default=False,
        json_schema_extra={"default": False},
        description="suspend specifies whether the Job controller should create Pods or not. If a Job is created "
        "with suspend set to true, no Pods are created by the Job controller. If a Job is suspended after creation "
        "(i.e. the flag goes from false to true), the Job controller will delete all active Pods and PodGroups "
        "associated with this Job. Users must design their workload to gracefully handle this.",
    )
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
    restart_policy: KubeflowRestartPolicy | None = Field(
        default=None,
        description="Restart policy for all replicas within the job. One of Always, OnFailure, Never and ExitCode."
        " Default to Never.",
    )


class RDZVConf(K8sModel):
    key: str | None = Field(default=None, description="A rendezvous option's name (torchrun --rdzv-conf).")
    value: str | None = Field(default=None, description="Its value.")


class JobElasticPolicy(K8sModel):
    """PyTorchJob's elasticPolicy (torchrun's rendezvous)."""

    min_replicas: int | None = Field(
        default=None,
        ge=1,
        description="minReplicas is the lower limit for the number of replicas to which the training job can "
        "scale down.  It defaults to null.",
    )
    max_replicas: int | None = Field(
        default=None,
        ge=1,
        description="upper limit for the number of pods that can be set by the autoscaler; cannot be smaller than "
        "MinReplicas, defaults to null.",
    )
    rdzv_backend: Literal["c10d", "etcd", "etcd-v2"] | None = Field(
        default=None, description="The rendezvous backend (torchrun --rdzv-backend): c10d, etcd or etcd-v2."
    )
    rdzv_port: int | None = Field(
        default=None, ge=1, le=65535, description="The rendezvous endpoint's port (torchrun --rdzv-endpoint)."
    )
    rdzv_host: str | None = Field(
        default=None, description="The rendezvous endpoint's host (torchrun --rdzv-endpoint)."
    )
    rdzv_id: str | None = Field(default=None, description="The job's id at the rendezvous (torchrun --rdzv-id).")
    rdzv_conf: list[RDZVConf] | None = Field(
        default=None,
        description="RDZVConf contains additional rendezvous configuration (<key1>=<value1>,<key2>=<value2>,...).",
    )
    standalone: bool | None = Field(
        default=None,
        description="Start a local standalone rendezvous backend that is represented by a C10d TCP store on port "
        "29400. Useful when launching single-node, multi-worker job. If specified --rdzv_backend, --rdzv_endpoint, "
        "--rdzv_id are auto-assigned; any explicitly set values are ignored.",
    )
    n_proc_per_node: int | None = Field(default=None, ge=1, description="Deprecated: use spec.nprocPerNode.")
    max_restarts: int | None = Field(
        default=None, ge=0, description="MaxRestarts is the limit for restart times of pods in elastic mode."
    )
    metrics: list[FreeForm] | None = Field(
        default=None,
        description="Metrics contains the specifications which are used to calculate the desired replica count (the "
        "maximum replica count across all metrics will be used).  The desired replica count is calculated with "
        "multiplying the ratio between the target value and the current value by the current number of pods. Ergo, "
        "metrics used must decrease as the pod count is increased, and vice-versa.",
    )


ReplicaSpecs = dict[str, ReplicaSpec]

RUN_POLICY = (
    "RunPolicy encapsulates various runtime policies of the distributed training job, for example how to clean up "
    "resources and how long the job can stay active."
)


class PyTorchJobSpec(K8sModel):
    run_policy: JobRunPolicy = Field(default_factory=JobRunPolicy, description=RUN_POLICY)
    elastic_policy: JobElasticPolicy | None = None
    pytorch_replica_specs: ReplicaSpecs = Field(
        description="A map of PyTorchReplicaType (type) to ReplicaSpec (value). Specifies the PyTorch cluster "
        'configuration. For example, { "Master": PyTorchReplicaSpec, "Worker": PyTorchReplicaSpec, }'
    )
    nproc_per_node: str | None = Field(
        default=None,
        description="Number of workers per node; supported values: [auto, cpu, gpu, int]. For more, "
        "https://github.com/pytorch/pytorch/blob/26f7f470df64d90e092081e39507e4ac751f55d6/torch/distributed/run.py"
        "#L629-L658. Defaults to auto.",
    )


class TFJobSpec(K8sModel):
    run_policy: JobRunPolicy = Field(default_factory=JobRunPolicy, description=RUN_POLICY)
    success_policy: Literal["", "AllWorkers"] | None = Field(
        default=None,
        description='SuccessPolicy defines the policy to mark the TFJob as succeeded. Default to "", using the '
        "default rules.",
    )
    tf_replica_specs: ReplicaSpecs = Field(
        description="A map of TFReplicaType (type) to ReplicaSpec (value). Specifies the TF cluster configuration."
        ' For example, { "PS": ReplicaSpec, "Worker": ReplicaSpec, }'
    )
    enable_dynamic_worker: bool | None = Field(default=None, description="A switch to enable dynamic worker")


class JAXJobSpec(K8sModel):
    run_policy: JobRunPolicy = Field(default_factory=JobRunPolicy, description=RUN_POLICY)
    jax_replica_specs: ReplicaSpecs = Field(
        description="A map of JAXReplicaType (type) to ReplicaSpec (value). Specifies the JAX cluster configuration."
        ' For example, { "Worker": JAXReplicaSpec, }'
    )


class XGBoostJobSpec(K8sModel):
    run_policy: JobRunPolicy = Field(default_factory=JobRunPolicy, description=RUN_POLICY)
    xgb_replica_specs: ReplicaSpecs = Field(
        description="A map of XGBoostReplicaType (type: Master, Worker) to ReplicaSpec (value)."
    )


class JobCondition(K8sModel):
    type: JobConditionType = Field(description="Type of job condition.")
    status: Literal["True", "False", "Unknown"] = Field(
        description="Status of the condition, one of True, False, Unknown."
    )
    reason: str | None = Field(default=None, description="The reason for the condition's last transition.")
    message: str | None = Field(
        default=None, description="A human readable message indicating details about the transition."
    )
    last_update_time: str | None = Field(
        default=None,
        json_schema_extra={"format": "date-time"},
        description="The last time this condition was updated.",
    )
    last_transition_time: str | None = Field(
        default=None,
        json_schema_extra={"format": "date-time"},
        description="Last time the condition transitioned from one status to another.",
    )


class JobReplicaStatus(K8sModel):
    active: int | None = Field(default=None, description="The number of actively running pods.")
    succeeded: int | None = Field(default=None, description="The number of pods which reached phase Succeeded.")
    failed: int | None = Field(default=None, description="The number of pods which reached phase Failed.")
    label_selector: FreeForm | None = Field(default=None, description="Deprecated: Use Selector instead")
    selector: str | None = Field(
        default=None,
        description="A Selector is a label query over a set of resources. The result of matchLabels and "
        "matchExpressions are ANDed. An empty Selector matches all objects. A null Selector matches no objects.",
    )


class JobStatus(K8sModel):
    """Upstream's JobStatus: conditions in the order they were set (the State column shows the
    last), counts per replica type, and when the job started and finished."""

    conditions: list[JobCondition] | None = Field(
        default=None, description="Conditions is an array of current observed job conditions."
    )
    replica_statuses: dict[str, JobReplicaStatus] | None = Field(
        default=None,
        description="ReplicaStatuses is map of ReplicaType and ReplicaStatus, specifies the status of each replica.",
    )
    start_time: str | None = Field(
        default=None,
        json_schema_extra={"format": "date-time"},
        description="Represents time when the job was acknowledged by the job controller. It is not guaranteed to "
        "be set in happens-before order across separate operations. It is represented in RFC3339 form and is in UTC.",
    )
    completion_time: str | None = Field(
        default=None,
        json_schema_extra={"format": "date-time"},
        description="Represents time when the job was completed. It is not guaranteed to be set in happens-before "
        "order across separate operations. It is represented in RFC3339 form and is in UTC.",
    )
    last_reconcile_time: str | None = Field(
        default=None,
        json_schema_extra={"format": "date-time"},
        description="Represents last time when the job was reconciled. It is not guaranteed to be set in "
        "happens-before order across separate operations. It is represented in RFC3339 form and is in UTC.",
    )


class PyTorchJob(K8sModel):
    """PyTorchJob Represents a PyTorchJob resource."""

    spec: PyTorchJobSpec = Field(description="Specification of the desired state of the PyTorchJob.")
    status: JobStatus | None = Field(
        default=None, description="Most recently observed status of the PyTorchJob. Read-only (modified by the system)."
    )


class TFJob(K8sModel):
    """TFJob represents a TFJob resource."""

    spec: TFJobSpec = Field(description="Specification of the desired state of the TFJob.")
    status: JobStatus | None = Field(
        default=None, description="Most recently observed status of the TFJob. Populated by the system. Read-only."
    )


class JAXJob(K8sModel):
    """JAXJob Represents a JAXJob resource."""

    spec: JAXJobSpec = Field(description="Specification of the desired state of the JAXJob.")
    status: JobStatus | None = Field(
        default=None, description="Most recently observed status of the JAXJob. Read-only (modified by the system)."
    )


class XGBoostJob(K8sModel):
    """XGBoostJob is the Schema for the xgboostjobs API"""

    spec: XGBoostJobSpec = Field(description="XGBoostJobSpec defines the desired state of XGBoostJob")
    status: JobStatus | None = Field(
        default=None, description="JobStatus represents the current observed state of the training Job."
    )

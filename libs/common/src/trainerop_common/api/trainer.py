"""The ``Trainer`` kind: one distributed training run, and the status its controllers share."""

from typing import Literal

from pydantic import Field

from trainerop_sdk.layout import S3_SCHEME, S3_URI, StorageLocation, parse_bucket
from trainerop_sdk.names import DNS_SUBDOMAIN, MAX_METRICS

from .base import (
    ROLE_NAMES,
    Conditions,
    Contribution,
    EnvList,
    FreeForm,
    K8sModel,
    ObjectName,
    PluginChoice,
    Quantity,
    ResourceRequirements,
    RestartPolicy,
    RoleName,
    cel,
)
from .checkpoint import MAX_SHARDS
from .model import ModelSpec
from .quota import CapacityType, Packing, PlacementScore, Preference

Framework = Literal["pytorch", "tensorflow", "jax", "xgboost", "generic"]
# A stalled pod is restarted: the phase is Restarting and the Stalled condition says why.
Phase = Literal["Pending", "Running", "Restarting", "Succeeded", "Failed", "Suspended"]

# Pods are named <trainer>-<role>-<index> and each gets a headless Service of the same name,
# which must fit a 63-character DNS label: "-worker-" plus up to 5 digits leaves 50.
MAX_TRAINER_NAME = 50
# spec.scheduling.priorityClassName: a class of the QuotaPolicy's priorityClasses.
MAX_PRIORITY_CLASS_NAME = 63
# And it starts with a letter: an RFC 1035 label (the root rule in api/__init__.py says so).
TRAINER_NAME_PATTERN = "^[a-z]([-a-z0-9]*[a-z0-9])?$"


class ElasticPolicy(K8sModel):
    """Bounds within which topology.workers may change without restarting the run."""

    min_workers: int = Field(ge=1, le=4096, description="The fewest workers the run may have.")
    max_workers: int = Field(ge=1, le=4096, description="The most workers the run may have.")


class Topology(K8sModel):
    """How many replicas of each role the run has."""

    model_config = K8sModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                cel(
                    "!has(self.elastic) || (self.workers >= self.elastic.minWorkers "
                    "&& self.workers <= self.elastic.maxWorkers)",
                    "topology.workers must lie within topology.elastic's minWorkers and maxWorkers "
                    "(kubectl scale included)",
                )
            ]
        }
    }

    workers: int = Field(
        default=1,
        ge=0,
        le=4096,
        description="Worker replicas (the scale subresource's replicas); 0 only in a run with a master or a chief.",
    )
    parameter_servers: int = Field(
        default=0, ge=0, le=256, description="Parameter-server replicas (tensorflow and generic only)."
    )
    master: int | None = Field(
        default=None,
        ge=0,
        le=1,
        description="The master replica. Unset: 1 for pytorch (without topology.elastic) and xgboost, else 0. "
        "pytorch with 0: worker 0 is the rendezvous, as in a PyTorchJob without a Master; tensorflow with 1: "
        "TFJob's Master role (TF_CONFIG task type master).",
    )
    chief: int | None = Field(
        default=None, ge=0, le=1, description="tensorflow: the Chief replica (TF_CONFIG task type chief). Unset: 0."
    )
    evaluators: int | None = Field(
        default=None,
        ge=0,
        le=64,
        description="tensorflow: Evaluator replicas (TF_CONFIG task type evaluator). Unset: 0.",
    )
    replication_factor: int = Field(
        default=1,
        ge=1,
        le=7,
        description="Copies of each checkpoint shard; a checkpoint commits on a majority of them.",
    )
    elastic: ElasticPolicy | None = Field(
        default=None,
        json_schema_extra={
            "x-kubernetes-validations": [
                cel("self.minWorkers <= self.maxWorkers", "elastic.minWorkers must not exceed elastic.maxWorkers")
            ]
        },
    )


class CheckpointSpec(K8sModel):
    """Where and how often the run checkpoints (docs/checkpoints.md)."""

    model_config = K8sModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                cel(
                    f"!self.bucket.startsWith('{S3_SCHEME}') || has(self.credentialsSecret)",
                    "checkpoint.credentialsSecret is required for an s3:// bucket (a Secret with "
                    "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_ENDPOINT_URL)",
                )
            ]
        }
    }

    bucket: str = Field(
        min_length=1,
        max_length=512,
        description="A PersistentVolumeClaim in the Trainer's namespace (mounted at /checkpoints by every "
        "replica), or s3://bucket/prefix.",
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(
                    f"self.startsWith('{S3_SCHEME}') ? self.matches('{S3_URI}') "
                    f": self.matches('{DNS_SUBDOMAIN.replace(chr(92) + '.', '[.]')}')",
                    "bucket must be a PersistentVolumeClaim name or s3://bucket/prefix (prefix segments: letters, "
                    "digits, '.', '_' and '-', not starting with '.')",
                )
            ]
        },
    )
    credentials_secret: ObjectName | None = Field(
        default=None,
        description="For s3://: a Secret in the Trainer's namespace with AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, "
        "AWS_ENDPOINT_URL and optionally AWS_REGION. Pods get them as env; the checkpoint controller verifies and "
        "garbage-collects with the same credentials.",
    )
    interval_minutes: int = Field(
        default=15, ge=1, le=10080, description="Minutes between checkpoints (CHECKPOINT_INTERVAL_MINUTES in the pods)."
    )
    max_retention: int = Field(default=3, ge=1, le=1000, description="Committed checkpoints to keep.")
    commit_timeout_seconds: int = Field(
        default=600, ge=10, le=86400, description="A checkpoint without a quorum of every shard this long fails."
    )

    @property
    def location(self) -> StorageLocation:
        """The bucket parsed (the CRD's rule has judged it with the same pattern)."""
        return parse_bucket(self.bucket)


class RunPolicy(K8sModel):
    """Restart, deadline and clean-up behaviour (Kubeflow's RunPolicy and more)."""

    restart_policy: RestartPolicy | None = Field(
        default=None,
        description="Unset: the profile's retryPolicy.restartPolicy, else OnFailure. ExitCode: exit codes "
        "1-127 are permanent, 128-255 retryable (Kubeflow's rule).",
    )
    restart_policies: dict[RoleName, RestartPolicy] | None = Field(
        default=None,
        json_schema_extra={
            "maxProperties": len(ROLE_NAMES),
            "x-kubernetes-validations": [
                cel(
                    f"self.all(role, role in {list(ROLE_NAMES)})",
                    f"restartPolicies: each key must be a role ({', '.join(ROLE_NAMES)})",
                )
            ],
        },
        description="Per role (master, worker, ps, chief, evaluator), over restartPolicy: a Kubeflow job's "
        "replicaSpecs' restartPolicy.",
    )
    success_policy: Literal["AllWorkers"] | None = Field(
        default=None,
        description="Unset: the run succeeds when its master or chief does (tensorflow without one: worker 0; "
        "others: every worker). AllWorkers: when every worker does (TFJob's successPolicy).",
    )
    restart_scope: Literal["Pod", "Gang"] = Field(
        default="Pod", description="Restart only the failed pod, or every pod of the run."
    )
    backoff_limit: int | None = Field(
        default=None, ge=0, le=1000, description="Unset: the profile's retryPolicy.backoffLimit, else 6."
    )
    active_deadline_seconds: int | None = Field(
        default=None, ge=1, description="Seconds from the start after which the run fails; unset: no deadline."
    )
    ttl_seconds_after_finished: int | None = Field(
        default=None, ge=0, description="Seconds after it finishes before the Trainer is deleted; unset: kept."
    )
    clean_pod_policy: Literal["All", "Running", "None"] = Field(
        default="Running",
        description="Which pods are deleted when the run finishes: All, Running (those still running) or None.",
    )
    suspend: bool = Field(
        default=False, description="true deletes the run's pods and creates none until it is false again."
    )
    stall_timeout_seconds: int | None = Field(
        default=None,
        ge=10,
        description="A running pod that sends no progress heartbeat for this long is stalled and restarted "
        "per restartScope (unset: no stall detection).",
    )


AccessMode = Literal["ReadWriteOnce", "ReadWriteOncePod", "ReadWriteMany"]


class ReplicaStorage(K8sModel):
    """A PersistentVolumeClaim per replica (<pod>-data): a replacement pod gets the same one."""

    size: Quantity = Field(description="Each claim's requested storage, a quantity such as 100Gi.")
    storage_class_name: str | None = Field(default=None, description="Unset: the cluster's default class.")
    access_modes: list[AccessMode] = Field(
        default_factory=lambda: list[AccessMode](["ReadWriteOnce"]),
        json_schema_extra={"default": ["ReadWriteOnce"]},
        description="The claims' access modes (corev1.PersistentVolumeAccessMode).",
    )
    mount_path: str = Field(
        default="/data", pattern=r"^/.*", description="Where the training container mounts its claim."
    )


class PodTemplateOverrides(K8sModel):
    """Per-role corev1.PodTemplateSpec fragments merged over the generated pods."""

    master: FreeForm | None = Field(default=None, description="Merged over the master's pod template.")
    worker: FreeForm | None = Field(default=None, description="Merged over the workers' pod template.")
    parameter_server: FreeForm | None = Field(
        default=None, description="Merged over the parameter servers' pod template."
    )
    chief: FreeForm | None = Field(default=None, description="Merged over the chief's pod template.")
    evaluator: FreeForm | None = Field(default=None, description="Merged over the evaluators' pod template.")


# Frameworks whose Kubeflow contract has no parameter-server role.
NO_PARAMETER_SERVERS = ("pytorch", "jax", "xgboost")
# Frameworks whose workers may come and go (the others read their world size once at start).
ELASTIC_FRAMEWORKS = ("pytorch", "generic")
# Frameworks whose runs have a master replica, except an elastic pytorch run (its rendezvous is on
# worker 0): trainerop_common.topology.has_master, and in CEL below.
MASTER_FRAMEWORKS = ("pytorch", "xgboost")
# Frameworks whose runs may have a chief and evaluators (TFJob's roles).
CHIEF_FRAMEWORKS = ("tensorflow", "generic")
MASTERS_CEL = (
    "(has(self.topology.master) ? self.topology.master : "
    f"(self.framework in {list(MASTER_FRAMEWORKS)} && !(self.framework == 'pytorch' && has(self.topology.elastic)) "
    "? 1 : 0))"
)
# The replicas besides the workers that write a checkpoint shard: the master and the chief.
CHIEF_CEL = "(has(self.topology.chief) ? self.topology.chief : 0)"
SHARD_LEADERS_CEL = f"({MASTERS_CEL} + {CHIEF_CEL})"


class Scheduling(K8sModel):
    """How the run queues for quota (docs/quota.md)."""

    priority_class_name: str | None = Field(
        default=None,
        max_length=MAX_PRIORITY_CLASS_NAME,
        description="One of the covering QuotaPolicy's priorityClasses: higher is admitted first (unset: 0).",
    )
    preference: Preference | None = Field(
        default=None, description="Capacity order for this run; unset: the QuotaPolicy's preference."
    )
    packing: Packing | None = Field(
        default=None, description="Where in the interconnect the pods go; unset: Preferred at the finest level."
    )


class TrainerSpec(K8sModel):
    """What the user asks for."""

    model_config = K8sModel.model_config | {
        "json_schema_extra": {
            "x-kubernetes-validations": [
                cel(
                    f"!(self.framework in {list(NO_PARAMETER_SERVERS)}) || self.topology.parameterServers == 0",
                    "topology.parameterServers must be 0 for pytorch, jax and xgboost (they have no "
                    "parameter-server role); use framework tensorflow or generic",
                ),
                cel(
                    f"!has(self.topology.elastic) || self.framework in {list(ELASTIC_FRAMEWORKS)}",
                    "topology.elastic: jax, tensorflow and xgboost read their world size once at start, so "
                    "workers cannot come and go; remove topology.elastic (a new size then needs a gang restart) "
                    "or use framework pytorch (torchrun's rendezvous) or generic",
                ),
                cel(
                    "!has(self.topology.master) || self.topology.master == 0 || self.framework != 'jax'",
                    "topology.master must be 0 for jax (a JAXJob has only Workers)",
                ),
                cel(
                    "!has(self.topology.master) || self.topology.master == 1 || self.framework != 'xgboost'",
                    "topology.master must be 1 for xgboost (an XGBoostJob's Master is required)",
                ),
                cel(
                    "!has(self.topology.master) || self.topology.master == 0 || !has(self.topology.elastic)",
                    "topology.master must be 0 with topology.elastic (torchrun's rendezvous is on worker 0)",
                ),
                cel(
                    f"({CHIEF_CEL} == 0 && (!has(self.topology.evaluators) || self.topology.evaluators == 0)) || "
                    f"self.framework in {list(CHIEF_FRAMEWORKS)}",
                    "topology.chief and topology.evaluators are roles of tensorflow (and generic) runs; set them "
                    "to 0 or use framework tensorflow",
                ),
                cel(
                    f"self.topology.workers >= 1 || {SHARD_LEADERS_CEL} >= 1",
                    "topology.workers must be at least 1 in a run without a master or a chief",
                    fieldPath=".topology.workers",
                ),
                cel(
                    f"{CHIEF_CEL} + (has(self.topology.master) ? self.topology.master : 0) <= 1",
                    "topology: must not have more than 1 Chief or Master role",
                ),
                cel(
                    f"!has(self.checkpoint) || self.topology.workers + {SHARD_LEADERS_CEL} <= {MAX_SHARDS}",
                    f"topology.workers: a run with spec.checkpoint can have at most {MAX_SHARDS} replicas that write "
                    "a checkpoint shard (the workers, the master and the chief): one Checkpoint "
                    "holds every shard's report; lower topology.workers (topology.elastic.maxWorkers) or remove "
                    "spec.checkpoint",
                ),
            ]
        }
    }

    epochs: int | None = Field(
        default=None,
        ge=1,
        le=1_000_000,
        description="Epochs to train (EPOCHS in the pods; the percent done when the heartbeats give no total "
        "steps). Unset: unknown, as in a Kubeflow job; the run ends when its pods do.",
    )
    image: str = Field(min_length=1, max_length=1024, description="The training container's image reference.")
    framework: Framework = Field(
        default="generic",
        description="pytorch, tensorflow, jax, xgboost or generic: the roles and the environment (WORLD_SIZE, "
        "TF_CONFIG...) the pods get, as in the Kubeflow job of that framework. Immutable.",
        json_schema_extra={"x-kubernetes-validations": [cel("self == oldSelf", "framework is immutable")]},
    )
    command: list[str] | None = Field(
        default=None, description="The training container's entrypoint; unset: the image's (corev1.Container command)."
    )
    port: int | None = Field(
        default=None, ge=1, le=65535, description="The rendezvous port; unset: the framework's (pytorch 23456...)."
    )
    nproc_per_node: str | None = Field(
        default=None,
        max_length=16,
        pattern=r"^(auto|cpu|gpu|[1-9][0-9]*)$",
        description="pytorch: processes per pod (PET_NPROC_PER_NODE; a number multiplies WORLD_SIZE). Unset: auto.",
    )
    args: list[str] | None = Field(
        default=None, description="Arguments to the entrypoint; unset: the image's (corev1.Container args)."
    )
    env: EnvList | None = Field(default=None, description="Environment variables of the training container.")
    resources: ResourceRequirements | None = None
    topology: Topology = Field(default_factory=Topology, json_schema_extra={"default": {}})
    checkpoint: CheckpointSpec | None = None
    model: ModelSpec | None = Field(
        default=None,
        json_schema_extra={
            "x-kubernetes-validations": [
                cel("self == oldSelf", "model is immutable (every replica starts from it); create another Trainer")
            ]
        },
    )
    profile: ObjectName | None = Field(
        default=None,
        description="A TrainingProfile in the Trainer's namespace, else the ClusterTrainingProfile of that name.",
    )
    pod_template_overrides: PodTemplateOverrides | None = None
    storage: ReplicaStorage | None = Field(
        default=None,
        json_schema_extra={
            "x-kubernetes-validations": [
                cel("self == oldSelf", "storage is immutable (existing claims keep their size)")
            ]
        },
    )
    run_policy: RunPolicy = Field(default_factory=RunPolicy, json_schema_extra={"default": {}})
    scheduling: Scheduling | None = None


class ReplicaStatus(K8sModel):
    """Counts for one role (master, worker or ps)."""

    desired: int = Field(default=0, ge=0, description="Replicas the run should have.")
    active: int = Field(default=0, ge=0, description="Pods that exist and have not finished.")
    ready: int = Field(default=0, ge=0, description="Pods that are ready.")
    succeeded: int = Field(default=0, ge=0, description="Pods that succeeded.")
    failed: int = Field(default=0, ge=0, description="Pods that failed.")
    restarts: int = Field(default=0, ge=0, description="Pods replaced after a failure.")
    last_failure_time: str | None = Field(
        default=None, json_schema_extra={"format": "date-time"}, description="Starts the restart backoff."
    )
    recent_failures: int = Field(
        default=0, ge=0, description="Failures in a row, each soon after the last: sets the backoff."
    )
    counted_failures: list[str] | None = Field(
        default=None,
        json_schema_extra={"maxItems": 4096, "items": {"type": "string", "maxLength": 64}},
        description="UIDs of failed pods already counted in restarts and not yet gone: one the controller "
        "did not get to delete before it stopped is not counted again.",
    )


class TopologyStatus(K8sModel):
    """What the trainer controller observes of the run's replicas."""

    workers: int = Field(default=0, ge=0, description="Worker pods that exist (scale status replicas).")
    ready_workers: int = Field(default=0, ge=0, description="Worker pods that are ready.")
    selector: str = Field(default="", description="Label selector of the worker pods (scale subresource).")
    replicas: dict[str, ReplicaStatus] | None = Field(
        default=None, json_schema_extra={"maxProperties": 8}, description="Counts per role."
    )


class ProgressStatus(K8sModel):
    """When the run started and finished, and training progress reported through heartbeats."""

    start_time: str | None = Field(
        default=None, json_schema_extra={"format": "date-time"}, description="When the run started."
    )
    completion_time: str | None = Field(
        default=None, json_schema_extra={"format": "date-time"}, description="When it succeeded or failed."
    )

    epoch: int = Field(default=0, ge=0, description="Epochs done, the furthest a heartbeat reported.")
    step: int = Field(default=0, ge=0, description="Steps done, the furthest a heartbeat reported.")
    last_heartbeat_time: str | None = Field(
        default=None, json_schema_extra={"format": "date-time"}, description="When the last heartbeat came."
    )
    total_steps: int | None = Field(default=None, ge=1, description="The run's steps, when its heartbeats say.")
    percent: int = Field(
        default=0, ge=0, le=100, description="Done: step of totalSteps when known, else epoch of spec.epochs."
    )
    estimated_completion_time: str | None = Field(
        default=None,
        json_schema_extra={"format": "date-time"},
        description="While it runs: the last heartbeat's time plus what remains at the pace the pod measured.",
    )
    metrics: dict[str, str] | None = Field(
        default=None,
        json_schema_extra={"maxProperties": MAX_METRICS},
        description="The latest value of each metric the heartbeats report (loss, throughput).",
    )


class ProfileStatus(K8sModel):
    """Written by the profile controller: which profile was resolved and what it contributes."""

    name: str | None = Field(default=None, description="The profile's name.")
    kind: Literal["TrainingProfile", "ClusterTrainingProfile"] | None = Field(
        default=None, description="TrainingProfile (the Trainer's namespace) or ClusterTrainingProfile."
    )
    generation: int | None = Field(default=None, ge=0, description="The profile's metadata.generation used.")
    hash: str | None = Field(default=None, description="Hash of the profile spec used (changes with its content).")
    overrides: list[str] | None = Field(
        default=None,
        json_schema_extra={"maxItems": 256},
        description="Profile settings the Trainer's own spec (or the operator) overrides.",
    )
    placement_plugin: PluginChoice | None = Field(
        default=None, description="The profile's placementPlugin: Ask or Skip the quota controller's plugin."
    )
    packing: Packing | None = Field(
        default=None, description="The profile's packing: the quota controller's unless spec.scheduling.packing is set."
    )
    model: ModelSpec | None = Field(
        default=None, description="The profile's model: the trainer controller's unless spec.model is set."
    )
    contribution: Contribution | None = None


class CostStatus(K8sModel):
    """Estimated cost of the admitted resources at the policy's prices, against all on-demand."""

    per_hour: str = Field(description="At the admitted capacity type's prices.")
    on_demand_per_hour: str = Field(description="The same resources at on-demand prices.")
    savings_percent: int = Field(ge=0, le=100, description="perHour below onDemandPerHour, in percent.")
    accrued: str = Field(description="Up to accruedAt; add perHour for each hour since.")
    on_demand_accrued: str = Field(description="The same time at on-demand prices.")
    accrued_at: str = Field(json_schema_extra={"format": "date-time"}, description="When accrued was last summed.")


class RenegotiationStatus(K8sModel):
    """A reclaim of spot capacity under the admitted run, and what the quota controller waits for."""

    reason: str = Field(description="CamelCase reason of the renegotiation.")
    message: str = Field(default="", description="What happened and what is done about it, for a person.")
    since: str = Field(json_schema_extra={"format": "date-time"}, description="When the reclaim was noticed.")
    nodes: list[str] = Field(
        default_factory=list, json_schema_extra={"maxItems": 64}, description="The nodes being reclaimed."
    )
    waiting_for_checkpoint: bool = Field(
        default=False, description="true while the run keeps its pods for a checkpoint to commit."
    )
    deadline: str | None = Field(
        default=None,
        json_schema_extra={"format": "date-time"},
        description="While waiting for a checkpoint: when the run moves anyway (the policy's checkpointGraceSeconds).",
    )


class QuotaStatus(K8sModel):
    """Written by the quota controller."""

    policy: str | None = Field(default=None, description="The QuotaPolicy that governs the run.")
    capacity_type: CapacityType | None = Field(default=None, description="Where the run is admitted.")
    workers: int | None = Field(default=None, ge=0, description="Workers admitted.")
    priority: int | None = Field(default=None, description="The value of the run's priority class.")
    admitted_time: str | None = Field(
        default=None, json_schema_extra={"format": "date-time"}, description="When the run was admitted."
    )
    renegotiations: int = Field(default=0, ge=0, description="Times the admission was moved or shrunk.")
    renegotiation: RenegotiationStatus | None = None
    cost: CostStatus | None = None
    placement_score: PlacementScore | None = Field(
        default=None, description="How the admitted pods sit in the interconnect; absent without a placement."
    )
    workload: str | None = Field(default=None, description="The Kueue Workload the run is admitted through.")
    cluster_queue: str | None = Field(default=None, description="The Kueue ClusterQueue that admitted it.")
    contribution: Contribution | None = None


SavePhase = Literal["Requested", "Committed", "Missed"]


class SaveRequest(K8sModel):
    """A save the checkpoint controller asked every rank for, at one step (docs/checkpoints.md)."""

    id: str = Field(max_length=128, description="The trigger it answers: <reason>@<time the trigger began>.")
    reason: str = Field(
        description="What asked: SpotReclaimed, NodePredicted, NodeDrained (the quota controller) or Requested"
        " (a user)."
    )
    message: str = Field(default="", max_length=1024, description="Why, for a person.")
    step: int | None = Field(default=None, ge=0, description="The step every rank saves at (None: none reports steps).")
    requested_at: str = Field(json_schema_extra={"format": "date-time"}, description="When the save was asked.")
    deadline: str = Field(json_schema_extra={"format": "date-time"}, description="When the run moves without it.")
    phase: SavePhase = Field(
        default="Requested",
        description="Requested; Committed: a checkpoint answered it; Missed: none did by the deadline.",
    )
    checkpoint: str | None = Field(default=None, description="The committed Checkpoint that answered it.")


class CheckpointStatus(K8sModel):
    """Written by the checkpoint controller."""

    latest: str | None = Field(default=None, description="Name of the latest committed Checkpoint.")
    latest_step: int | None = Field(default=None, ge=0, description="Its step.")
    last_commit_time: str | None = Field(
        default=None, json_schema_extra={"format": "date-time"}, description="When the latest one committed."
    )
    committed: int = Field(default=0, ge=0, description="Committed checkpoints kept (at most maxRetention).")
    resume_from: str | None = Field(default=None, description="Path training resumes from.")
    save_request: SaveRequest | None = Field(default=None, description="The latest save asked of the ranks.")
    contribution: Contribution | None = None


class AuditRecorded(K8sModel):
    """What the audit controller has recorded already, so that a record removed by retention
    is not written again: per condition type the transition time recorded, the restart and
    renegotiation counts and the checkpoint."""

    created: bool = Field(default=False, description="The Created record was written.")
    conditions: dict[str, str] | None = Field(
        default=None, description="Condition type -> the lastTransitionTime recorded."
    )
    restarts: int = Field(default=0, ge=0, description="The restart count recorded.")
    renegotiations: int = Field(default=0, ge=0, description="The renegotiation count recorded.")
    checkpoint: str | None = Field(default=None, description="The Checkpoint recorded last.")


class AuditNotified(K8sModel):
    """What the audit controller's notifier has sent (docs/notifications.md), so nothing is sent twice."""

    conditions: dict[str, str] | None = Field(
        default=None, description="Per event (Failed, Stalled, Succeeded): the condition transition notified."
    )
    restart_storms: dict[str, int] | None = Field(
        default=None, description="Per role: its restart count when its last restart storm was notified."
    )


class AuditStatus(K8sModel):
    """Written by the audit controller: a summary of the run's audit trail."""

    records: int = Field(default=0, ge=0, description="This run's records that exist now.")
    last_record: str | None = Field(default=None, description="The name of the latest AuditLog record.")
    recorded: AuditRecorded | None = None
    notified: AuditNotified | None = None


class ImageCheck(K8sModel):
    """One image of the run as the verify controller found it."""

    image: str = Field(max_length=1024, description="As the Trainer writes it.")
    digest: str | None = Field(default=None, max_length=71, description="What the tag resolved to (sha256:...).")
    signed_by: list[str] | None = Field(
        default=None, json_schema_extra={"maxItems": 16}, description="The keys whose signatures hold, by name."
    )
    policies: list[str] | None = Field(
        default=None, json_schema_extra={"maxItems": 16}, description="The ImagePolicies that govern it."
    )
    problem: str | None = Field(default=None, max_length=512, description="Why it is not accepted (or only warned).")


class VerifyStatus(K8sModel):
    """Written by the verify controller (docs/image-verification.md)."""

    generation: int | None = Field(
        default=None, ge=0, description="The Trainer generation its images were checked for."
    )
    policies: str | None = Field(default=None, max_length=64, description="A hash of the policies applied.")
    images: list[ImageCheck] | None = Field(
        default=None, json_schema_extra={"maxItems": 32}, description="Each image of the run, as checked."
    )
    contribution: Contribution | None = None


class TrainerStatus(K8sModel):
    """Each section has one writer (docs/design/status-protocol.md); conditions are shared by type."""

    phase: Phase | None = Field(
        default=None, description="Pending, Running, Restarting, Succeeded, Failed or Suspended."
    )
    reason: str | None = Field(default=None, max_length=128, description="What the run is doing, in one word.")
    message: str | None = Field(default=None, max_length=1024, description="What it is doing and why, for a person.")
    topology: TopologyStatus | None = None
    progress: ProgressStatus | None = None
    profile: ProfileStatus | None = None
    quota: QuotaStatus | None = None
    checkpoint: CheckpointStatus | None = None
    audit: AuditStatus | None = None
    verify: VerifyStatus | None = None
    conditions: Conditions | None = None


class Trainer(K8sModel):
    """A distributed training run."""

    spec: TrainerSpec
    status: TrainerStatus | None = None

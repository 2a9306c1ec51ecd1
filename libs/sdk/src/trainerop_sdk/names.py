"""Names the operator and the training pods share: the API group, the labels on every pod of a run,
the annotations a heartbeat writes, and what a Kubernetes name may look like. Defined once here,
at the bottom layer (standard library only); the operator's library re-exports them."""

GROUP = "trainer.operator.kubeflow.org"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

# On every pod, Service, Lease and claim of a run (the seed README selects pods by trainer-name).
TRAINER_NAME_LABEL = "trainer-name"
REPLICA_TYPE_LABEL = f"{GROUP}/replica-type"
REPLICA_INDEX_LABEL = f"{GROUP}/replica-index"
TRAINER_UID_LABEL = f"{GROUP}/trainer-uid"
# Kubernetes' own: the container `kubectl logs` and `kubectl exec` pick in a pod of several (the
# trainer sets it to the training container; the client reads logs from it).
DEFAULT_CONTAINER_ANNOTATION = "kubectl.kubernetes.io/default-container"
# On each AuditLog record of a Trainer (the audit controller's; clients select a run's trail by it).
AUDIT_TRAINER_LABEL = f"{GROUP}/trainer-name"

# Written by a heartbeat on the replica's Lease, read by the trainer controller.
EPOCH_ANNOTATION = f"{GROUP}/epoch"
STEP_ANNOTATION = f"{GROUP}/step"
TOTAL_STEPS_ANNOTATION = f"{GROUP}/total-steps"  # the run's steps, when the training code knows them
SECONDS_PER_STEP_ANNOTATION = f"{GROUP}/seconds-per-step"  # measured by the SDK since the process's first beat
SECONDS_PER_EPOCH_ANNOTATION = f"{GROUP}/seconds-per-epoch"
METRICS_ANNOTATION = f"{GROUP}/metrics"  # JSON object: a few named numbers (loss, throughput)
STEPS_PER_BEAT_ANNOTATION = f"{GROUP}/steps-per-beat"  # steps between this process's last two beats

# Save before a disruption (docs/checkpoints.md): a user asks with the first on a Trainer (its value
# the time asked: `kubectl trainer checkpoint NAME`); the checkpoint controller asks each rank with
# the second on its Lease, which a heartbeat's response carries back: save at exactly that step.
CHECKPOINT_REQUESTED_ANNOTATION = f"{GROUP}/checkpoint-requested"
SAVE_AT_STEP_ANNOTATION = f"{GROUP}/save-at-step"
USER_REQUEST = "Requested"  # the reason of a save a user asked for


def save_request_id(reason: str, since: str) -> str:
    """The id of the save request (status.checkpoint.saveRequest) answering a trigger: its reason
    and when it began (a user's: the annotation's time), by which the asker finds the answer."""
    return f"{reason}@{since}"


MAX_METRICS = 8
METRIC_NAME = r"^[A-Za-z_][A-Za-z0-9_.-]{0,62}$"

# What the API server accepts as an object's name (RFC 1123).
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
MAX_NAME = 253

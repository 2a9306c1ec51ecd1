"""The operator's kinds as lightkube resources (no kopf, no operator library: the API group and
the labels come from the training SDK, where they are defined once)."""

from typing import Any

from lightkube.generic_resource import create_namespaced_resource

from trainerop_sdk.names import (
    API_VERSION,
    AUDIT_TRAINER_LABEL,
    CHECKPOINT_REQUESTED_ANNOTATION,
    GROUP,
    TRAINER_NAME_LABEL,
    USER_REQUEST,
    VERSION,
    save_request_id,
)

TRAINER: Any = create_namespaced_resource(GROUP, VERSION, "Trainer", "trainers")
CHECKPOINT: Any = create_namespaced_resource(GROUP, VERSION, "Checkpoint", "checkpoints")
AUDITLOG: Any = create_namespaced_resource(GROUP, VERSION, "AuditLog", "auditlogs")

__all__ = [
    "API_VERSION",
    "AUDITLOG",
    "AUDIT_TRAINER_LABEL",
    "CHECKPOINT",
    "CHECKPOINT_REQUESTED_ANNOTATION",
    "TRAINER",
    "TRAINER_NAME_LABEL",
    "USER_REQUEST",
    "save_request_id",
]

"""How the quota controller's plan sees the objects its watches deliver (pure): nodes, pods,
Trainers; and which of their changes make it plan again (fingerprints of what it reads)."""

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

from trainerop_common.api import Trainer
from trainerop_common.api.trainer import ProfileStatus, QuotaStatus, SaveRequest, TrainerStatus
from trainerop_common.conditions import parse
from trainerop_common.contracts import (
    ADMISSION_ANNOTATION,
    REPLICA_INDEX_LABEL,
    REPLICA_TYPE_LABEL,
    TRAINER_UID_LABEL,
    asks,
    replica_index,
)
from trainerop_common.nodes import lost, readiness
from trainerop_common.objects import controller_uid
from trainerop_common.quantity import parse_quantity

from .capacity import RECLAIM_TAINTS, NodeInfo, PodInfo, capacity_type, pod_requests
from .kueue import PRIORITY_LABEL, queue_of
from .model import CONDITION, TrainerInfo
from .proactive import PREDICTION_ANNOTATION, is_ours
from .taints import scheduling_taints


def node_info(body: Mapping[str, Any], now: datetime, grace: float) -> tuple[NodeInfo, float | None]:
    """The node as the plan sees it, and the seconds until a node that is not Ready counts as lost."""
    meta, spec, status = body["metadata"], body.get("spec") or {}, body.get("status") or {}
    name = meta["name"]
    labels = meta.get("labels") or {}
    node = readiness(body)
    why, wait = lost(node, now, grace)
    notice = next((t for t in spec.get("taints") or () if t.get("key") in RECLAIM_TAINTS), None)
    taint = notice["key"] if notice else None
    predicted = notice is not None and is_ours(notice)
    info = NodeInfo(
        name=name,
        kind=capacity_type(labels),
        allocatable={k: parse_quantity_or_zero(v) for k, v in (status.get("allocatable") or {}).items()},
        labels=labels,
        schedulable=node.ready == "True" and not spec.get("unschedulable") and taint is None,
        lost=why,
        reclaimed=reclaim_reason(name, taint, (meta.get("annotations") or {}) if predicted else None),
        taints=scheduling_taints(spec.get("taints")),
        predicted=predicted,
        drained=f"node {name} is cordoned (drained)" if spec.get("unschedulable") and why is None else None,
    )
    return info, wait


def reclaim_reason(name: str, taint: str | None, prediction: Mapping[str, str] | None) -> str | None:
    """Why a node's pods will go: a termination taint, or proactive mode's prediction."""
    if taint is None:
        return None
    if prediction is not None:
        why = prediction.get(PREDICTION_ANNOTATION) or "its readings"
        return f"node {name} is predicted to degrade ({why}; {taint} taint)"
    return f"node {name} is being reclaimed ({taint} taint)"


def parse_quantity_or_zero(value: Any) -> Decimal:
    try:
        return parse_quantity(value)
    except ValueError:
        return Decimal(0)


def pod_info(body: Mapping[str, Any]) -> PodInfo | None:
    """A pod that holds resources, or one that succeeded (its replica is done); None for a failed one."""
    phase = (body.get("status") or {}).get("phase")
    if phase == "Failed":
        return None
    meta = body["metadata"]
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    return PodInfo(
        node=(body.get("spec") or {}).get("nodeName") or "",
        requests=pod_requests(body),
        trainer_uid=labels.get(TRAINER_UID_LABEL),
        role=labels.get(REPLICA_TYPE_LABEL, ""),
        index=replica_index(labels),
        admission=annotations.get(ADMISSION_ANNOTATION),
        deleting=bool(meta.get("deletionTimestamp")),
        succeeded=phase == "Succeeded",
    )


def pod_essentials(body: dict[str, Any]) -> dict[str, Any]:
    """What the quota controller holds of each pod in the cluster: what :func:`pod_info` reads."""
    meta, spec = body.get("metadata") or {}, body.get("spec") or {}
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    ours = (TRAINER_UID_LABEL, REPLICA_TYPE_LABEL, REPLICA_INDEX_LABEL)
    return {
        "metadata": {
            **{k: meta[k] for k in ("name", "namespace", "uid", "deletionTimestamp") if k in meta},
            "labels": {k: labels[k] for k in ours if k in labels},
            "annotations": {k: annotations[k] for k in (ADMISSION_ANNOTATION,) if k in annotations},
        },
        "spec": {
            "nodeName": spec.get("nodeName"),
            "overhead": spec.get("overhead"),
            **{
                kind: [{"resources": c.get("resources")} for c in spec.get(kind) or ()]
                for kind in ("containers", "initContainers")
            },
        },
        "status": {"phase": (body.get("status") or {}).get("phase")},
    }


def pod_fingerprint(body: Mapping[str, Any]) -> str:
    """What of a pod matters to admission: where it runs, whether it finished, whether it goes."""
    return json.dumps(
        [
            (body.get("spec") or {}).get("nodeName") or "",
            (body.get("status") or {}).get("phase") in ("Succeeded", "Failed"),
            (body.get("status") or {}).get("phase") == "Succeeded",
            bool(body.get("metadata", {}).get("deletionTimestamp")),
        ]
    )


def node_fingerprint(body: Mapping[str, Any]) -> str:
    """Labels, allocatable, readiness (not heartbeats), cordon and taints."""
    status, spec = body.get("status") or {}, body.get("spec") or {}
    node = readiness(body)
    return json.dumps(
        [
            body["metadata"].get("labels"),
            status.get("allocatable"),
            (node.ready, node.since),
            spec.get("unschedulable"),
            spec.get("taints"),
        ],
        sort_keys=True,
    )


def trainer_fingerprint(body: Mapping[str, Any]) -> str:
    """The fields of a Trainer a plan reads (not its progress or the other controllers' sections)."""
    meta, status = body["metadata"], body.get("status") or {}
    admitted = [c for c in status.get("conditions") or () if c.get("type") == CONDITION]
    return json.dumps(
        [
            meta.get("generation"),
            meta.get("deletionTimestamp"),
            queue_of(meta.get("labels")),
            (meta.get("labels") or {}).get(PRIORITY_LABEL),
            meta.get("namespace"),
            status.get("phase"),
            (status.get("progress") or {}).get("completionTime"),
            status.get("quota"),
            [(c.get("status"), c.get("reason"), c.get("observedGeneration")) for c in admitted],
            (status.get("profile") or {}).get("contribution"),
            (status.get("profile") or {}).get("placementPlugin"),
            (status.get("profile") or {}).get("packing"),
            (status.get("checkpoint") or {}).get("lastCommitTime"),
            {
                k: v
                for k, v in ((status.get("checkpoint") or {}).get("saveRequest") or {}).items()
                if k in ("id", "phase")
            },
        ],
        sort_keys=True,
    )


def _answered(section: ProfileStatus | None, generation: int) -> bool:
    """The profile controller has answered for this generation (its contribution written)."""
    return section is not None and section.contribution is not None and section.contribution.generation == generation


def save_of(request: SaveRequest | None) -> tuple[str, str] | None:
    return (request.id, request.phase) if request is not None else None


def trainer_info(
    body: Mapping[str, Any], quota: QuotaStatus | None = None, conditions: Sequence[Mapping[str, Any]] | None = None
) -> TrainerInfo:
    """The Trainer as the plan sees it; ``quota`` and ``conditions`` stand for its status's own
    (this controller's last write, not yet in the body)."""
    meta = body["metadata"]
    if conditions is None:
        conditions = (body.get("status") or {}).get("conditions")
    trainer = Trainer.model_validate(body)
    status = trainer.status or TrainerStatus()
    finished = None
    if status.phase in ("Succeeded", "Failed"):
        finished = (status.progress.completion_time if status.progress else None) or meta.get("creationTimestamp")
    # A profile section left from before spec.profile was removed counts no more (contracts.asks).
    section = status.profile if asks(trainer.spec, "profile") else None
    profile = section.contribution.pod if section and section.contribution else None
    return TrainerInfo(
        uid=meta["uid"],
        namespace=meta["namespace"],
        name=meta["name"],
        generation=int(meta.get("generation") or 0),
        created=meta.get("creationTimestamp") or "",
        spec=trainer.spec,
        quota=quota if quota is not None else (status.quota or QuotaStatus()),
        conditions=parse(conditions),
        profile=profile,
        finished=finished,
        deleting=bool(meta.get("deletionTimestamp")),
        last_commit=status.checkpoint.last_commit_time if status.checkpoint else None,
        save=save_of(status.checkpoint.save_request if status.checkpoint else None),
        queue=queue_of(meta.get("labels")),
        controller_uid=controller_uid(body) or None,
        kueue_priority_class=(meta.get("labels") or {}).get(PRIORITY_LABEL) or None,
        placement_plugin=section.placement_plugin if section else None,
        profile_packing=section.packing if section else None,
        profile_pending=asks(trainer.spec, "profile") and not _answered(section, int(meta.get("generation") or 0)),
        phase=status.phase or "",
    )

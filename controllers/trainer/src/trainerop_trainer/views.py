"""What the trainer's decision sees of the world (pure): its pods, their heartbeat Leases, the
nodes under them, and each role's failure history (kept in status); and how they are read from
the objects the watches deliver."""

import json
import math
import re
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from trainerop_common.contracts import (
    ADMISSION_ANNOTATION,
    EPOCH_ANNOTATION,
    MAX_METRICS,
    METRIC_NAME,
    METRICS_ANNOTATION,
    NODE_ANNOTATION,
    REPLICA_TYPE_LABEL,
    SECONDS_PER_EPOCH_ANNOTATION,
    SECONDS_PER_STEP_ANNOTATION,
    STEP_ANNOTATION,
    TOTAL_STEPS_ANNOTATION,
    TRAINER_NAME_LABEL,
    replica_index,
)
from trainerop_common.models import INIT_CONTAINER as MODEL_INIT
from trainerop_common.models import VERIFIED, read_termination
from trainerop_common.nodes import NodeReadiness, gone_reason, lost
from trainerop_common.topology import ROLES, Role


@dataclass(frozen=True)
class PodView:
    """What the decision needs to know of one pod."""

    name: str
    uid: str
    role: Role
    index: int
    phase: str = "Pending"  # Pending, Running, Succeeded, Failed, Unknown
    ready: bool = False
    deleting: bool = False
    exit_code: int | None = None
    reason: str = ""
    node: str = ""
    started: str | None = None  # status.startTime
    admission: str = ""  # the quota admission it was created under (ADMISSION_ANNOTATION)
    pinned: str = ""  # the node that admission placed it on (NODE_ANNOTATION)
    unschedulable: str = ""  # the scheduler's message while it finds no node for the pod
    waiting: str = ""  # why the training container is not running yet (ImagePullBackOff: ...)
    model: tuple[str, str] | None = None  # (reason, message) its model initializer ended with

    @property
    def finished(self) -> bool:
        return self.phase in ("Succeeded", "Failed")


@dataclass(frozen=True)
class LeaseView:
    """A replica's heartbeat Lease: when it was last renewed and the progress it carried."""

    name: str
    renew_time: str | None = None
    epoch: int = 0
    step: int = 0
    total_steps: int = 0  # 0: not reported
    seconds_per_step: float | None = None  # the pace its process measured
    seconds_per_epoch: float | None = None
    metrics: tuple[tuple[str, str], ...] = ()  # (name, value), as reported


@dataclass(frozen=True)
class RestartBackoff:
    """Delay before the n-th replacement of a role's pods: the first is immediate, then
    ``base``, 2 x ``base``, ... up to ``cap`` seconds (controller flags)."""

    base: float = 1.0
    cap: float = 60.0

    @property
    def reset_after(self) -> float:
        """A failure this long after the previous one starts the backoff over."""
        return 5 * self.cap

    def delay(self, recent_failures: int) -> float:
        return 0.0 if recent_failures <= 1 else min(self.cap, self.base * 2 ** (recent_failures - 2))


@dataclass(frozen=True)
class RoleHistory:
    restarts: int = 0
    last_failure: str | None = None
    recent: int = 0  # failures in a row, each within reset_after of the previous
    counted: frozenset[str] = frozenset()  # failed pods (uids) already in restarts, not yet gone


History = Mapping[str, RoleHistory]


@dataclass(frozen=True)
class NodeLoss:
    lost: dict[str, str]  # node -> why it counts as lost
    next_check: float | None  # seconds until a not-ready node's grace period ends
    deleted: frozenset[str] = frozenset()  # of the lost, those gone from the API (not just silent)


def lost_nodes(nodes: Sequence[NodeReadiness], pod_nodes: Set[str], now: datetime, grace: float) -> NodeLoss:
    """The nodes the pods are on that count as lost (trainerop_common.nodes)."""
    known = {n.name: n for n in nodes}
    found: dict[str, str] = {}
    pending: list[float] = []
    for name in pod_nodes:
        why, left = lost(known[name], now, grace) if name in known else (gone_reason(name), None)
        if why is not None:
            found[name] = why
        elif left is not None:
            pending.append(left)
    return NodeLoss(found, min(pending) if pending else None, frozenset(pod_nodes - known.keys()))


def pod_view(body: dict[str, Any], container: str) -> PodView | None:
    """The decision's view of a pod; exit code and start come from the training container
    ``container`` (a sidecar's exit must not decide whether the run is retried)."""
    meta, status = body.get("metadata", {}), body.get("status") or {}
    labels = meta.get("labels") or {}
    role = labels.get(REPLICA_TYPE_LABEL)
    if role not in ROLES:
        return None
    statuses = status.get("containerStatuses") or ()
    main = next((c for c in statuses if c.get("name") == container), statuses[0] if statuses else {})
    state = main.get("state") or {}
    terminated = state.get("terminated")
    # The stall clock starts when the training container starts, not when the pod was accepted
    # (image pulls and the rendezvous wait come before).
    started = (state.get("running") or {}).get("startedAt") or (terminated or {}).get("startedAt")
    conditions = status.get("conditions") or ()
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    return PodView(
        name=meta["name"],
        uid=meta.get("uid", ""),
        role=role,
        index=replica_index(labels),
        phase=status.get("phase") or "Pending",
        ready=ready,
        deleting=bool(meta.get("deletionTimestamp")),
        exit_code=terminated.get("exitCode") if terminated else None,
        reason=(terminated or {}).get("reason") or status.get("reason") or "",
        node=(body.get("spec") or {}).get("nodeName") or "",
        started=started,
        admission=(meta.get("annotations") or {}).get(ADMISSION_ANNOTATION, ""),
        pinned=(meta.get("annotations") or {}).get(NODE_ANNOTATION, ""),
        unschedulable=next((c.get("message") or "no node fits" for c in conditions if unscheduled(c)), ""),
        waiting=waiting_reason(state.get("waiting") or {}),
        model=model_outcome(status.get("initContainerStatuses") or ()),
    )


def model_outcome(statuses: Sequence[Mapping[str, Any]]) -> tuple[str, str] | None:
    """(reason, message) of the pod's model initializer once it ended (its termination message,
    model.py), else None."""
    init = next((c for c in statuses if c.get("name") == MODEL_INIT), {})
    ended = (init.get("state") or {}).get("terminated")
    if not ended:
        return None
    text = str(ended.get("message") or "")
    if ended.get("exitCode") == 0:
        return VERIFIED, read_termination(text)[1] if text else "the model is in the cache"
    if not text:
        return "FetchFailed", f"the initializer exited with code {ended.get('exitCode')} ({ended.get('reason')})"
    return read_termination(text)


# A container waiting for these is on its way; any other reason (ImagePullBackOff, ErrImagePull,
# CreateContainerConfigError, CrashLoopBackOff) wants a person's attention.
ON_ITS_WAY = frozenset({"", "ContainerCreating", "PodInitializing"})


def unscheduled(condition: Mapping[str, Any]) -> bool:
    return bool(
        condition.get("type") == "PodScheduled"
        and condition.get("status") == "False"
        and condition.get("reason") == "Unschedulable"
    )


def waiting_reason(waiting: Mapping[str, Any]) -> str:
    reason = str(waiting.get("reason") or "")
    if reason in ON_ITS_WAY:
        return ""
    message = str(waiting.get("message") or "")
    return f"{reason}: {message}" if message else reason


def progress_only(view: PodView | None) -> bool:
    """A pod event that only moves a replica towards running (created, scheduled, started,
    ready): the status's counts can wait a moment for its siblings' events. A pod deleted,
    going, finished, failed or of an unknown phase is acted on at once."""
    return view is not None and not view.deleting and view.exit_code is None and view.phase in ("Pending", "Running")


def setback(view: PodView | None) -> bool:
    """A pod event a run's recovery starts from (the pod failed, its container exited with an
    error, it is going, its node is unreachable): its Trainer is reconciled ahead of the others
    waiting for a turn, not after a ramp's reconciles."""
    if view is None:
        return False
    return view.deleting or view.phase in ("Failed", "Unknown") or view.exit_code not in (None, 0)


def owner_of(obj: Mapping[str, Any]) -> tuple[str, str]:
    """The (namespace, Trainer name) a child belongs to, from its trainer-name label."""
    meta = obj.get("metadata", {})
    return (str(meta.get("namespace", "")), str((meta.get("labels") or {}).get(TRAINER_NAME_LABEL, "")))


KEPT_METADATA = ("name", "namespace", "uid", "labels", "ownerReferences", "deletionTimestamp")
KEPT_ANNOTATIONS = (ADMISSION_ANNOTATION, NODE_ANNOTATION)
KEPT_STATUS = ("phase", "reason")


def pod_essentials(body: dict[str, Any]) -> dict[str, Any]:
    """What the trainer holds of each of its pods: what :func:`pod_view` and the owner lookups read
    (names, labels, its owners' uids, our annotations, the node, phase, readiness, each container's
    state), not the spec it wrote itself (the env alone is most of a pod) nor the rest of the status
    (the other conditions and their times were a quarter of what it held of a running pod)."""
    meta = body.get("metadata") or {}
    kept = {k: meta[k] for k in KEPT_METADATA if k in meta}
    if "ownerReferences" in kept:
        kept["ownerReferences"] = [{"uid": ref.get("uid")} for ref in kept["ownerReferences"]]
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k in KEPT_ANNOTATIONS}
    if annotations:
        kept["annotations"] = annotations
    status = body.get("status")
    if status is not None:
        inits = [
            {"name": MODEL_INIT, "state": {"terminated": ended}}
            for c in status.get("initContainerStatuses") or ()
            if c.get("name") == MODEL_INIT and (ended := (c.get("state") or {}).get("terminated"))
        ]
        containers = [{"name": c.get("name"), "state": c.get("state")} for c in status.get("containerStatuses") or ()]
        ready = [
            {"type": "Ready", "status": c.get("status")}
            for c in status.get("conditions") or ()
            if c.get("type") == "Ready"
        ] + [
            {k: c.get(k) for k in ("type", "status", "reason", "message")}
            for c in status.get("conditions") or ()
            if unscheduled(c)
        ]
        status = {k: status[k] for k in KEPT_STATUS if k in status}
        if containers:
            status["containerStatuses"] = containers
        if inits:  # the model initializer's outcome (model_outcome)
            status["initContainerStatuses"] = inits
        if ready:
            status["conditions"] = ready
    return {"metadata": kept, "spec": {"nodeName": (body.get("spec") or {}).get("nodeName")}, "status": status}


# What a pod may write in its Lease is its own business: the trainer reads only what parses, and
# no more than this much of the metrics.
MAX_METRICS_TEXT = 1024


def lease_view(body: dict[str, Any]) -> LeaseView:
    annotations = body["metadata"].get("annotations") or {}

    def number(key: str) -> int:
        value = str(annotations.get(key, "0"))
        return int(value) if value.isdigit() and len(value) <= 18 else 0

    def seconds(key: str) -> float | None:
        try:
            value = float(str(annotations.get(key, "")))
        except ValueError:
            return None
        return value if math.isfinite(value) and value > 0 else None

    return LeaseView(
        name=body["metadata"]["name"],
        renew_time=(body.get("spec") or {}).get("renewTime"),
        epoch=number(EPOCH_ANNOTATION),
        step=number(STEP_ANNOTATION),
        total_steps=number(TOTAL_STEPS_ANNOTATION),
        seconds_per_step=seconds(SECONDS_PER_STEP_ANNOTATION),
        seconds_per_epoch=seconds(SECONDS_PER_EPOCH_ANNOTATION),
        metrics=reported_metrics(str(annotations.get(METRICS_ANNOTATION, ""))),
    )


def reported_metrics(text: str) -> tuple[tuple[str, str], ...]:
    """The metrics a heartbeat reported (the SDK's JSON object of named numbers): the first
    MAX_METRICS well-named finite numbers, each as a string; nothing from what does not parse."""
    if not text or len(text) > MAX_METRICS_TEXT:
        return ()
    try:
        found = json.loads(text)
    except ValueError:
        return ()
    if not isinstance(found, dict):
        return ()
    out = []
    for name, value in found.items():
        usable = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        if usable and isinstance(name, str) and re.match(METRIC_NAME, name):
            out.append((name, f"{value:.6g}"))
    return tuple(sorted(out)[:MAX_METRICS])

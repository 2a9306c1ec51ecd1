"""Pod spawn latency (docs/metrics.md, docs/tracing.md): once per training pod, when its training
container first runs, a ``pod.spawn`` span (creation to running, with the moment it was scheduled)
and samples of ``trainer_pod_spawn_seconds``."""

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from prometheus_client import Histogram

from trainerop_common.clock import Clock, parse_time
from trainerop_common.contracts import REPLICA_TYPE_LABEL, TRAINER_NAME_LABEL
from trainerop_common.tracing import record_span

FRESH_SECONDS = 120.0  # a pod first seen running later than this after its start is not recorded
SPAWN_SECONDS = Histogram(
    "trainer_pod_spawn_seconds",
    "From a training pod's creation to its node (scheduled) and to its training container running (running).",
    ["stage"],
    buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800),
)


@dataclass(frozen=True)
class Spawn:
    """When a training pod was created, placed on a node, and its container started."""

    created: datetime
    scheduled: datetime | None
    started: datetime


def spawn_of(pod: Mapping[str, Any], container: str) -> Spawn | None:
    """The pod's spawn once its training container runs (None before, or without timestamps)."""
    status = pod.get("status") or {}
    statuses: list[dict[str, Any]] = status.get("containerStatuses") or []
    main = next((c for c in statuses if c.get("name") == container), {})
    started = ((main.get("state") or {}).get("running") or {}).get("startedAt")
    created = (pod.get("metadata") or {}).get("creationTimestamp")
    if not started or not created:
        return None
    scheduled = next(
        (c.get("lastTransitionTime") for c in status.get("conditions") or () if c.get("type") == "PodScheduled"),
        None,
    )
    return Spawn(parse_time(created), parse_time(scheduled) if scheduled else None, parse_time(started))


class SpawnRecorder:
    """Records each pod's spawn once; a pod that started before this process (or long ago: a
    standby taking over) was recorded by the process that saw it start."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        # The API's timestamps have whole seconds: a pod started later in this process's first
        # second reads as started at its beginning, and is still this process's to record.
        self._since = clock.now().replace(microsecond=0)
        self._seen: set[str] = set()  # UIDs of pods whose spawn is recorded

    def forget(self, uid: str) -> None:
        self._seen.discard(uid)

    def observe(self, body: Mapping[str, Any], container: str) -> None:
        uid = body["metadata"].get("uid", "")
        spawn = spawn_of(body, container) if uid not in self._seen else None
        if spawn is None:
            return
        self._seen.add(uid)
        if spawn.started < self._since or (self._clock.now() - spawn.started).total_seconds() > FRESH_SECONDS:
            return
        if spawn.scheduled is not None:
            SPAWN_SECONDS.labels("scheduled").observe(max(0.0, (spawn.scheduled - spawn.created).total_seconds()))
        SPAWN_SECONDS.labels("running").observe(max(0.0, (spawn.started - spawn.created).total_seconds()))
        labels = body["metadata"].get("labels") or {}
        attributes = {
            "k8s.namespace.name": body["metadata"].get("namespace", ""),
            "k8s.pod.name": body["metadata"]["name"],
            "trainer_operator.trainer": labels.get(TRAINER_NAME_LABEL, ""),
            "trainer_operator.role": labels.get(REPLICA_TYPE_LABEL, ""),
        }
        events = {"scheduled": spawn.scheduled} if spawn.scheduled else None
        record_span("pod.spawn", spawn.created, spawn.started, attributes, events)

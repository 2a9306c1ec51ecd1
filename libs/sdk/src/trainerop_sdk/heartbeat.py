"""Progress heartbeats from training code (docs/trainer.md), with the pod's own identity.

Each training pod has a Lease named after the pod, created by its first heartbeat (owned by
the Trainer, so it goes with it). The pods' ServiceAccount may create and renew only the Lease
named like the pod its token is bound to (the API server's admission policy
trainer-operator-checkpoint-reporters), so a pod can never report progress for another. A heartbeat renews
the Lease and records the epoch and step in its annotations; the trainer controller folds them
into ``Trainer.status.progress`` and detects stalls when they stop.

    from trainerop_sdk.heartbeat import Heartbeat
    beat = Heartbeat.in_cluster()
    for epoch in range(ctx.epochs):
        ...
        beat.send(epoch=epoch, step=global_step)

Only the standard library is used, so any training image can carry it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from .kubeapi import MERGE, ApiClient, ApiError
from .names import (
    API_VERSION,
    EPOCH_ANNOTATION,
    REPLICA_INDEX_LABEL,
    REPLICA_TYPE_LABEL,
    STEP_ANNOTATION,
    TRAINER_NAME_LABEL,
    TRAINER_UID_LABEL,
)


class HeartbeatError(Exception):
    """The API server refused or could not be reached; training may go on and retry later."""


def micro_time(moment: datetime) -> str:
    """Kubernetes MicroTime, as Lease.spec.renewTime wants it."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class ReplicaIdentity:
    """Whose Lease it is: the pod's Trainer and place in it (the operator's env contract)."""

    trainer: str
    trainer_uid: str
    role: str
    index: str

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ReplicaIdentity | None:
        keys = ("TRAINER_NAME", "TRAINER_UID", "REPLICA_TYPE", "REPLICA_INDEX")
        return cls(*(env[k] for k in keys)) if all(env.get(k) for k in keys) else None


@dataclass(frozen=True)
class Heartbeat:
    server: str  # https://host:port
    token: str
    namespace: str
    lease: str  # the pod's name
    ca_file: str | None = None
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    replica: ReplicaIdentity | None = None  # to create the Lease on the first beat (None: it must exist)

    @classmethod
    def in_cluster(cls) -> Heartbeat:
        """From the pod's environment: the mounted ServiceAccount token and the pod's name."""
        try:
            api = ApiClient.in_cluster()
        except ApiError as err:
            raise HeartbeatError(str(err)) from err
        lease = os.environ.get("POD_NAME") or os.environ["HOSTNAME"]
        replica = ReplicaIdentity.from_env(os.environ)
        return cls(api.server, api.token, api.namespace, lease, api.ca_file, replica=replica)

    def annotations(self, epoch: int, step: int) -> dict[str, str]:
        return {EPOCH_ANNOTATION: str(epoch), STEP_ANNOTATION: str(step)}

    def patch_body(self, epoch: int, step: int) -> dict[str, object]:
        return {
            "metadata": {"annotations": self.annotations(epoch, step)},
            "spec": {"renewTime": micro_time(self.clock())},
        }

    def lease_body(self, replica: ReplicaIdentity, epoch: int, step: int) -> dict[str, object]:
        """The Lease the first heartbeat creates: labelled like the pod, owned by the Trainer."""
        labels = {
            TRAINER_NAME_LABEL: replica.trainer,
            REPLICA_TYPE_LABEL: replica.role,
            REPLICA_INDEX_LABEL: replica.index,
            TRAINER_UID_LABEL: replica.trainer_uid,
        }
        owner = {"apiVersion": API_VERSION, "kind": "Trainer", "name": replica.trainer, "uid": replica.trainer_uid}
        meta = {"name": self.lease, "labels": labels, "annotations": self.annotations(epoch, step)}
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {**meta, "ownerReferences": [owner]},
            "spec": {"holderIdentity": self.lease, "renewTime": micro_time(self.clock())},
        }

    def send(self, epoch: int, step: int = 0, timeout: float = 5.0) -> None:
        """Renew the pod's Lease with the epoch and step; the first beat creates it."""
        api = ApiClient(self.server, self.token, self.namespace, self.ca_file)
        try:
            self._beat(api, epoch, step, timeout)
        except ApiError as err:
            raise HeartbeatError(f"heartbeat to lease {self.lease}: {err}") from err

    def _beat(self, api: ApiClient, epoch: int, step: int, timeout: float) -> None:
        leases = f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases"
        try:
            api.request("PATCH", f"{leases}/{self.lease}", self.patch_body(epoch, step), MERGE, timeout)
            return
        except ApiError as err:
            if err.code != 404 or self.replica is None:
                raise
        try:
            api.request("POST", leases, self.lease_body(self.replica, epoch, step), timeout=timeout)
        except ApiError as err:
            if err.code != 409:
                raise
            # another process of the pod (a local rank) created it first: renew that one
            api.request("PATCH", f"{leases}/{self.lease}", self.patch_body(epoch, step), MERGE, timeout)

"""Progress heartbeats from training code (docs/trainer.md), with the pod's own identity.

Each training pod has a Lease named after the pod, created by the trainer controller. The
pod's ServiceAccount (``<trainer>-runner``) may patch only the Leases of its own Trainer's
replicas, so a pod can never report progress for another Trainer. A heartbeat renews the Lease
and records the epoch and step in its annotations; the trainer controller folds them into
``Trainer.status.progress`` and detects stalls when they stop.

    from trainerop_sdk.heartbeat import Heartbeat
    beat = Heartbeat.in_cluster()
    for epoch in range(ctx.epochs):
        ...
        beat.send(epoch=epoch, step=global_step)

Only the standard library is used, so any training image can carry it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from .kubeapi import MERGE, ApiClient, ApiError
from .names import EPOCH_ANNOTATION, STEP_ANNOTATION


class HeartbeatError(Exception):
    """The API server refused or could not be reached; training may go on and retry later."""


def micro_time(moment: datetime) -> str:
    """Kubernetes MicroTime, as Lease.spec.renewTime wants it."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class Heartbeat:
    server: str  # https://host:port
    token: str
    namespace: str
    lease: str  # the pod's name
    ca_file: str | None = None
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)

    @classmethod
    def in_cluster(cls) -> Heartbeat:
        """From the pod's environment: the mounted ServiceAccount token and the pod's name."""
        try:
            api = ApiClient.in_cluster()
        except ApiError as err:
            raise HeartbeatError(str(err)) from err
        lease = os.environ.get("POD_NAME") or os.environ["HOSTNAME"]
        return cls(api.server, api.token, api.namespace, lease, api.ca_file)

    def patch_body(self, epoch: int, step: int) -> dict[str, object]:
        return {
            "metadata": {"annotations": {EPOCH_ANNOTATION: str(epoch), STEP_ANNOTATION: str(step)}},
            "spec": {"renewTime": micro_time(self.clock())},
        }

    def send(self, epoch: int, step: int = 0, timeout: float = 5.0) -> None:
        api = ApiClient(self.server, self.token, self.namespace, self.ca_file)
        try:
            api.request(
                "PATCH",
                f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases/{self.lease}",
                self.patch_body(epoch, step),
                MERGE,
                timeout,
            )
        except ApiError as err:
            raise HeartbeatError(f"heartbeat to lease {self.lease}: {err}") from err

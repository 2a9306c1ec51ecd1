"""Progress heartbeats from training code (DESIGN §5), with the pod's own identity.

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

import json
import os
import ssl
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

GROUP = "trainer.operator.kubeflow.org"
EPOCH_ANNOTATION = f"{GROUP}/epoch"
STEP_ANNOTATION = f"{GROUP}/step"
SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


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
        host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        if not host:
            raise HeartbeatError("not running in a pod: KUBERNETES_SERVICE_HOST is not set")
        return cls(
            server=f"https://{host}:{port}",
            token=(SA_DIR / "token").read_text().strip(),
            namespace=(SA_DIR / "namespace").read_text().strip(),
            lease=os.environ.get("POD_NAME") or os.environ["HOSTNAME"],
            ca_file=str(SA_DIR / "ca.crt"),
        )

    def patch_body(self, epoch: int, step: int) -> dict[str, object]:
        return {
            "metadata": {"annotations": {EPOCH_ANNOTATION: str(epoch), STEP_ANNOTATION: str(step)}},
            "spec": {"renewTime": micro_time(self.clock())},
        }

    def send(self, epoch: int, step: int = 0, timeout: float = 5.0) -> None:
        url = f"{self.server}/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases/{self.lease}"
        request = urllib.request.Request(
            url,
            data=json.dumps(self.patch_body(epoch, step)).encode(),
            method="PATCH",
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/merge-patch+json"},
        )
        context = ssl.create_default_context(cafile=self.ca_file) if self.ca_file else None
        try:
            with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
                response.read()
        except urllib.error.HTTPError as err:
            raise HeartbeatError(f"heartbeat to lease {self.lease} refused: {err.code} {err.reason}") from err
        except OSError as err:
            raise HeartbeatError(f"heartbeat to lease {self.lease} failed: {err}") from err

"""The kubeflow controller's writes while its watches lag its own writes (a ramp): a job read
before the controller's own status write is not written again, and a Trainer applied is not
applied again before its watch brings it."""

import copy
from datetime import UTC, datetime
from typing import Any, cast

from trainerop_common.clock import FixedClock
from trainerop_common.config import ControllerConfig
from trainerop_common.kube import Kube
from trainerop_common.runtime import Runtime
from trainerop_kubeflow.config import KubeflowConfig
from trainerop_kubeflow.controller import KubeflowController
from trainerop_kubeflow.kinds import JOB_KINDS

PYTORCH = JOB_KINDS["PyTorchJob"]


class Server:
    """Answers the controller's writes as the API server would, counting them."""

    def __init__(self) -> None:
        self.applied: list[dict[str, Any]] = []
        self.statuses: list[dict[str, Any]] = []
        self.version = 10

    async def validating_webhooks(self) -> set[str]:
        return set()

    async def apply(self, kind: str, body: dict[str, Any]) -> None:
        self.applied.append(body)

    async def apply_status(self, info: Any, namespace: str, name: str, body: dict[str, Any], manager: str) -> str:
        self.statuses.append(body["status"])
        self.version += 1
        return str(self.version)

    async def create_core(self, body: dict[str, Any]) -> bool:
        return True


def job(version: int, status: dict[str, Any] | None = None) -> dict[str, Any]:
    container = {"template": {"spec": {"containers": [{"name": "pytorch", "image": "mnist:1"}]}}}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "j", "namespace": "ns", "uid": "u1", "generation": 1, "resourceVersion": str(version)},
        "spec": {"pytorchReplicaSpecs": {"Master": container, "Worker": container}},
        **({"status": status} if status else {}),
    }


async def started() -> tuple[Server, FixedClock, KubeflowController, dict[str, Any]]:
    """A controller that has reconciled a new job once (its Trainer applied, Created written)."""
    server, clock = Server(), FixedClock(datetime(2026, 12, 4, 10, 0, tzinfo=UTC))
    runtime = Runtime(ControllerConfig(controller="kubeflow"), cast(Kube, server), clock)
    controller = KubeflowController(runtime, KubeflowConfig())
    created = job(5)
    controller.queues["PyTorchJob"].seen(created)
    await controller._reconcile_job(PYTORCH, created)
    return server, clock, controller, created


async def test_a_job_read_before_the_controllers_own_write_is_neither_written_nor_applied_again() -> None:
    server, clock, controller, created = await started()
    assert (len(server.applied), len(server.statuses)) == (1, 1)  # its Trainer, Created
    clock.advance(1)  # a status computed again would differ in its times
    await controller._reconcile_job(PYTORCH, copy.deepcopy(created))  # the watch has not brought the write
    assert (len(server.applied), len(server.statuses)) == (1, 1)
    written = job(server.version, server.statuses[0])  # the write's own event
    await controller._reconcile_job(PYTORCH, written)
    assert (len(server.applied), len(server.statuses)) == (1, 1)  # the Trainer's watch still lags


async def test_a_change_of_the_counts_alone_is_written_once_it_has_waited() -> None:
    server, clock, controller, _ = await started()
    starting = {"phase": "Pending", "topology": {"replicas": {"master": {"active": 1, "ready": 1}}}}
    controller.rt.queue.seen(server.applied[0] | {"status": starting})  # the master runs, the workers do not yet
    written = job(server.version, server.statuses[0])
    await controller._reconcile_job(PYTORCH, written)
    assert len(server.statuses) == 1  # held
    clock.advance(5)
    await controller._reconcile_job(PYTORCH, written)
    assert len(server.statuses) == 2
    assert server.statuses[1]["replicaStatuses"]["Master"]["active"] == 1

"""The kubeflow controller when a job's Trainer is deleted: made again for a job that exists, and
the job forgotten when it is gone too (deleted in a watch's gap, its Trainer collected meanwhile)."""

import asyncio
from typing import Any, cast

import pytest

from trainerop_common.config import ControllerConfig
from trainerop_common.kube import Kube
from trainerop_common.runtime import Runtime
from trainerop_kubeflow.config import KubeflowConfig
from trainerop_kubeflow.controller import KubeflowController


class Jobs:
    """Answers a job's GET as the API server would: the body, or None when it does not exist."""

    def __init__(self, existing: set[str]) -> None:
        self.existing = existing

    async def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        return {"metadata": {"name": name, "namespace": namespace}} if name in self.existing else None


def trainer_of(job: str) -> dict[str, Any]:
    owner = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": job, "uid": "u", "controller": True}
    return {"metadata": {"name": job, "namespace": "ns", "ownerReferences": [owner]}}


@pytest.mark.parametrize(
    ("known", "existing", "reconciled", "still_known"),
    [
        (True, True, True, True),  # deleted by hand: the job's reconcile makes it again
        (True, False, False, False),  # the job went in a watch's gap: forgotten, no Trainer made for it
        (False, False, False, False),  # the job's deletion seen first: nothing to do
    ],
)
async def test_a_deleted_trainer_is_made_again_only_for_a_job_that_still_exists(
    known: bool, existing: bool, reconciled: bool, still_known: bool
) -> None:
    rt = Runtime(ControllerConfig(controller="kubeflow"), cast(Kube, Jobs({"j"} if existing else set())))
    controller = KubeflowController(rt, KubeflowConfig())
    queue = controller.queues["PyTorchJob"]
    done: list[str] = []

    async def reconcile(job: Any) -> None:
        done.append(job["metadata"]["name"])

    queue._work = reconcile
    if known:
        queue.seen({"metadata": {"name": "j", "namespace": "ns", "uid": "u"}})
    controller.trainer_gone(trainer_of("j"))
    while rt.tasks._tasks:
        await asyncio.gather(*rt.tasks._tasks)
    assert (done == ["j"], ("ns", "j") in queue.objects) == (reconciled, still_known)

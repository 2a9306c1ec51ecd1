"""The kubeflow controller when a job's Trainer is deleted: made again for the job as a fresh read
finds it, and the job forgotten when it is gone too (deleted in a watch's gap, its Trainer collected
meanwhile); and its resync forgets the jobs a list no longer has."""

import asyncio
from typing import Any, cast

import pytest

from trainerop_common.config import ControllerConfig
from trainerop_common.kube import Kube
from trainerop_common.runtime import Runtime
from trainerop_kubeflow.config import KubeflowConfig
from trainerop_kubeflow.controller import KubeflowController


def job(uid: str = "u1", **meta: Any) -> dict[str, Any]:
    return {"metadata": {"name": "j", "namespace": "ns", "uid": uid, **meta}}


class Jobs:
    """Answers a job's GET and a list of jobs as the API server would."""

    def __init__(self, existing: dict[str, Any] | None) -> None:
        self.existing = existing

    async def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        return self.existing

    async def list_all(self, kind: str, keep: Any) -> list[dict[str, Any]]:
        return [self.existing] if self.existing is not None and kind == "PyTorchJob" else []


def trainer_of(uid: str) -> dict[str, Any]:
    owner = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "j", "uid": uid, "controller": True}
    return {"metadata": {"name": "j", "namespace": "ns", "ownerReferences": [owner]}}


def controller_with(existing: dict[str, Any] | None) -> tuple[KubeflowController, list[str]]:
    rt = Runtime(ControllerConfig(controller="kubeflow"), cast(Kube, Jobs(existing)))
    controller = KubeflowController(rt, KubeflowConfig())
    reconciled: list[str] = []  # the uid of each job body reconciled

    async def reconcile(body: Any) -> None:
        reconciled.append(body["metadata"]["uid"])

    controller.queues["PyTorchJob"]._work = reconcile
    return controller, reconciled


async def settle(controller: KubeflowController) -> None:
    while controller.rt.tasks._tasks:
        await asyncio.gather(*controller.rt.tasks._tasks)


@pytest.mark.parametrize(
    ("known", "read", "reconciled", "still_known"),
    [
        (True, job(), ["u1"], True),  # deleted by hand: the job's reconcile makes it again
        (True, None, [], False),  # the job went in a watch's gap: forgotten, no Trainer made for it
        (True, job(deletionTimestamp="2026-12-04T10:00:00Z"), [], True),  # going: its deletion will come
        (True, job("u2"), ["u2"], True),  # deleted and made again under its name: the new one's Trainer
        (False, None, [], False),  # the job's deletion seen first: nothing to do
    ],
)
async def test_a_deleted_trainer_is_made_again_only_for_the_job_a_fresh_read_finds(
    known: bool, read: dict[str, Any] | None, reconciled: list[str], still_known: bool
) -> None:
    controller, done = controller_with(read)
    queue = controller.queues["PyTorchJob"]
    if known:
        queue.seen(job())
    controller._applied[("ns", "j")] = "digest"  # what it applied is gone: made again, not taken as applied
    controller.trainer_gone(trainer_of("u1"))
    await settle(controller)
    assert (done, ("ns", "j") in queue.objects) == (reconciled, still_known)
    assert controller._applied == {}


async def test_a_resync_forgets_the_jobs_a_list_no_longer_has_before_reconciling() -> None:
    """A relist of a kind with no job left ends without an object to start its convergence: the
    resync's own list is what keeps the last job deleted in a watch's gap from getting a Trainer."""
    controller, done = controller_with(None)
    controller.queues["PyTorchJob"].seen(job())
    await controller._resync_jobs()
    await settle(controller)
    assert (done, controller.queues["PyTorchJob"].objects) == ([], {})

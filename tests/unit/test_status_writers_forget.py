"""Each controller's StatusWriter of its own kind forgets an object once its deletion is seen: the
writer keeps the resourceVersion of its last write per object, and an entry per profile,
QuotaPolicy or Checkpoint ever written would otherwise stay for the life of the process."""

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, cast

import pytest

from trainerop_checkpoint.config import CheckpointConfig
from trainerop_checkpoint.controller import CheckpointController
from trainerop_common.conditions import Desired
from trainerop_common.config import ControllerConfig
from trainerop_common.kube import Kube
from trainerop_common.runtime import Runtime
from trainerop_common.status_writer import StatusWriter
from trainerop_profile.config import ProfileConfig
from trainerop_profile.controller import VALID, ProfileController
from trainerop_quota.config import QuotaConfig
from trainerop_quota.controller import QuotaController

Changed = Callable[[tuple[str, str], dict[str, Any], bool], None]


class Applier:
    """The one request a status write makes; the controllers' other reads are never reached here."""

    def __getattr__(self, name: str) -> Callable[..., Awaitable[None]]:
        async def unused(*_: Any, **__: Any) -> None:
            raise AssertionError(f"{name} was not expected")

        return unused

    async def apply_status(self, *_: Any) -> str:
        return "7"


def body(kind: str, namespace: str | None, name: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "uid": f"uid-{name}", "resourceVersion": "5", "generation": 1}
    if namespace is not None:
        meta["namespace"] = namespace
    return {"apiVersion": "trainer.operator.kubeflow.org/v1alpha1", "kind": kind, "metadata": meta, "spec": {}}


def runtime(name: str) -> Runtime:
    return Runtime(ControllerConfig(controller=name), cast(Kube, Applier()))


Case = tuple[StatusWriter, Changed, Mapping[str, Any], tuple[Desired, ...]]  # + what a write says


def profile_case(_: pytest.MonkeyPatch) -> Case:
    controller = ProfileController(runtime("profile"), ProfileConfig())
    valid = Desired.true(VALID, "Accepted", "profile is valid")
    return controller.profile_writers["ClusterTrainingProfile"], controller._profile_changed, {}, (valid,)


def quota_case(monkeypatch: pytest.MonkeyPatch) -> Case:
    controller = QuotaController(runtime("quota"), QuotaConfig())
    monkeypatch.setattr(controller.planning, "poke", lambda after=0: None)  # no plan in this test
    return controller.policy_writer, controller._policy_changed, {"admittedTrainers": 1}, ()


def checkpoint_case(_: pytest.MonkeyPatch) -> Case:
    controller = CheckpointController(runtime("checkpoint"), CheckpointConfig())
    return controller.checkpoint_writer, controller._checkpoint_changed, {"phase": "Committed"}, ()


@pytest.mark.parametrize(
    ("make", "kind", "namespace"),
    [
        (profile_case, "ClusterTrainingProfile", None),
        (quota_case, "QuotaPolicy", None),
        (checkpoint_case, "Checkpoint", "team-a"),
    ],
)
def test_a_deleted_object_is_forgotten_by_its_writer(
    make: Callable[[pytest.MonkeyPatch], Case], kind: str, namespace: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer, changed, owned, conditions = make(monkeypatch)
    obj = body(kind, namespace, "x")
    key = (namespace or "", "x")

    async def scenario() -> list[float | None]:
        seen = []
        assert await writer.write(obj, owned, conditions, "2026-12-02T00:00:00Z")  # a request made
        seen.append(writer.since_written(namespace, "x"))
        changed(key, obj, False)  # a change that is not a deletion keeps what was written
        await asyncio.sleep(0)  # (what it spawns runs)
        seen.append(writer.since_written(namespace, "x"))
        changed(key, obj, True)
        seen.append(writer.since_written(namespace, "x"))
        return seen

    written, after_change, after_delete = asyncio.run(scenario())
    assert written is not None
    assert after_change is not None
    assert after_delete is None

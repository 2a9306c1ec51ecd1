"""Carrying out the trainer's decisions: a pod created but not yet delivered by the watch counts as
existing (no reconcile in between creates it twice), until it is seen or 30 s have passed; the
runner identity is applied once per namespace however many Trainers there start together."""

import asyncio
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any, cast

from tests.factories import trainer_spec
from trainerop_common.clock import FixedClock
from trainerop_common.runtime import Runtime
from trainerop_trainer.actions import Actions
from trainerop_trainer.decide import Decision
from trainerop_trainer.pods import Owner, PodSettings, pod_manifest, runner_manifests
from trainerop_trainer.topology import Replica

OWNER = Owner("t", "ns", "uid", 1)
SPEC = trainer_spec(epochs=1, image="i", topology={"workers": 2})
PODS = tuple(pod_manifest(OWNER, SPEC, Replica("worker", i), {}, PodSettings()) for i in range(2))
BODY = {"metadata": {"name": "t", "namespace": "ns", "uid": "uid"}}


class Kube:
    def __init__(self, existing: tuple[str, ...] = ()) -> None:
        self.created: list[str] = []
        self.applied: list[str] = []
        self.deleted: list[str] = []
        self.existing = existing  # names a create finds taken (409)

    async def create_core(self, body: dict[str, Any]) -> bool:
        await asyncio.sleep(0)
        if body["metadata"]["name"] in self.existing:
            return False
        self.created.append(body["metadata"]["name"])
        return True

    async def delete_core(self, kind: str, namespace: str, name: str, force: bool = False) -> bool:
        self.deleted.append(name)
        return True

    async def apply_core(self, body: dict[str, Any]) -> None:
        await asyncio.sleep(0.001)  # the first apply is still in flight when the others come
        self.applied.append(f"{body['kind']}/{body['metadata']['namespace']}")


def actions(existing: tuple[str, ...] = ()) -> tuple[Actions, Kube, FixedClock]:
    kube, clock = Kube(existing), FixedClock(datetime(2026, 1, 1, tzinfo=UTC))
    runtime = SimpleNamespace(kube=kube, clock=clock, event=lambda *_: None)
    return Actions(cast(Runtime, runtime)), kube, clock


async def test_created_pods_count_as_existing_until_the_watch_delivers_them() -> None:
    act, kube, clock = actions()
    carried = await act.carry_out(BODY, OWNER, Decision(status={}, conditions=(), create_pods=PODS), ())
    assert (carried.refused, carried.pods_created) == (False, True)
    assert kube.created == ["t-worker-0", "t-worker-1"]
    assert [p["metadata"]["name"] for p in act.expected_pods(OWNER, set())] == ["t-worker-0", "t-worker-1"]
    assert act.expected_pods(Owner("t", "ns", "another-uid", 1), set()) == []  # a new Trainer of that name
    assert [p["metadata"]["name"] for p in act.expected_pods(OWNER, {"t-worker-0"})] == ["t-worker-1"]
    assert [p["metadata"]["name"] for p in act.expected_pods(OWNER, set())] == ["t-worker-1"]  # seen: forgotten
    clock.advance(31)
    assert act.expected_pods(OWNER, set()) == []  # never seen: the cache is trusted again


async def test_a_pod_the_watch_delivered_is_no_longer_expected_even_if_gone_again() -> None:
    """Created, then deleted by someone else before the next reconcile: the watch delivered it (and
    its deletion), so the next reconcile creates it again rather than waiting 30 s."""
    act, _, _ = actions()
    await act.carry_out(BODY, OWNER, Decision(status={}, conditions=(), create_pods=PODS), ())
    act.delivered(("ns", "t-worker-0"))
    assert [p["metadata"]["name"] for p in act.expected_pods(OWNER, set())] == ["t-worker-1"]


async def test_a_pod_found_existing_or_deleted_is_not_expected() -> None:
    """A name already taken (a predecessor still terminating, someone else's pod) is not a pod this
    Trainer has: not expected, and the status must not say every pod was created."""
    act, _, _ = actions(existing=("t-worker-1",))
    carried = await act.carry_out(BODY, OWNER, Decision(status={}, conditions=(), create_pods=PODS), ())
    assert (carried.refused, carried.pods_created) == (False, False)
    assert [p["metadata"]["name"] for p in act.expected_pods(OWNER, set())] == ["t-worker-0"]
    await act.carry_out(BODY, OWNER, Decision(status={}, conditions=(), delete_pods=("t-worker-0",)), ())
    assert act.expected_pods(OWNER, set()) == []


async def test_the_runner_is_applied_once_for_the_trainers_of_a_namespace_starting_together() -> None:
    act, kube, _ = actions()
    decision = Decision(status={}, conditions=(), runner=tuple(runner_manifests("ns")))
    owners = [Owner(f"t{i}", "ns", f"u{i}", 1) for i in range(5)]
    await asyncio.gather(*(act.carry_out(BODY, o, decision, ()) for o in owners))
    assert kube.applied == ["ServiceAccount/ns", "Role/ns", "RoleBinding/ns"]

"""Carrying out the trainer's decisions: a pod created but not yet delivered by the watch counts as
existing (no reconcile in between creates it twice), until it is seen or 30 s have passed; the
runner identity is applied once per namespace however many Trainers there start together, and
checked again for pods created there after a resync period: applied only when one was deleted or
edited by hand (it comes back), never when it is as it should be (a no-op resync writes nothing)."""

import asyncio
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any, cast

import pytest
from lightkube import ApiError
from lightkube.models.meta_v1 import Status

from tests.factories import trainer_spec
from trainerop_common.clock import FixedClock
from trainerop_common.contracts import RUNNER_SERVICE_ACCOUNT
from trainerop_common.kube import Deletion
from trainerop_common.runtime import Runtime
from trainerop_trainer.actions import Actions
from trainerop_trainer.decide import Decision
from trainerop_trainer.guard import GuardChange, guard_manifest
from trainerop_trainer.pods import (
    Owner,
    PodSettings,
    pod_manifest,
    runner_manifests,
    secret_grants,
    service_manifest,
)
from trainerop_trainer.topology import Replica
from trainerop_trainer.views import pod_view

OWNER = Owner("t", "ns", "uid", 1)
SPEC = trainer_spec(epochs=1, image="i", topology={"workers": 2})
PODS = tuple(pod_manifest(OWNER, SPEC, Replica("worker", i), {}, PodSettings()) for i in range(2))
BODY = {"metadata": {"name": "t", "namespace": "ns", "uid": "uid"}}


class Kube:
    def __init__(self, existing: tuple[str, ...] = (), failing: tuple[str, ...] = ()) -> None:
        self.created: list[str] = []
        self.while_creating: list[str] = []  # names the watch delivers before a create's answer
        self.act: Actions | None = None
        self.applied: list[str] = []
        self.deleted: list[str] = []
        self.existing = existing  # names a create finds taken (409)
        self.failing = failing  # names whose create the API server fails (500)
        self.others: dict[str, dict[str, Any]] = {}  # kind/name -> objects get_core finds
        self.patched: list[tuple[str, dict[str, Any]]] = []  # (kind/name, merge patch)
        self.stored: dict[tuple[str, str, str], dict[str, Any]] = {}  # (kind, namespace, name) -> what was applied
        self.events: list[tuple[str, str, str]] = []  # the Events the controller posted
        self.removing: tuple[str, ...] = ()  # names the API server removes on their delete (Failed pods)
        self.requeued: list[tuple[str, str]] = []  # the Trainers the actions asked to reconcile soon

    async def create_core(self, body: dict[str, Any]) -> bool:
        await asyncio.sleep(0)
        if body["metadata"]["name"] in self.failing:
            raise ApiError(status=Status(code=500, message="etcdserver: request timed out", reason="InternalError"))
        if body["metadata"]["name"] in self.existing:
            return False
        self.created.append(body["metadata"]["name"])
        if body["metadata"]["name"] in self.while_creating and self.act is not None:
            self.act.delivered(("ns", body["metadata"]["name"]), "t")  # ADDED (and DELETED) came first
        return True

    async def get_core(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self.stored.get((kind, namespace, name)) or self.others.get(f"{kind}/{name}")

    async def merge_patch(self, kind: str, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        self.patched.append((f"{kind}/{name}", patch))
        return patch

    async def delete_core(
        self, kind: str, namespace: str, name: str, force: bool = False, uid: str | None = None
    ) -> Deletion:
        self.deleted.append(name if uid is None else f"{name}@{uid}")
        return "removed" if name in self.removing else "deleting"

    async def apply_core(self, body: dict[str, Any]) -> None:
        await asyncio.sleep(0.001)  # the first apply is still in flight when the others come
        meta = body["metadata"]
        self.applied.append(f"{body['kind']}/{meta['namespace']}")
        served = {**meta, "uid": f"uid-{len(self.applied)}", "resourceVersion": "1"}  # what the server adds
        self.stored[(body["kind"], meta["namespace"], meta["name"])] = {**body, "metadata": served}


def actions(existing: tuple[str, ...] = (), failing: tuple[str, ...] = ()) -> tuple[Actions, Kube, FixedClock]:
    kube, clock = Kube(existing, failing), FixedClock(datetime(2026, 1, 1, tzinfo=UTC))
    events: list[tuple[str, str, str]] = []
    runtime = SimpleNamespace(
        kube=kube,
        clock=clock,
        event=lambda _, *e: events.append(e),
        config=SimpleNamespace(resync_seconds=300),
        requeue=lambda keys, within=0: kube.requeued.extend(keys),
    )
    kube.events = events
    kube.act = Actions(cast(Runtime, runtime))
    return kube.act, kube, clock


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
    act.delivered(("ns", "t-worker-0"), "t")
    assert [p["metadata"]["name"] for p in act.expected_pods(OWNER, set())] == ["t-worker-1"]


async def test_a_pod_the_watch_delivered_before_its_create_answered_is_not_expected() -> None:
    """The watch can deliver a new pod, and its deletion by someone else, before the create's answer
    comes back: the expectation is raised before the request, so the delivery lowers it and the
    next reconcile creates the pod again (raised after the answer, it hid the loss for 30 s)."""
    act, kube, _ = actions()
    kube.while_creating = ["t-worker-0"]
    carried = await act.carry_out(BODY, OWNER, Decision(status={}, conditions=(), create_pods=PODS), ())
    assert (carried.refused, carried.pods_created) == (False, True)
    assert [p["metadata"]["name"] for p in act.expected_pods(OWNER, set())] == ["t-worker-1"]


async def test_a_reconcile_is_due_when_the_first_open_expectation_lapses() -> None:
    """Whatever else the Trainer waits for, a reconcile is due when an expectation lapses: a pod
    never delivered is then trusted gone and created again (the controller once asked for this
    only in reconciles that created pods, and a sooner timer of another kind took its place)."""
    act, _, clock = actions()
    assert act.next_lapse(OWNER) is None
    await act.carry_out(BODY, OWNER, Decision(status={}, conditions=(), create_pods=PODS), ())
    assert act.next_lapse(OWNER) == 30.0
    clock.advance(12)
    assert act.next_lapse(OWNER) == 18.0  # a later reconcile that created nothing still asks for it
    act.delivered(("ns", "t-worker-0"), "t")
    act.delivered(("ns", "t-worker-1"), "t")
    assert act.next_lapse(OWNER) is None


async def test_pods_are_deleted_by_the_uid_decided_on() -> None:
    """A pod is deleted with its UID as a precondition: a replacement created since under the same
    name is not deleted in its place. A pod known only from its create (no UID yet) goes by name."""
    act, kube, _ = actions()
    seen = pod_view({**PODS[0], "metadata": {**PODS[0]["metadata"], "uid": "u0"}}, "trainer")
    assert seen is not None
    decision = Decision(status={}, conditions=(), delete_pods=("t-worker-0", "t-worker-1"))
    await act.carry_out(BODY, OWNER, decision, [seen])
    assert sorted(kube.deleted) == ["t-worker-0@u0", "t-worker-1"]


async def test_a_failed_pod_removed_by_its_delete_is_replaced_without_waiting_for_the_watch() -> None:
    """The API server removes a Failed pod on its delete (no grace period): the Trainer is
    reconciled again at once and that pod counts as gone (Actions.removed), where a pod whose
    deletion waits for its kubelet stays "deleting" until the watch delivers the deletion."""
    act, kube, _ = actions()
    kube.removing = ("t-worker-0",)
    views = [pod_view({**p, "metadata": {**p["metadata"], "uid": f"u{i}"}}, "trainer") for i, p in enumerate(PODS)]
    seen = [v for v in views if v is not None]
    await act.replace_failed(OWNER, Decision(status={}, conditions=(), restarted=("t-worker-1",)), seen)
    assert (act.removed, set(act.deleted), kube.requeued) == (set(), {"u1"}, [])  # graceful: the watch will say
    await act.replace_failed(OWNER, Decision(status={}, conditions=(), restarted=("t-worker-0",)), seen)
    assert (act.removed, set(act.deleted), kube.requeued) == ({"u0"}, {"u0", "u1"}, [("ns", "t")])
    act.forget_gone({("ns", "t-worker-1"): "u1"}.get)  # the watch delivered u0's deletion
    assert (act.removed, act.deleted) == (set(), {"u1": ("ns", "t-worker-1")})


@pytest.mark.parametrize(
    ("held", "kept"),
    [
        ({("ns", "t-worker-0"): "u0", ("ns", "t-worker-1"): "u1"}, {"u0", "u1"}),  # both still there
        ({("ns", "t-worker-1"): "u1"}, {"u1"}),  # u0 gone from the cache
        ({("ns", "t-worker-0"): "u9", ("ns", "t-worker-1"): "u1"}, {"u1"}),  # u0 replaced under its name
        ({("other", "t-worker-0"): "u0"}, set()),  # another namespace's pod of that name is not it
        ({}, set()),
    ],
)
async def test_a_deletion_is_forgotten_once_the_cache_holds_no_pod_of_its_uid_under_its_name(
    held: dict[tuple[str, str], str], kept: set[str]
) -> None:
    act, _, _ = actions()
    act.deleted = {"u0": ("ns", "t-worker-0"), "u1": ("ns", "t-worker-1")}
    act.removed = {"u0", "u1"}
    act.forget_gone(held.get)
    assert (set(act.deleted), act.removed) == (kept, kept)


async def test_a_reconcile_reads_its_own_expectations_and_lapsed_ones_of_others_go() -> None:
    """Expectations are kept per Trainer (a reconcile does not scan every Trainer's); those of a
    Trainer never reconciled again (deleted) go once they lapse, at another's reconcile."""
    act, _, clock = actions()
    other = Owner("u", "ns", "uid-u", 1)
    others = tuple(pod_manifest(other, SPEC, Replica("worker", i), {}, PodSettings()) for i in range(2))
    await act.carry_out(BODY, OWNER, Decision(status={}, conditions=(), create_pods=PODS), ())
    await act.carry_out(BODY, other, Decision(status={}, conditions=(), create_pods=others), ())
    assert [p["metadata"]["name"] for p in act.expected_pods(other, set())] == ["u-worker-0", "u-worker-1"]
    assert set(act.expected) == {("ns", "t"), ("ns", "u")}
    clock.advance(31)
    assert act.expected_pods(OWNER, set()) == []
    assert act.expected == {}  # the other Trainer's lapsed ones went too


async def test_a_pod_found_existing_or_deleted_is_not_expected() -> None:
    """A name already taken (a predecessor still terminating, someone else's pod) is not a pod this
    Trainer has: not expected, and the status must not say every pod was created."""
    act, _, _ = actions(existing=("t-worker-1",))
    carried = await act.carry_out(BODY, OWNER, Decision(status={}, conditions=(), create_pods=PODS), ())
    assert (carried.refused, carried.pods_created) == (False, False)
    assert [p["metadata"]["name"] for p in act.expected_pods(OWNER, set())] == ["t-worker-0"]
    await act.carry_out(BODY, OWNER, Decision(status={}, conditions=(), delete_pods=("t-worker-0",)), ())
    assert act.expected_pods(OWNER, set()) == []


async def test_pods_created_before_a_server_error_are_expected_while_the_reconcile_is_retried() -> None:
    act, kube, _ = actions(failing=("t-worker-1",))
    with pytest.raises(ApiError):
        await act.carry_out(BODY, OWNER, Decision(status={}, conditions=(), create_pods=PODS), ())
    assert kube.created == ["t-worker-0"]
    assert [p["metadata"]["name"] for p in act.expected_pods(OWNER, set())] == ["t-worker-0"]


async def test_the_runner_is_applied_once_for_the_trainers_of_a_namespace_starting_together() -> None:
    act, kube, clock = actions()
    decision = Decision(status={}, conditions=(), runner=tuple(runner_manifests("ns")))
    owners = [Owner(f"t{i}", "ns", f"u{i}", 1) for i in range(5)]
    await asyncio.gather(*(act.carry_out(BODY, o, decision, ()) for o in owners))
    assert kube.applied == ["ServiceAccount/ns", "Role/ns", "RoleBinding/ns"]

    await act.carry_out(BODY, owners[0], decision, ())
    assert len(kube.applied) == 3  # within the resync period: not again
    clock.advance(300)
    await act.carry_out(BODY, owners[0], decision, ())
    assert len(kube.applied) == 3  # checked after it, and as they should be: nothing written

    del kube.stored[("RoleBinding", "ns", RUNNER_SERVICE_ACCOUNT)]  # deleted by hand
    kube.stored[("Role", "ns", RUNNER_SERVICE_ACCOUNT)]["rules"] = []  # edited by hand
    clock.advance(300)
    await act.carry_out(BODY, owners[0], decision, ())
    assert kube.applied[3:] == ["Role/ns", "RoleBinding/ns"]


@pytest.mark.parametrize(
    ("owners", "refused"),
    [
        ([{"uid": "uid"}], False),  # this Trainer's own, not delivered by the watch yet
        ([], True),  # a user's Service of that name
        ([{"uid": "an-earlier-trainer-of-that-name"}], True),
    ],
)
async def test_a_service_of_the_trainers_name_that_is_not_its_own_is_reported(
    owners: list[dict[str, str]], refused: bool
) -> None:
    act, kube, _ = actions(existing=("t",))
    kube.others["Service/t"] = {"metadata": {"name": "t", "ownerReferences": owners}}
    service = service_manifest(OWNER, SPEC)
    carried = await act.carry_out(BODY, OWNER, Decision(status={}, conditions=(), create_services=(service,)), ())
    assert carried.refused is refused
    warnings = [e for e in kube.events if e[0] == "Warning"]
    assert [reason for _, reason, _ in warnings] == (["CreateRefused"] if refused else [])


async def test_the_drain_guard_is_created_resized_and_a_users_of_its_name_reported() -> None:
    act, kube, _ = actions(existing=("t",))
    kube.others["PodDisruptionBudget/t"] = {"metadata": {"name": "t"}}  # a user's
    create = Decision(status={}, conditions=(), guard=GuardChange(manifest=guard_manifest(OWNER, 2)))
    assert (await act.carry_out(BODY, OWNER, create, ())).refused
    (warning,) = [e for e in kube.events if e[0] == "Warning"]
    assert warning[2].startswith("PodDisruptionBudget t exists and does not belong to this Trainer, whose drain guard")
    lowered = Decision(status={}, conditions=(), guard=GuardChange(resize=0, lowered_at="2026-01-01T00:00:00Z"))
    raised = Decision(status={}, conditions=(), guard=GuardChange(resize=3))
    for decision in (lowered, raised):
        assert not (await act.carry_out(BODY, OWNER, decision, ())).refused
    at = "trainer.operator.kubeflow.org/guard-lowered-at"
    assert kube.patched == [
        (
            "PodDisruptionBudget/t",
            {"metadata": {"annotations": {at: "2026-01-01T00:00:00Z"}}, "spec": {"minAvailable": 0}},
        ),
        ("PodDisruptionBudget/t", {"metadata": {"annotations": {at: None}}, "spec": {"minAvailable": 3}}),
    ]


async def test_a_namespace_being_deleted_is_left_alone_until_a_create_there_is_tried_again() -> None:
    act, kube, clock = actions()
    going = ApiError(status=Status(code=403, message='pods "t-worker-0" is forbidden: ns is being terminated'))
    calls: list[str] = []

    async def refused(body: dict[str, Any]) -> bool:
        calls.append(body["metadata"]["name"])
        raise going

    kube.create_core = refused  # type: ignore[method-assign]
    pods = Decision(status={}, conditions=(), create_pods=PODS)
    carried = await act.carry_out(BODY, OWNER, pods, ())
    assert (carried.refused, carried.pods_created, act.namespace_going("ns")) == (False, False, True)
    assert kube.events == []  # not a refusal to report: the Trainer goes with its namespace
    tried = len(calls)
    await act.carry_out(BODY, OWNER, pods, ())
    assert len(calls) == tried  # no request while it goes
    assert not act.namespace_going("other")
    clock.advance(31)
    assert not act.namespace_going("ns")  # one create is tried again (a namespace of that name may be new)


async def test_a_replaced_failed_pod_is_deleted_only_after_the_status_counting_it_is_written() -> None:
    act, kube, _ = actions()
    restart = Decision(
        status={},
        conditions=(),
        delete_pods=("t-worker-0", "t-worker-1"),  # worker-1 is surplus (a scale-down), worker-0 failed
        restarted=("t-worker-0",),
    )
    await act.carry_out(BODY, OWNER, restart, ())
    assert kube.deleted == ["t-worker-1"]  # the failed one waits for the status write
    await act.replace_failed(OWNER, restart, ())
    assert kube.deleted == ["t-worker-1", "t-worker-0"]


def with_grants(act: Actions) -> Actions:
    act.grants = lambda namespace: secret_grants(
        namespace, ("profile", "checkpoint", "quota"), "trainer-operator-system"
    )
    return act


async def test_the_secret_grants_come_with_the_first_trainer_of_a_namespace_before_any_pod() -> None:
    act, kube, clock = actions()
    with_grants(act)
    owners = [Owner(f"t{i}", "ns", f"u{i}", 1) for i in range(3)]
    waiting = Decision(status={}, conditions=())  # the gates have not answered: no pods, no runner
    await asyncio.gather(*(act.carry_out(BODY, o, waiting, ()) for o in owners))
    assert kube.applied == ["RoleBinding/ns", "RoleBinding/ns"]
    starting = Decision(status={}, conditions=(), runner=tuple(runner_manifests("ns")))
    await act.carry_out(BODY, owners[0], starting, ())
    assert kube.applied[2:] == ["ServiceAccount/ns", "Role/ns", "RoleBinding/ns"]  # the runner, once
    kube.stored.clear()  # the namespace's RoleBindings deleted by hand
    clock.advance(300)
    await act.carry_out(BODY, owners[0], waiting, ())
    assert kube.applied[5:] == ["RoleBinding/ns", "RoleBinding/ns"]  # again after the resync period


@pytest.mark.parametrize(("code", "held_back"), [(403, False), (422, False), (429, True), (500, True)])
async def test_a_refused_grant_does_not_hold_the_trainer_back_but_a_failing_server_does(
    code: int, held_back: bool
) -> None:
    """Refused (RBAC, the admission policy, invalid): logged, the pods made all the same. The API
    server busy or failing: the reconcile fails and is retried with backoff, the grant with it."""
    act, kube, _ = actions()
    act.grants = lambda namespace: [{"kind": "RoleBinding", "metadata": {"name": "forbidden", "namespace": namespace}}]

    async def refuse(body: dict[str, Any]) -> None:
        raise ApiError(status=Status(code=code, message="no", reason="Refused"))

    kube.apply_core = refuse  # type: ignore[method-assign]
    decision = Decision(status={}, conditions=(), create_pods=PODS)
    if held_back:
        with pytest.raises(ApiError):
            await act.carry_out(BODY, OWNER, decision, ())
        assert kube.created == []
    else:
        await act.carry_out(BODY, OWNER, decision, ())
        assert kube.created == ["t-worker-0", "t-worker-1"]

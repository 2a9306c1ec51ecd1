"""What the caches hold of each object: only what the decisions read. A projection must give every
view the same answer as the whole object (a table of pods as the API server returns them)."""

import copy
from typing import Any

import pytest

from trainerop_audit.decide import manager_of
from trainerop_common.cache import Derived, ObjectCache
from trainerop_common.objects import Keep, holds, labels_only, managers_only, slim
from trainerop_common.pod_security import ENFORCE_LABEL, namespace_level
from trainerop_quota.views import pod_essentials as quota_keeps
from trainerop_quota.views import pod_info
from trainerop_trainer.views import owner_of, pod_view
from trainerop_trainer.views import pod_essentials as trainer_keeps

MANAGED = [{"manager": "kubelet", "operation": "Update", "fieldsV1": {"f:status": {"f:phase": {}}}}]


def pod(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "t-worker-1",
            "namespace": "ns",
            "uid": "u1",
            "labels": {
                "trainer-name": "t",
                "trainer.operator.kubeflow.org/replica-type": "worker",
                "trainer.operator.kubeflow.org/replica-index": "1",
                "trainer.operator.kubeflow.org/trainer-uid": "tu",
                "team": "vision",
            },
            "annotations": {
                "trainer.operator.kubeflow.org/admission": "a1",
                "trainer.operator.kubeflow.org/node": "n1",
                "kubectl.kubernetes.io/last-applied-configuration": "{" + "x" * 2000 + "}",
            },
            "ownerReferences": [{"kind": "Trainer", "name": "t", "uid": "tu", "controller": True}],
            "managedFields": MANAGED,
        },
        "spec": {
            "nodeName": "n1",
            "containers": [
                {
                    "name": "trainer",
                    "env": [{"name": f"V{i}", "value": "x" * 50} for i in range(30)],
                    "resources": {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"nvidia.com/gpu": "8"}},
                },
                {"name": "sidecar", "resources": {"limits": {"cpu": "500m"}}},
            ],
            "initContainers": [{"name": "wait", "resources": {"requests": {"cpu": "4"}}}],
            "overhead": {"memory": "100Mi"},
        },
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": "2026-01-01T00:00:00Z"}
                for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
            ],
            "containerStatuses": [
                {
                    "name": "trainer",
                    "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
                    "image": "registry.example/trainer@sha256:" + "0" * 64,
                    "imageID": "sha256:" + "1" * 64,
                },
            ],
            "hostIP": "10.0.0.7",
            "podIPs": [{"ip": "10.244.0.7"}],
            "qosClass": "Burstable",
        },
    }
    for path, value in changes.items():
        *parents, leaf = path.split("__")
        node = body
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return body


PODS = {
    "running": pod(),
    "succeeded": pod(status__phase="Succeeded"),
    "failed with an exit code": pod(
        status__phase="Failed",
        status__containerStatuses=[
            {"name": "trainer", "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}
        ],
    ),
    "deleting": pod(metadata__deletionTimestamp="2026-01-01T00:01:00Z"),
    "running, not ready": pod(
        status__conditions=[{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "False"}]
    ),
    "pending, unscheduled": pod(spec__nodeName=None, status__phase="Pending"),
    "no node fits": pod(
        spec__nodeName=None,
        status__phase="Pending",
        status__conditions=[
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ],
    ),
    "image not pulled": pod(
        status__phase="Pending",
        status__containerStatuses=[
            {"name": "trainer", "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling"}}}
        ],
    ),
    "another team's pod": pod(metadata__labels={"app": "web"}, metadata__annotations=None, spec__initContainers=None),
    "no status yet": pod(status=None),
}


@pytest.mark.parametrize("body", PODS.values(), ids=PODS.keys())
def test_the_quota_plan_sees_the_same_pod(body: dict[str, Any]) -> None:
    kept = quota_keeps(copy.deepcopy(body))
    assert pod_info(kept) == pod_info(body)
    assert len(repr(kept)) < len(repr(body)) / 4  # env, managedFields, annotations and status gone


@pytest.mark.parametrize("body", PODS.values(), ids=PODS.keys())
def test_the_trainer_sees_the_same_pod(body: dict[str, Any]) -> None:
    kept = trainer_keeps(copy.deepcopy(body))
    assert pod_view(kept, "trainer") == pod_view(body, "trainer")
    assert owner_of(kept) == owner_of(body)
    assert [r["uid"] for r in kept["metadata"]["ownerReferences"]] == [  # which Trainer's it is
        r["uid"] for r in body["metadata"]["ownerReferences"]
    ]
    assert "managedFields" not in kept["metadata"]
    assert "containers" not in kept["spec"]
    assert "kubectl.kubernetes.io/last-applied-configuration" not in (kept["metadata"].get("annotations") or {})
    assert "hostIP" not in (kept["status"] or {})
    kept_conditions = [c["type"] for c in (kept["status"] or {}).get("conditions", [])]
    assert kept_conditions in ([], ["Ready"], ["PodScheduled"])  # all it reads (PodScheduled: when unschedulable)
    assert len(repr(kept)) < len(repr(body)) / 4


def test_slim_drops_the_field_managers_record_and_leaves_the_object_alone() -> None:
    body = pod()
    slimmed = slim(body)
    assert "managedFields" not in slimmed["metadata"]
    assert body["metadata"]["managedFields"] == MANAGED  # the watch's own object is not changed
    assert {k: v for k, v in body["metadata"].items() if k != "managedFields"} == slimmed["metadata"]
    assert slim({"metadata": {"name": "x"}}) == {"metadata": {"name": "x"}}


def test_a_trainer_is_held_with_its_managers_named_but_not_their_fields() -> None:
    managed: list[dict[str, Any]] = [
        {"manager": "kubectl-client-side-apply", "operation": "Update", "time": "t", "fieldsV1": {"f:spec": {}}},
        {"manager": "trainer-operator/trainer", "operation": "Apply", "subresource": "status", "fieldsV1": {}},
    ]
    body: dict[str, Any] = {"metadata": {"name": "t", "managedFields": managed}, "spec": {"epochs": 1}}
    held = managers_only(body)
    assert manager_of(held["metadata"]["managedFields"]) == manager_of(managed) == "kubectl-client-side-apply"
    assert all("fieldsV1" not in e for e in held["metadata"]["managedFields"])
    assert body["metadata"]["managedFields"] == managed  # the watch's own object is not changed
    assert held["spec"] is body["spec"]
    assert managers_only({"metadata": {"name": "x"}}) == {"metadata": {"name": "x"}}


async def test_a_cache_holds_what_its_controller_keeps() -> None:
    async def lister(keep: Keep) -> list[dict[str, Any]]:  # projects each object as it is listed
        return [keep(pod())]

    held = ObjectCache(lister, "", "v1", "pods", keep=trainer_keeps, index=owner_of)
    (cached,) = await held.grouped(("ns", "t"))
    assert cached == trainer_keeps(pod())
    by_default = ObjectCache(lister, "", "v1", "pods")
    assert await by_default.values() == [slim(pod())]


async def test_a_smaller_form_is_held_in_place_of_a_held_object_only() -> None:
    async def lister(keep: Keep) -> list[dict[str, Any]]:
        return [keep(pod())]

    cache = ObjectCache(lister, "", "v1", "pods", keep=trainer_keeps, index=owner_of)
    (cached,) = await cache.values()
    smaller = {"metadata": cached["metadata"]}  # what a controller makes of it (the same owner)
    cache.hold(ObjectCache.key(cached), smaller)
    cache.hold(("ns", "not-held"), smaller)  # nothing held there: nothing held now either
    assert await cache.values() == [smaller]
    assert await cache.grouped(("ns", "t")) == [smaller]


def test_derived_values_are_computed_again_only_for_objects_that_changed() -> None:
    calls: list[str] = []

    def name_of(obj: dict[str, Any]) -> str:
        calls.append(obj["metadata"]["name"])
        return str(obj["metadata"]["name"])

    derived = Derived(name_of)
    a, b = {"metadata": {"name": "a"}}, {"metadata": {"name": "b"}}
    assert derived.over([a, b]) == ["a", "b"]
    assert derived.over([a, b]) == ["a", "b"]
    assert calls == ["a", "b"]  # the same objects: nothing parsed again
    b_changed = {"metadata": {"name": "b2"}}  # a cache puts a new dict for a change
    assert derived.over([a, b_changed]) == ["a", "b2"]
    assert calls == ["a", "b", "b2"]
    derived.over([b_changed])  # a left this round: it is forgotten
    assert derived.over([a]) == ["a"]
    assert calls == ["a", "b", "b2", "a"]


BINDING: dict[str, Any] = {
    "kind": "RoleBinding",
    "metadata": {"name": "b", "namespace": "ns", "labels": {"app": "x"}},
    "roleRef": {"kind": "Role", "name": "r"},
    "subjects": [{"kind": "ServiceAccount", "name": "sa", "namespace": "ns"}],
}
SERVED: dict[str, Any] = {  # as the API server returns it: metadata and defaults added
    **BINDING,
    "metadata": {**BINDING["metadata"], "uid": "u", "resourceVersion": "7", "labels": {"app": "x", "more": "y"}},
    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"},
}


@pytest.mark.parametrize(
    ("live", "held"),
    [
        (SERVED, True),
        (BINDING, True),
        ({**SERVED, "roleRef": {"kind": "Role", "name": "other"}}, False),  # edited
        ({**SERVED, "subjects": []}, False),  # a subject removed
        ({**SERVED, "subjects": [*BINDING["subjects"], {"kind": "User", "name": "eve"}]}, False),  # one added
        ({**SERVED, "metadata": {"name": "b", "namespace": "ns"}}, False),  # its labels gone
        ({k: v for k, v in SERVED.items() if k != "subjects"}, False),
        ({**SERVED, "subjects": "sa"}, False),  # not even a list
    ],
)
def test_an_object_holds_what_an_apply_would_say_whatever_the_server_added(live: object, held: bool) -> None:
    assert holds(live, BINDING) is held


def test_a_namespace_is_held_by_its_identity_and_labels_and_gives_the_same_level() -> None:
    labels = {ENFORCE_LABEL: "baseline", "kubernetes.io/metadata.name": "team"}
    namespace: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": "team",
            "uid": "n1",
            "resourceVersion": "9",
            "labels": labels,
            "annotations": {"note": "x" * 2000},
            "managedFields": MANAGED,
        },
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    }
    held = labels_only(namespace)
    assert held == {"metadata": {"name": "team", "uid": "n1", "labels": labels}}
    assert namespace_level(held) == namespace_level(namespace) == "baseline"
    assert ObjectCache.key(held) == ObjectCache.key(namespace)

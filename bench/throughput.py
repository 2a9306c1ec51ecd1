"""Throughput: N Trainers of W workers created at once, until every pod exists and runs and every
Trainer is Running; the API writes of their whole lifecycle and of a no-op resync; then the
ceiling — a plain client creating the same pods and Services with no operator."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from lightkube import Client
from lightkube.resources.core_v1 import Pod, Service

from bench.measure import (
    Obj,
    Requests,
    Timeline,
    api_requests,
    conflicts,
    cpu_seconds,
    cpu_used,
    create_all,
    in_parallel,
    resident_mib,
    writes,
)
from bench.trainer_pods import exit_with
from tests.harness import Cluster, eventually
from trainerop_common.config import ControllerConfig
from trainerop_common.kube import RESOURCES
from trainerop_common.names import MANAGED_BY

TRAINER = RESOURCES["Trainer"]
# A no-op resync round comes within the controllers' resync period (their default at most).
RESYNC_SECONDS = ControllerConfig(controller="bench").resync_seconds
CONTROLLERS_WRITING_STATUS = ("trainer", "profile", "quota", "checkpoint", "audit", "verify")


def running(obj: Obj) -> bool:
    return bool(obj.get("status", {}).get("phase") == "Running")


def bench_trainer(name: str, workers: int, namespace: str | None = None) -> Obj:
    return {
        "apiVersion": "trainer.operator.kubeflow.org/v1alpha1",
        "kind": "Trainer",
        "metadata": {"name": name} | ({"namespace": namespace} if namespace else {}),
        "spec": {
            "epochs": 1,
            "image": "bench:latest",
            "topology": {"workers": workers},
            "runPolicy": {"restartPolicy": "OnFailure", "backoffLimit": 1000},
        },
    }


def status_writes_by_controller(c: Cluster, outcome: str) -> dict[str, float]:
    """Each controller's status writes (or skipped ones) so far; a busy controller may take a
    while to answer its /metrics."""
    labels = {"kind": "Trainer", "outcome": outcome}
    return {
        ctl: c.metric(ctl, "operator_status_writes_total", labels | {"controller": ctl}, timeout=60)
        for ctl in CONTROLLERS_WRITING_STATUS
    }


def status_writes(c: Cluster, outcome: str) -> float:
    return sum(status_writes_by_controller(c, outcome).values())


def settled(c: Cluster, since: Requests, quiet_seconds: float = 3, limit: float = 120) -> Requests:
    """The API server's counters once nothing writes for the operator for ``quiet_seconds``."""
    deadline = time.monotonic() + limit
    last = since
    while time.monotonic() < deadline:
        time.sleep(quiet_seconds)  # a measurement window, not a wait for correctness
        now = api_requests(c)
        if not writes(last, now):
            return now
        last = now
    return last


def memory_after_restart(c: Cluster, count: int) -> dict[str, float]:
    """Each controller's memory once it has, since its (re)start, relisted the cluster and looked at
    each of the ``count`` Trainers at least once (written or found nothing to write)."""

    def caught_up() -> bool:
        written, skipped = status_writes_by_controller(c, "written"), status_writes_by_controller(c, "skipped")
        return all(written[ctl] + skipped[ctl] >= count for ctl in CONTROLLERS_WRITING_STATUS)

    eventually(caught_up, timeout=600, what="every controller to reconcile every Trainer after its restart")
    return resident_mib(c)


def operator_run(
    c: Cluster,
    client: Client,
    namespace: str,
    count: int,
    workers: int,
    during: Callable[[], None] = lambda: None,
    ramp_over: Callable[[], None] = lambda: None,
    details: bool = True,
) -> dict[str, Any]:
    """Trainers through the operator: creation to Running, memory there, then, with ``details``, a
    no-op resync and completion (a repetition of the headline times leaves them out).
    ``during`` is called once the creates are sent, ``ramp_over`` once every Trainer is Running."""
    pods = Timeline(client, Pod, namespace, running)
    trainers = Timeline(client, TRAINER, namespace, running)
    before = api_requests(c)
    written_before = status_writes_by_controller(c, "written")
    cpu_before = cpu_seconds(c)
    t0 = create_all(client, [TRAINER.from_dict(bench_trainer(f"t{i:04d}", workers, namespace)) for i in range(count)])
    creates_done = time.monotonic()  # every create answered (through the admission webhooks)
    during()
    created = pods.wait(count * workers, "operator: pods created", ready=False)
    pods_running = pods.wait(count * workers, "operator: pods running")
    all_running = trainers.wait(count, "operator: Trainers Running")
    ramp_over()
    result: dict[str, Any] = {
        "trainers": count,
        "workers": workers,
        "all_trainers_created_seconds": round(creates_done - t0, 2),
        "all_pods_created_seconds": round(created - t0, 2),
        "all_pods_running_seconds": round(pods_running - t0, 2),
        "all_trainers_running_seconds": round(all_running - t0, 2),
        "memory_mib": resident_mib(c),
        "cpu_seconds_to_running": cpu_used(cpu_before, cpu_seconds(c)),
    }
    time.sleep(2)  # trailing status writes of the last Trainers land before the snapshot (a measurement aid)
    at_running = api_requests(c)
    to_running = writes(before, at_running)
    to_running["trainers POST"] -= count  # the user's own creates
    result["writes_to_running_per_trainer"] = round(sum(to_running.values()) / count, 1)
    written = status_writes_by_controller(c, "written")
    result["status_writes_to_running_per_trainer"] = {
        ctl: round((written[ctl] - written_before[ctl]) / count, 2) for ctl in CONTROLLERS_WRITING_STATUS
    }
    if details:
        result.update(resync_and_completion(c, client, namespace, count, workers, before, at_running))
    for t in (pods, trainers):
        t.stop()
    return result


def resync_and_completion(
    c: Cluster, client: Client, namespace: str, count: int, workers: int, before: Requests, at_running: Requests
) -> dict[str, Any]:
    """Writes of a no-op resync; then every worker exits 0 until every Trainer has Succeeded: the
    time, and the writes of a whole lifecycle (from ``before``, the requests before the creates)."""
    result: dict[str, Any] = {}
    # A no-op resync: every controller reconciles every Trainer (at its resync period) and has
    # nothing to write; measured over one full round of all the controllers, once the writes that
    # follow Running (audit records, Events, the audit summaries it holds for a while) have landed.
    eventually(
        lambda: c.metric("audit", "audit_summaries_held", {}) == 0,
        timeout=120,
        what="the audit controller's held summaries to be written",
    )
    at_running = settled(c, at_running)
    skipped = status_writes(c, "skipped")
    eventually(
        lambda: status_writes(c, "skipped") >= skipped + len(CONTROLLERS_WRITING_STATUS) * count,
        timeout=RESYNC_SECONDS + 180,
        what="a resync of every Trainer by every controller",
    )
    after_resync = api_requests(c)
    noop = writes(at_running, after_resync)
    result["writes_per_noop_resync_per_trainer"] = round(sum(noop.values()) / count, 3)
    result["noop_resync_writes"] = dict(sorted(noop.items()))

    # Completion: every worker exits 0; the Trainers succeed.
    done = Timeline(client, TRAINER, namespace, lambda o: o.get("status", {}).get("phase") == "Succeeded")
    names = [f"t{i:04d}-worker-{w}" for i in range(count) for w in range(workers)]
    t1 = time.monotonic()
    in_parallel(lambda name: exit_with(client, namespace, name, 0), names)
    result["all_trainers_succeeded_seconds"] = round(done.wait(count, "operator: Trainers Succeeded") - t1, 2)
    time.sleep(2)
    end = api_requests(c)
    lifecycle = writes(before, end)
    lifecycle["trainers POST"] -= count
    result["writes_per_trainer_lifecycle"] = round(sum(lifecycle.values()) / count, 1)
    result["writes_by_resource"] = {k: round(v / count, 2) for k, v in sorted(lifecycle.items()) if v}
    result["conflicts_409"] = conflicts(before, end)
    done.stop()
    return result


def plain_copy(obj: Obj, namespace: str) -> Obj:
    """An object the operator created, as a plain client would create it: no owner, no status, no
    server-set fields; pods run as the namespace's default ServiceAccount (the operator's runner
    ServiceAccounts, Roles, RoleBindings and Leases are not made: the ceiling is pods and Services),
    without the operator's managed-by label (a plain client's objects are not the operator's: the
    admission policy holding those to existing Trainers selects them by it, and costs the operator's
    creations what it costs)."""
    meta = obj["metadata"]
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k not in MANAGED_BY}
    out: Obj = {
        "apiVersion": "v1",
        "kind": obj["kind"],
        "metadata": {"name": meta["name"], "namespace": namespace, "labels": labels},
        "spec": json.loads(json.dumps(obj["spec"])),
    }
    spec = out["spec"]
    if obj["kind"] == "Pod":
        for key in ("nodeName", "serviceAccount", "serviceAccountName"):
            spec.pop(key, None)
        spec["automountServiceAccountToken"] = False
        token = {v["name"] for v in spec.get("volumes") or () if v["name"].startswith("kube-api-access-")}
        spec["volumes"] = [v for v in spec.get("volumes") or () if v["name"] not in token]
        for container in [*spec.get("initContainers", ()), *spec["containers"]]:
            container["volumeMounts"] = [m for m in container.get("volumeMounts") or () if m["name"] not in token]
    else:
        for key in ("clusterIPs", "ipFamilies", "ipFamilyPolicy", "internalTrafficPolicy"):
            spec.pop(key, None)
        if spec.get("clusterIP") != "None":
            spec.pop("clusterIP", None)
    return out


def made_by_operator(client: Client, source: str) -> tuple[list[Obj], list[Obj]]:
    """The Services and pods the operator made in ``source`` (what the ceiling copies), read before
    that namespace goes."""
    services = [s.to_dict() for s in client.list(Service, namespace=source)]
    return services, [p.to_dict() for p in client.list(Pod, namespace=source)]


def ceiling_run(
    c: Cluster, client: Client, made: tuple[list[Obj], list[Obj]], namespace: str, at_once: int
) -> dict[str, Any]:
    """The operator's pods and Services (``made``), created by a plain client (``at_once``
    requests in flight, unthrottled) with no operator."""
    services = [plain_copy(s, namespace) for s in made[0]]
    pods = [plain_copy(p, namespace) for p in made[1]]
    objects = [Service.from_dict(s) for s in services] + [Pod.from_dict(p) for p in pods]
    timeline = Timeline(client, Pod, namespace, running)
    cpu_before = cpu_seconds(c)
    t0 = create_all(client, objects, at_once)
    created = timeline.wait(len(pods), "ceiling: pods created", ready=False)
    all_running = timeline.wait(len(pods), "ceiling: pods running")
    cpu = cpu_used(cpu_before, cpu_seconds(c))
    timeline.stop()
    return {
        "pods": len(pods),
        "services": len(services),
        "concurrency": at_once,
        "all_pods_created_seconds": round(created - t0, 2),
        "all_pods_running_seconds": round(all_running - t0, 2),
        "cpu_seconds_to_running": cpu,
    }

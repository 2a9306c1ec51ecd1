"""Recovery: a failed worker's replacement (many failures, percentiles), a gang restart of a large
Trainer, and a spot node's loss until the quota controller's renegotiated admission."""

from __future__ import annotations

import functools
import json
import threading
import time
from typing import Any

import yaml
from lightkube import Client
from lightkube.resources.core_v1 import Pod

from bench.measure import Timeline, Watched, spread
from bench.throughput import TRAINER, bench_trainer, running
from bench.trainer_pods import fail
from testbed import cluster as cluster_tool
from tests.harness import REPO, Cluster, eventually

GPU = "nvidia.com/gpu"
# A replacement's stages, seen from outside: the failure's status write answered (the API server's
# latency), the failure counted in the Trainer's status (the trainer saw it, reconciled, wrote), the
# failed pod's deletion seen (its delete, sent after that write), the replacement seen (its create).
STAGES = ("failure_written", "failure_counted", "deletion_seen", "replacement_seen")
# Each of the ramp probe's workers fails at most this often: five give a failure a second at most,
# a few hundred samples over three N = 1000 ramps, for a small share of the ramp's own writes.
PROBE_EVERY_SECONDS = 5.0
PROBE_WORKERS = 10  # workers of the Trainer whose failures the probes time


class Replacements:
    """Worker failures of a Trainer of its own (exit code 137 reported as a node would), one after
    another: the time until the replacement pod exists, and until it runs. Each failure is also
    split in stages seen from outside (STAGES)."""

    def __init__(self, client: Client, namespace: str, workers: int = PROBE_WORKERS) -> None:
        self.client, self.namespace, self.workers = client, namespace, workers
        client.create(TRAINER.from_dict(bench_trainer("recovery", workers)), namespace=namespace)
        self.counted = CountedFailures(client, namespace)
        self.pods = Timeline(client, Pod, namespace, running)
        self.pods.wait(workers, "recovery: workers running")
        self.created: list[float] = []
        self.started: list[float] = []
        self.stages: dict[str, list[float]] = {stage: [] for stage in STAGES}
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def fail_one(self, worker: int | None = None) -> None:
        victim = f"recovery-worker-{len(self.created) % self.workers if worker is None else worker}"
        old = self.pods.uids[victim]
        t0 = time.monotonic()
        fail(self.client, self.namespace, victim)
        failed = time.monotonic()
        created = self.pods.replaced(victim, old, ready=False)
        deleting = self.pods.deleting.get(old, created)  # (seen before the replacement: same watch)
        # Another watch: its delivery can trail the pods' by a little; a stage is never negative.
        counted = min(max(self.counted.at.get(old, deleting), failed), deleting)
        self.created.append(created - t0)
        self.started.append(self.pods.replaced(victim, old) - t0)
        ends = (failed - t0, counted - failed, deleting - counted, created - deleting)
        for stage, seconds in zip(STAGES, ends, strict=True):
            self.stages[stage].append(seconds)

    def meanwhile(self, parallel: int = 5, every_seconds: float = PROBE_EVERY_SECONDS) -> None:
        """Keep failing workers in the background until ``result``: replacements while something
        else loads the cluster (the N = 1000 ramp). ``parallel`` workers, each failed again once
        its replacement runs but at most every ``every_seconds`` (their starts spread over it), so
        the probe's own load is the same in every repetition whatever the replacements take (one
        worker gave a handful of samples per ramp; five failed back to back gave 15 failures in one
        N = 1000 ramp and about 465 in each of two others, the slow ones)."""

        def loop(worker: int) -> None:
            self._stop.wait(every_seconds * worker / parallel)
            while not self._stop.is_set():
                started = time.monotonic()
                self.fail_one(worker)
                self._stop.wait(max(0.0, every_seconds - (time.monotonic() - started)))

        self._threads = [threading.Thread(target=loop, args=(w,), daemon=True) for w in range(parallel)]
        for thread in self._threads:
            thread.start()

    def result(self) -> dict[str, Any]:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=600)
        self.pods.stop()
        self.counted.stop()
        return {  # (a ramp over before any replacement ran gives no samples)
            "failures": len(self.created),
            "replacement_created_seconds": spread(self.created) if self.created else None,
            "replacement_running_seconds": spread(self.started) if self.started else None,
            "stages_seconds": {stage: spread(values) for stage, values in self.stages.items() if values},
            "created_samples": [round(x, 3) for x in self.created],
            "running_samples": [round(x, 3) for x in self.started],
            "stage_samples": {stage: [round(x, 3) for x in values] for stage, values in self.stages.items()},
        }


class CountedFailures:
    """When each failed pod's UID was first seen among its Trainer's counted failures
    (``status.topology.replicas[*].countedFailures``): the trainer's status write that precedes
    the failed pod's deletion."""

    def __init__(self, client: Client, namespace: str) -> None:
        self.at: dict[str, float] = {}
        self._watched = Watched(client, TRAINER, namespace, lambda _, trainer: self._record(trainer))

    def _record(self, trainer: dict[str, Any]) -> None:
        now = time.monotonic()
        replicas = ((trainer.get("status") or {}).get("topology") or {}).get("replicas") or {}
        for replica in replicas.values():
            for uid in replica.get("countedFailures") or ():
                self.at.setdefault(uid, now)

    def stop(self) -> None:
        self._watched.stop()


def replacements(client: Client, namespace: str, failures: int, workers: int = PROBE_WORKERS) -> dict[str, Any]:
    """``failures`` worker failures one after another on an otherwise idle cluster."""
    probe = Replacements(client, namespace, workers)
    for _ in range(failures):
        probe.fail_one()
    return probe.result()


def gang_restarts(client: Client, namespace: str, size: int, restarts: int) -> dict[str, Any]:
    """A Trainer of ``size`` workers with restartScope Gang: one worker fails, every pod is replaced."""
    body = bench_trainer("gang", size)
    body["spec"]["runPolicy"]["restartScope"] = "Gang"
    client.create(TRAINER.from_dict(body), namespace=namespace)
    pods = Timeline(client, Pod, namespace, running)
    pods.wait(size, "gang: workers running")
    created, started = [], []
    for _ in range(restarts):
        old = dict(pods.uids)
        t0 = time.monotonic()
        fail(client, namespace, "gang-worker-0")
        created.append(max(pods.replaced(name, uid, ready=False) for name, uid in old.items()) - t0)
        started.append(max(pods.replaced(name, uid) for name, uid in old.items()) - t0)
    pods.stop()
    return {
        "pods": size,
        "restarts": restarts,
        "all_replaced_seconds": spread(created),
        "all_running_seconds": spread(started),
    }


def spot_losses(c: Cluster, client: Client, namespace: str, losses: int) -> dict[str, Any]:
    """A run filling every spot node (one worker of 8 GPUs per node) loses one of them (deleted, as a
    reclaimed spot VM's node is): no room is left on spot, so the quota controller renegotiates —
    the run moves to on-demand. Timed until status.quota.renegotiations counts the new decision,
    and until every pod runs again. Each loss starts from a fresh run on spot (the node restored)."""
    spot_nodes = len(c.names("nodes") & spot_node_names())
    policy = yaml.safe_load((REPO / "examples" / "quota" / "policy.yaml").read_text())
    policy["metadata"]["name"] = f"bench-{namespace}"
    policy["spec"]["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
    policy["spec"]["budgets"] = {"spot": {GPU: 8 * spot_nodes}, "onDemand": {GPU: 8 * spot_nodes}}
    c.apply(policy)
    decided, recovered, outcomes = [], [], []
    try:
        for k in range(losses):
            name = f"spot-{k}"
            body = bench_trainer(name, spot_nodes)
            body["spec"]["resources"] = {"requests": {"cpu": 4}, "limits": {GPU: 8}}
            client.create(TRAINER.from_dict(body), namespace=namespace)
            pods = Timeline(client, Pod, namespace, running)
            fills_spot = functools.partial(lambda n: len(on_spot(c, namespace, n)) == spot_nodes, name)
            eventually(fills_spot, timeout=300, what=f"{name} on every spot node")
            before = get_quota(client, namespace, name).get("renegotiations", 0)
            old = {p["metadata"]["name"]: p["metadata"]["uid"] for p in on_spot(c, namespace, name)}
            node = on_spot(c, namespace, name)[0]["spec"]["nodeName"]
            t0 = time.monotonic()
            c.kubectl("delete", "node", node, "--wait=false")
            while (quota := get_quota(client, namespace, name)).get("renegotiations", 0) <= before:
                if time.monotonic() - t0 > 120:
                    raise SystemExit("the quota controller did not renegotiate within 120 s of the node's loss")
                time.sleep(0.02)
            decided.append(time.monotonic() - t0)
            outcomes.append(str(quota.get("capacityType") or "waiting"))
            recovered.append(max(pods.replaced(n, uid, timeout=300) for n, uid in old.items()) - t0)
            pods.stop()
            client.delete(TRAINER, name, namespace=namespace)
            restore(c, node)
            # The next loss starts from a fresh run: this one's pods (on-demand now) hold the room it
            # needs until the garbage collector has removed them.
            left = functools.partial(lambda n: not pods_of(c, namespace, n), name)
            eventually(left, timeout=300, what=f"the pods of {name} to go")
    finally:
        c.kubectl("delete", "quotapolicy", policy["metadata"]["name"], "--ignore-not-found")
    return {
        "losses": losses,
        "workers": spot_nodes,
        "renegotiated_seconds": spread(decided),
        "all_pods_running_again_seconds": spread(recovered),
        "moved_to": outcomes,
    }


def spot_node_names() -> set[str]:
    label = f"{cluster_tool.LABEL_PREFIX}/capacity-type"
    nodes = cluster_tool.fake_nodes(cluster_tool.FAKE_NODES)
    return {n["metadata"]["name"] for n in nodes if n["metadata"]["labels"].get(label) == "spot"}


def pods_of(c: Cluster, namespace: str, trainer: str) -> list[dict[str, Any]]:
    selector = f"trainer-name={trainer}"
    items: list[dict[str, Any]] = json.loads(c.kubectl("get", "pods", "-n", namespace, "-l", selector, "-o", "json"))[
        "items"
    ]
    return items


def on_spot(c: Cluster, namespace: str, trainer: str) -> list[dict[str, Any]]:
    """The Trainer's running pods on spot nodes."""
    pods = pods_of(c, namespace, trainer)
    return [
        p
        for p in pods
        if p["metadata"].get("labels", {}).get("trainer.operator.kubeflow.org/capacity-type") == "spot"
        and p["spec"].get("nodeName")
        and not p["metadata"].get("deletionTimestamp")
        and p.get("status", {}).get("phase") == "Running"
    ]


def get_quota(client: Client, namespace: str, name: str) -> dict[str, Any]:
    status = client.get(TRAINER, name, namespace=namespace).to_dict().get("status") or {}
    return dict(status.get("quota") or {})


def restore(c: Cluster, node: str) -> None:
    (spec,) = [n for n in cluster_tool.fake_nodes(cluster_tool.FAKE_NODES) if n["metadata"]["name"] == node]
    eventually(lambda: node not in c.names("nodes"), what=f"node {node} to be gone")
    c.apply(spec)

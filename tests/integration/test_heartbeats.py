"""Progress heartbeats with the pod's own identity: they land in status.progress, a pod cannot
beat for another Trainer, and silence is detected as a stall (issue 3); percent done, the
estimated completion and metrics, and what the run waits for, as `kubectl get` shows them (issue 21)."""

import json
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml

from testbed import localdev
from tests.factories import trainer_manifest
from tests.harness import Cluster, condition, eventually, table
from trainerop_common.contracts import RUNNER_SERVICE_ACCOUNT
from trainerop_sdk.heartbeat import Heartbeat, HeartbeatError, ReplicaIdentity


def trainer(name: str, workers: int = 2, **run_policy: Any) -> dict[str, Any]:
    return trainer_manifest(name, epochs=5, topology={"workers": workers}, runPolicy=run_policy)


def beat_as(cluster: Cluster, namespace: str, pod: str, lease: str | None = None) -> Heartbeat:
    """What the SDK does in ``pod`` (its env, a token bound to it), beating for ``lease`` (its own
    unless said)."""
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    server = config["clusters"][0]["cluster"]
    body = cluster.get("pod", pod, namespace)
    env = {e["name"]: e["value"] for e in body["spec"]["containers"][0]["env"] if "value" in e}
    token = cluster.pod_token(namespace, pod)
    replica = ReplicaIdentity.from_env(env)
    ca = server["certificate-authority"]
    return Heartbeat(server["server"], token, namespace, lease or pod, ca_file=ca, replica=replica)


def running(cluster: Cluster, namespace: str, name: str) -> dict[str, Any] | None:
    obj = cluster.get("trainer", name, namespace)
    return obj if obj.get("status", {}).get("phase") == "Running" else None


def test_heartbeats_reach_status_and_stay_within_their_trainer(cluster: Cluster, namespace: str) -> None:
    cluster.apply(trainer("alpha"), namespace)
    cluster.apply(trainer("beta"), namespace)
    eventually(lambda: running(cluster, namespace, "alpha"), what="alpha to run")
    eventually(lambda: running(cluster, namespace, "beta"), what="beta to run")

    beat_as(cluster, namespace, "beta-worker-0").send(epoch=1)  # the first beat creates the Lease
    beat_as(cluster, namespace, "alpha-worker-1").send(epoch=3, step=1200)
    obj = eventually(
        lambda: (o := cluster.get("trainer", "alpha", namespace))["status"].get("progress", {}).get("epoch") == 3 and o,
        what="the heartbeat to reach status.progress",
    )
    assert obj["status"]["progress"]["step"] == 1200
    assert obj["status"]["progress"]["lastHeartbeatTime"]
    assert "3" in cluster.kubectl("get", "trainer", "alpha", "-n", namespace, "-o", "jsonpath={.status.progress.epoch}")
    lease = cluster.get("lease", "alpha-worker-1", namespace)
    assert lease["metadata"]["ownerReferences"][0]["uid"] == obj["metadata"]["uid"]  # it goes with the Trainer

    for other in ("beta-worker-0", "beta-worker-1"):  # renewing beta's Lease, or creating one for it
        with pytest.raises(HeartbeatError, match=r"403.*may only renew its own Lease: pod alpha-worker-1"):
            beat_as(cluster, namespace, "alpha-worker-1", other).send(epoch=99)
    assert cluster.get("trainer", "beta", namespace)["status"].get("progress", {}).get("epoch", 0) <= 1
    assert "beta-worker-1" not in cluster.names("leases", namespace)
    # Its own Lease, labelled as beta's (what the trainer reads progress by): refused too.
    beta = cluster.get("trainer", "beta", namespace)["metadata"]["uid"]
    forged = replace(
        beat_as(cluster, namespace, "alpha-worker-0"), replica=ReplicaIdentity("beta", beta, "worker", "0")
    )
    with pytest.raises(HeartbeatError, match=r"403.*only report progress for its own Trainer"):
        forged.send(epoch=99)

    config = yaml.safe_load(cluster.kubeconfig.read_text())["clusters"][0]["cluster"]
    unbound = cluster.kubectl("create", "token", RUNNER_SERVICE_ACCOUNT, "-n", namespace).strip()
    loose = Heartbeat(config["server"], unbound, namespace, "alpha-worker-1", ca_file=config["certificate-authority"])
    with pytest.raises(HeartbeatError, match=r"403.*may only be used by a training pod"):
        loose.send(epoch=99)


def test_a_silent_worker_is_stalled_and_restarted(cluster: Cluster, namespace: str) -> None:
    cluster.apply(trainer("quiet", workers=1, stallTimeoutSeconds=10, backoffLimit=10), namespace)
    eventually(lambda: running(cluster, namespace, "quiet"), what="the run to start")
    obj = eventually(
        lambda: (
            (o := cluster.get("trainer", "quiet", namespace))["status"]["topology"]["replicas"]["worker"]["restarts"]
            >= 1
            and o
        ),
        timeout=60,
        what="the silent worker to be restarted",
    )
    assert condition(obj, "Stalled")  # True while stalled, False again once the replacement runs
    events = json.loads(cluster.kubectl("get", "events", "-n", namespace, "-o", "json"))["items"]
    assert any(e["reason"] == "RestartingPod" and "pod quiet-worker-0 stalled" in e["message"] for e in events)


def test_heartbeats_give_percent_done_an_estimated_completion_and_metrics(cluster: Cluster, namespace: str) -> None:
    """Issue 21: two beats 100 s apart by the pod's clock (a pace of 1 s per step), then the
    columns a person reads."""
    cluster.apply(trainer("gamma", workers=1), namespace)
    eventually(lambda: running(cluster, namespace, "gamma"), what="gamma to run")
    moment = [datetime.now(UTC) - timedelta(seconds=100)]  # the pod's clock, moved by the test
    beat = replace(beat_as(cluster, namespace, "gamma-worker-0"), clock=lambda: moment[0])
    beat.send(epoch=1, step=100, total_steps=1000, metrics={"loss": 0.9})
    moment[0] += timedelta(seconds=100)
    beat.send(epoch=2, step=200, total_steps=1000, metrics={"loss": 0.5, "tokens_per_s": 1234.5})

    def reported() -> dict[str, Any] | None:
        progress = cluster.get("trainer", "gamma", namespace)["status"].get("progress", {})
        return progress if progress.get("step") == 200 else None

    progress = eventually(reported, what="the second beat to reach status.progress")
    assert (progress["percent"], progress["totalSteps"]) == (20, 1000)
    assert progress["metrics"] == {"loss": "0.5", "tokens_per_s": "1234.5"}
    # 800 steps left at 1 s each, from the last beat
    last = datetime.fromisoformat(progress["lastHeartbeatTime"].replace("Z", "+00:00"))
    assert progress["estimatedCompletionTime"] == (last + timedelta(seconds=800)).strftime("%Y-%m-%dT%H:%M:%SZ")
    row = table(cluster.kubectl("get", "trainer", "gamma", "-n", namespace))[0]
    assert (row["PROGRESS"], row["ETA"], row["REASON"]) == ("20", progress["estimatedCompletionTime"], "Running")


@pytest.fixture
def scheduler_places_ungoverned_runs() -> Iterator[None]:
    """The quota controller at --ungoverned AtOnce for one test: a run no QuotaPolicy covers gets
    its pods at once and the scheduler alone says where they go (or that no node takes them)."""
    localdev.restart("quota", {"TRAINEROP_UNGOVERNED": "AtOnce"})
    try:
        yield
    finally:
        localdev.restart("quota")


NOWHERE = {"worker": {"spec": {"nodeSelector": {"trainer-operator-test/absent": "yes"}}}}


def test_pods_no_node_takes_are_said_with_the_schedulers_words(
    cluster: Cluster, namespace: str, scheduler_places_ungoverned_runs: None
) -> None:
    """Issue 21: the reason follows the phase: Unschedulable with the scheduler's message while
    no node takes the pods (pods created at once: --ungoverned AtOnce)."""
    cluster.apply(
        trainer_manifest("nowhere", epochs=1, topology={"workers": 2}, podTemplateOverrides=NOWHERE), namespace
    )

    def unschedulable() -> dict[str, Any] | None:
        status = cluster.get("trainer", "nowhere", namespace).get("status", {})
        # both pods counted (the scheduler tries them one after the other)
        said = status.get("reason") == "Unschedulable" and status["message"].startswith("2 of 2 pods unschedulable: 0/")
        return status if said else None

    status = eventually(unschedulable, timeout=90, what="the Trainer to say both its pods are unschedulable")
    assert status["phase"] == "Pending"
    assert "didn't match Pod's node affinity/selector" in status["message"]
    row = table(cluster.kubectl("get", "trainer", "nowhere", "-n", namespace))[0]
    assert (row["PHASE"], row["REASON"]) == ("Pending", "Unschedulable")


def test_a_run_no_node_takes_waits_without_pods_by_default(cluster: Cluster, namespace: str) -> None:
    """By default (--ungoverned AllOrNothing) the same run is held before any pod exists: the
    Trainer waits for its gates, the quota controller saying it waits for capacity."""
    cluster.apply(
        trainer_manifest("nowhere", epochs=1, topology={"workers": 2}, podTemplateOverrides=NOWHERE), namespace
    )

    def waiting() -> dict[str, Any] | None:
        status = cluster.get("trainer", "nowhere", namespace).get("status", {})
        return status if status.get("reason") == "WaitingForGates" else None

    status = eventually(waiting, timeout=90, what="the Trainer to wait for its gates")
    assert status["phase"] == "Pending"
    # The quota controller's refusal may land after the trainer's own status write.
    gate = eventually(
        lambda: condition(cluster.get("trainer", "nowhere", namespace), "QuotaAdmitted"), what="the quota's condition"
    )
    assert (gate["status"], gate["reason"]) == ("False", "WaitingForCapacity")
    assert cluster.kubectl("get", "pods", "-n", namespace, "-o", "name").strip() == ""

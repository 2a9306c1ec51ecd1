"""Checkpoints on a real S3 server (SeaweedFS, started with the local cluster): training pods'
identities report shards, the checkpoint controller verifies and commits them with a quorum,
keeps maxRetention, fails what never reaches quorum, and hands RESUME_FROM to restarted pods
(issue 5)."""

import contextlib
import dataclasses
import hashlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from testbed import cluster as cluster_tool
from tests.factories import trainer_manifest
from tests.harness import REPO, Cluster, KubectlError, condition, eventually
from tests.integration.buckets import s3
from trainerop_checkpoint import pvc_pods as pvc
from trainerop_sdk.checkpoint import Checkpointer, CheckpointUnreadable
from trainerop_sdk.kubeapi import APPLY, ApiClient, ApiError
from trainerop_sdk.layout import checkpoint_name, checkpoint_path, copy_key

SIM = "sim.trainer.operator.kubeflow.org"


def checkpointed(name: str, bucket: str, workers: int = 2, **checkpoint: Any) -> dict[str, Any]:
    """A Trainer of 3 epochs that checkpoints to ``bucket`` (3 copies of each shard, the newest 2 kept)."""
    return trainer_manifest(
        name,
        epochs=3,
        topology={"workers": workers, "replicationFactor": 3},
        checkpoint={"bucket": bucket, "credentialsSecret": "ckpt-creds", "maxRetention": 2, **checkpoint},
    )


def start(cluster: Cluster, namespace: str, bucket: str, name: str = "alpha", **checkpoint: Any) -> dict[str, Any]:
    cluster.apply(checkpointed(name, bucket, **checkpoint), namespace)
    return eventually(
        lambda: (t := cluster.get("trainer", name, namespace)).get("status", {}).get("phase") == "Running" and t,
        what=f"{name} to run",
    )


def as_pod(cluster: Cluster, namespace: str, trainer: dict[str, Any], token_of: str | None = None) -> Checkpointer:
    """The SDK as it runs in the Trainer's first worker: the pod's env, a token of the pod's
    ServiceAccount bound to it (or to the pod ``token_of``)."""
    name = trainer["metadata"]["name"]
    pod = cluster.get("pod", f"{name}-worker-0", namespace)
    env = {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0]["env"] if "value" in e}
    env |= cluster_tool.s3_credentials()  # what the pod gets from the credentials Secret
    env["POD_NAME"] = pod["metadata"]["name"]
    config = yaml.safe_load(cluster.kubeconfig.read_text())["clusters"][0]["cluster"]
    token = cluster.pod_token(namespace, token_of or pod["metadata"]["name"])
    api = ApiClient(config["server"], token, namespace, config["certificate-authority"])
    return Checkpointer.in_cluster(api, env)


def pod_of(cluster: Cluster, namespace: str, bucket: str, **checkpoint: Any) -> Checkpointer:
    """The SDK in the first worker of a new running Trainer alpha."""
    return as_pod(cluster, namespace, start(cluster, namespace, bucket, **checkpoint))


def checkpoint(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    return cluster.get("checkpoint", name, namespace)


def phase_is(cluster: Cluster, namespace: str, name: str, phase: str) -> dict[str, Any] | None:
    obj = checkpoint(cluster, namespace, name)
    return obj if obj.get("status", {}).get("phase") == phase else None


def save_steps(cluster: Cluster, namespace: str, ckpt: Checkpointer, *steps: int) -> None:
    """Every shard of each step saved, and each committed."""
    for step in steps:
        for shard in (0, 1):
            ckpt.save(f"step {step} shard {shard}".encode(), step=step, epoch=step // 100, shard=shard)
        name = f"alpha-step-{step}"
        eventually(lambda: phase_is(cluster, namespace, name, "Committed"), what=f"{name} to commit")  # noqa: B023


def latest_is(cluster: Cluster, namespace: str, name: str) -> dict[str, Any] | None:
    trainer = cluster.get("trainer", "alpha", namespace)
    return trainer if trainer["status"]["checkpoint"].get("latest") == name else None


def replace_worker_0(cluster: Cluster, namespace: str) -> dict[str, str]:
    """Fail alpha-worker-0; the env of the pod that replaces it."""
    old_uid = cluster.get("pod", "alpha-worker-0", namespace)["metadata"]["uid"]
    cluster.kubectl("annotate", "pod", "alpha-worker-0", "-n", namespace, f"{SIM}/fail-after=100ms")

    def replacement() -> dict[str, Any] | None:
        pod = cluster.get("pod", "alpha-worker-0", namespace)
        return pod if pod["metadata"]["uid"] != old_uid else None

    pod = eventually(replacement, what="the replacement pod")
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0]["env"]}


def test_shards_reported_with_the_pods_identity_commit_with_a_quorum(
    cluster: Cluster, namespace: str, bucket: str
) -> None:
    ckpt = pod_of(cluster, namespace, bucket)
    trainer = cluster.get("trainer", "alpha", namespace)
    assert (ckpt.replication, ckpt.shards, ckpt.directory) == (3, 2, f"{bucket}/{namespace}/alpha")
    ckpt.save(b"state of shard 0", step=100, epoch=1, shard=0)
    pending = checkpoint(cluster, namespace, "alpha-step-100")
    assert pending["metadata"]["ownerReferences"][0]["uid"] == trainer["metadata"]["uid"]
    ckpt.save(b"state of shard 1", step=100, epoch=1, shard=1)

    committed = eventually(lambda: phase_is(cluster, namespace, "alpha-step-100", "Committed"), what="a commit")
    assert committed["status"]["committedReplicas"] == 3
    assert committed["status"]["verifiedShards"] == 2
    obj = eventually(
        lambda: (t := cluster.get("trainer", "alpha", namespace))["status"]["checkpoint"].get("latest") and t,
        what="the Trainer to name its latest checkpoint",
    )
    path = checkpoint_path(ckpt.directory, 100)
    assert obj["status"]["checkpoint"]["resumeFrom"] == path
    assert condition(obj, "CheckpointReady")["reason"] == "Resumable"
    listed = cluster.kubectl("get", "checkpoints", "-n", namespace)
    assert "alpha-step-100" in listed
    assert "Committed" in listed


def test_a_missing_or_corrupted_copy_blocks_the_commit_until_a_quorum_is_verified(
    cluster: Cluster, namespace: str, bucket: str
) -> None:
    ckpt = pod_of(cluster, namespace, bucket)
    ckpt.save(b"shard 0", step=7, epoch=0, shard=0)
    # Shard 1: copy 0 is good, copy 1 is corrupted, copy 2 never arrived; the report says all three.
    data = b"shard 1"
    path = checkpoint_path(ckpt.directory, 7)
    client, prefix = s3(bucket), path.split("/", 3)[3]
    client.put(f"{prefix}/{copy_key(1, 0)}", data)
    client.put(f"{prefix}/{copy_key(1, 1)}", b"bit rot")
    report = {
        "index": 1,
        "sha256": hashlib.sha256(data).hexdigest(),
        "size": len(data),
        "copies": [copy_key(1, r) for r in range(3)],
    }
    ckpt.report(7, 0, path, 2, report)

    staging = eventually(lambda: phase_is(cluster, namespace, "alpha-step-7", "Staging"), what="Staging")
    message = staging["status"]["message"]
    assert "1 of 2 shards have 2 verified copies" in message
    assert "shard-00001/copy-1: mismatch" in message
    assert "shard-00001/copy-2: missing" in message
    assert staging["status"]["committedReplicas"] == 1
    assert "latest" not in cluster.get("trainer", "alpha", namespace)["status"]["checkpoint"]

    client.put(f"{prefix}/{copy_key(1, 2)}", data)  # the late copy lands: 2 of 3 is a majority
    eventually(lambda: phase_is(cluster, namespace, "alpha-step-7", "Committed"), what="the commit once 2 of 3 verify")


def test_retention_keeps_the_newest_and_deletes_older_data(cluster: Cluster, namespace: str, bucket: str) -> None:
    ckpt = pod_of(cluster, namespace, bucket)
    for step in (100, 200, 300):
        for shard in (0, 1):
            ckpt.save(f"step {step} shard {shard}".encode(), step=step, epoch=step // 100, shard=shard)
        name = f"alpha-step-{step}"
        eventually(lambda: phase_is(cluster, namespace, name, "Committed"), what=f"{name} to commit")  # noqa: B023
    collected = eventually(
        lambda: phase_is(cluster, namespace, "alpha-step-100", "GarbageCollected"), what="the oldest to be collected"
    )
    assert collected["status"]["collectTime"]
    prefix = checkpoint_path(ckpt.directory, 100).split("/", 3)[3]
    assert list(s3(bucket).keys(prefix + "/")) == []
    for step in (200, 300):
        kept = checkpoint_path(ckpt.directory, step).split("/", 3)[3]
        assert len(list(s3(bucket).keys(kept + "/"))) == 6  # 2 shards x 3 copies
    status = cluster.get("trainer", "alpha", namespace)["status"]["checkpoint"]
    assert (status["latest"], status["committed"]) == ("alpha-step-300", 2)


def test_a_restarted_pod_resumes_from_the_latest_committed_checkpoint(
    cluster: Cluster, namespace: str, bucket: str
) -> None:
    ckpt = pod_of(cluster, namespace, bucket)
    for shard in (0, 1):
        ckpt.save(f"weights {shard}".encode(), step=40, epoch=2, shard=shard)
    eventually(lambda: phase_is(cluster, namespace, "alpha-step-40", "Committed"), what="a commit")
    eventually(
        lambda: cluster.get("trainer", "alpha", namespace)["status"]["checkpoint"].get("latest") == "alpha-step-40",
        what="the resume point",
    )
    env = replace_worker_0(cluster, namespace)
    assert env["RESUME_FROM"] == checkpoint_path(ckpt.directory, 40)
    resumed = as_pod(cluster, namespace, cluster.get("trainer", "alpha", namespace))
    assert resumed.resume_from == env["RESUME_FROM"]
    assert resumed.load(shard=1) == b"weights 1"  # what the restarted pod reads back, checksum-verified


def test_a_pod_cannot_report_for_another_trainer(cluster: Cluster, namespace: str, bucket: str) -> None:
    alpha = start(cluster, namespace, bucket, "alpha")
    start(cluster, namespace, bucket, "beta")
    intruder = as_pod(cluster, namespace, alpha, token_of="beta-worker-0")  # beta's pod, claiming to be alpha
    with pytest.raises(Exception, match="only report checkpoints of its own Trainer") as refused:
        intruder.save(b"x", step=1, epoch=0, shard=0)
    assert "pod beta-worker-0 is not a replica of Trainer alpha" in str(refused.value)
    assert checkpoint_name("alpha", 1) not in cluster.names("checkpoints", namespace)
    as_pod(cluster, namespace, alpha).save(b"x", step=1, epoch=0, shard=0)  # its own runner may


def test_a_checkpoint_without_a_quorum_in_time_fails(cluster: Cluster, namespace: str, bucket: str) -> None:
    pod_of(cluster, namespace, bucket, commitTimeoutSeconds=10).save(b"only shard 0", step=5, epoch=0, shard=0)
    failed = eventually(lambda: phase_is(cluster, namespace, "alpha-step-5", "Failed"), what="the timeout")
    assert failed["status"]["reason"] == "QuorumTimeout"
    assert "1 of 2 shards reported" in failed["status"]["message"]
    events = json.loads(cluster.kubectl("get", "events", "-n", namespace, "-o", "json"))["items"]
    assert any(e["reason"] == "CheckpointFailed" and "alpha-step-5" in e["message"] for e in events)
    assert "latest" not in cluster.get("trainer", "alpha", namespace)["status"]["checkpoint"]


@pytest.mark.parametrize(
    ("bucket_value", "secret", "reason", "fragment"),
    [
        ("missing-claim", False, "StorageNotFound", "PersistentVolumeClaim 'missing-claim'"),
        ("s3://somewhere/runs", False, "CredentialsNotFound", "Secret 'ckpt-creds'"),
    ],
)
def test_storage_that_is_not_there_holds_the_trainer(
    cluster: Cluster, namespace: str, bucket_value: str, secret: bool, reason: str, fragment: str
) -> None:
    cluster.apply(checkpointed("alpha", bucket_value), namespace)
    obj = eventually(
        lambda: (
            (t := cluster.get("trainer", "alpha", namespace))
            and (c := condition(t, "CheckpointReady"))
            and c["reason"] == reason
            and t
        ),
        what=reason,
    )
    assert fragment in condition(obj, "CheckpointReady")["message"]
    assert cluster.names("pods", namespace) == set()


def test_a_claim_deleted_under_a_trainer_closes_its_gate(cluster: Cluster, namespace: str) -> None:
    """The section a ready claim gave (resume point, contribution) goes with the claim; an empty
    section applied instead would be null, which the API server refuses (seen while namespaces
    were deleted: the write was retried until the Trainer went)."""
    cluster.apply({"apiVersion": "v1", "kind": "List", "items": cluster_tool.checkpoint_volume(namespace, "gone-soon")})
    cluster.apply(checkpointed("alpha", "gone-soon"), namespace)
    eventually(
        lambda: "contribution" in cluster.get("trainer", "alpha", namespace).get("status", {}).get("checkpoint", {}),
        what="the claim's contribution",
    )
    cluster.kubectl("delete", "pvc", "gone-soon", "-n", namespace, "--wait=false")
    # The run's pods keep it (pvc-protection) unless none holds it yet: then it is gone already.
    with contextlib.suppress(KubectlError):
        cluster.kubectl(
            "patch", "pvc", "gone-soon", "-n", namespace, "--type=merge", "-p", '{"metadata":{"finalizers":null}}'
        )
    eventually(lambda: "gone-soon" not in cluster.names("pvc", namespace), what="the claim gone")
    obj = eventually(
        lambda: (
            (t := cluster.get("trainer", "alpha", namespace))
            and condition(t, "CheckpointReady").get("reason") == "StorageNotFound"
            and t
        ),
        what="StorageNotFound",
    )
    assert "checkpoint" not in obj["status"]
    cluster.kubectl("delete", "persistentvolume", f"{namespace}-gone-soon", "--wait=false")


SIGTERM_SCRIPT = """
import json, sys, time
from trainerop_sdk.checkpoint import Checkpointer
from trainerop_sdk.kubeapi import APPLY, ApiClient, ApiError
args = json.loads(sys.argv[1])
ckpt = Checkpointer.in_cluster(ApiClient(**args["api"]), args["env"])
step = 0
ckpt.save_on_sigterm(lambda: (b"saved on SIGTERM at step %d" % step, step, 0))
print("ready", flush=True)
while True:
    step += 1
    time.sleep(0.01)
"""


def test_sigterm_saves_before_the_pod_goes(cluster: Cluster, namespace: str, bucket: str) -> None:
    """Eviction or spot reclaim: the kubelet sends SIGTERM, the SDK saves and exits 143."""
    pod = pod_of(cluster, namespace, bucket)
    api = pod.api
    args = {
        "api": {"server": api.server, "token": api.token, "namespace": api.namespace, "ca_file": api.ca_file},
        "env": {**pod.env, "CHECKPOINT_SHARDS": "1"},
    }
    proc = subprocess.Popen(
        [sys.executable, "-c", SIGTERM_SCRIPT, json.dumps(args)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO / "libs" / "sdk" / "src")},
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 143
    reported = [c for c in cluster.names("checkpoints", namespace) if c.startswith("alpha-step-")]
    assert len(reported) == 1
    committed = eventually(lambda: phase_is(cluster, namespace, reported[0], "Committed"), what="the SIGTERM save")
    assert committed["spec"]["shardCount"] == 1


def test_a_saved_shard_is_never_overwritten(cluster: Cluster, namespace: str, bucket: str) -> None:
    """A replica that replays a step after a restart must not corrupt what may have committed."""
    ckpt = pod_of(cluster, namespace, bucket)
    ckpt.save(b"first", step=3, epoch=0, shard=0)
    ckpt.save(b"second thoughts", step=3, epoch=0, shard=0)  # kept as it was: nothing written
    key = f"{checkpoint_path(ckpt.directory, 3).split('/', 3)[3]}/{copy_key(0, 0)}"
    assert s3(bucket).get(key) == b"first"
    changed = {"index": 0, "sha256": "b" * 64, "size": 1, "copies": [copy_key(0, 0)]}
    with pytest.raises(Exception, match="a reported shard is immutable"):  # and the API refuses a change
        ckpt.report(3, 0, checkpoint_path(ckpt.directory, 3), 2, changed)


def test_a_pod_cannot_take_another_trainers_checkpoint_names(cluster: Cluster, namespace: str, bucket: str) -> None:
    """Beta's pod creating alpha-step-9 (for itself) would block alpha's step 9: refused."""
    start(cluster, namespace, bucket, "alpha")
    beta = as_pod(cluster, namespace, start(cluster, namespace, bucket, "beta"))
    squat = {
        "apiVersion": "trainer.operator.kubeflow.org/v1alpha1",
        "kind": "Checkpoint",
        "metadata": {"name": checkpoint_name("alpha", 9)},
        "spec": {"trainer": "beta", "epoch": 0, "step": 9, "path": checkpoint_path(beta.directory, 9)},
    }
    path = f"/apis/trainer.operator.kubeflow.org/v1alpha1/namespaces/{namespace}/checkpoints/alpha-step-9"
    with pytest.raises(ApiError, match="must be named beta-step-9"):
        beta.api.request("PATCH", path + "?fieldManager=squatter", squat, APPLY)
    assert checkpoint_name("alpha", 9) not in cluster.names("checkpoints", namespace)


def test_a_pvc_checkpoint_is_verified_by_a_pod_that_mounts_the_claim(cluster: Cluster, namespace: str) -> None:
    """Here the pods run on kwok's simulated nodes, which never answer: the verifier pod is created
    for the reported copies (after a refusal by a ResourceQuota is reported and lifted), the wait is
    explained, and the pod goes with the checkpoint's timeout. A verifier's answer leading to a
    commit and collection: tests/e2e/test_pvc_checkpoints.py."""
    cluster.apply({"apiVersion": "v1", "kind": "List", "items": cluster_tool.checkpoint_volume(namespace)})
    body = checkpointed("alpha", "pvc-backups", commitTimeoutSeconds=45)
    del body["spec"]["checkpoint"]["credentialsSecret"]
    cluster.apply(body, namespace)
    eventually(lambda: cluster.get("trainer", "alpha", namespace).get("status", {}).get("phase") == "Running")
    path = checkpoint_path("/checkpoints/alpha", 7)
    report: dict[str, Any] = {
        "apiVersion": "trainer.operator.kubeflow.org/v1alpha1",
        "kind": "Checkpoint",
        "metadata": {"name": "alpha-step-7"},
        "spec": {"trainer": "alpha", "epoch": 0, "step": 7, "path": path, "shardCount": 2, "replicationFactor": 3},
    }
    cluster.apply(report, namespace)
    shards = [
        {"index": i, "sha256": f"{i:064x}", "size": 10, "copies": [copy_key(i, r) for r in range(3)]} for i in range(2)
    ]
    cluster.apply(report | {"spec": report["spec"] | {"shards": shards[:1]}}, namespace)
    eventually(lambda: phase_is(cluster, namespace, "alpha-step-7", "Pending"), what="shard 0 to be seen")
    assert verifier_pods(cluster, namespace) == []  # one pod reads them all once every shard is in
    full = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "full"}, "spec": {"hard": {"pods": "2"}}}
    cluster.apply(full, namespace)  # the two workers: no room for another pod
    eventually(lambda: cluster.get("resourcequota", "full", namespace).get("status", {}).get("used"))
    cluster.apply(report | {"spec": report["spec"] | {"shards": shards}}, namespace)

    def refused() -> str | None:
        message = str(checkpoint(cluster, namespace, "alpha-step-7").get("status", {}).get("message", ""))
        return message if "was refused" in message else None

    assert "exceeded quota" in eventually(refused, what="the refusal in the checkpoint's message")

    def reported() -> bool:
        events = json.loads(cluster.kubectl("get", "events", "-n", namespace, "-o", "json"))["items"]
        return any(e["reason"] == "StoragePodFailed" and "exceeded quota" in e["message"] for e in events)

    eventually(reported, what="a StoragePodFailed Event")
    cluster.kubectl("delete", "resourcequota", "full", "-n", namespace)

    (pod,) = eventually(lambda: verifier_pods(cluster, namespace), what="a verifier pod once the quota is gone")
    ckpt = checkpoint(cluster, namespace, "alpha-step-7")
    assert pod["metadata"]["ownerReferences"][0]["uid"] == ckpt["metadata"]["uid"]
    spec = pod["spec"]
    assert spec["volumes"][0]["persistentVolumeClaim"] == {"claimName": "pvc-backups", "readOnly": True}
    assert spec["automountServiceAccountToken"] is False
    request = json.loads(spec["containers"][0]["env"][0]["value"])
    assert request == [[path, copy_key(i, r), f"{i:064x}", 10] for i in range(2) for r in range(3)]

    def naming_its_pod() -> dict[str, Any] | None:
        c = checkpoint(cluster, namespace, "alpha-step-7")
        return c if pod["metadata"]["name"] in c.get("status", {}).get("message", "") else None

    staging = eventually(naming_its_pod, what="the checkpoint to name its verifier pod")
    assert staging["status"]["phase"] == "Staging"
    assert "verifying on claim 'pvc-backups'" in staging["status"]["message"]
    eventually(lambda: phase_is(cluster, namespace, "alpha-step-7", "Failed"), timeout=60, what="the timeout")
    eventually(lambda: verifier_pods(cluster, namespace) == [], what="the verifier pod to go")


def verifier_pods(cluster: Cluster, namespace: str) -> list[dict[str, Any]]:
    selector = "trainer.operator.kubeflow.org/checkpoint-pod=verify"
    pods = json.loads(cluster.kubectl("get", "pods", "-n", namespace, "-l", selector, "-o", "json"))["items"]
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


@pytest.mark.smoke
def test_the_checkpoint_controller_may_create_only_storage_pods(cluster: Cluster, namespace: str) -> None:
    """RBAC lets the checkpoint controller create pods anywhere; its admission policy holds it to
    the verifier and collector pods, both non-root without capabilities."""
    target = pvc.Target(namespace, "alpha", "pvc-backups", "trainer-operator:dev")
    verifier = pvc.verifier_pod(target, "alpha-step-7", "uid-7", [])
    writer = pvc.Writer(1000, 1000)
    collector = pvc.collector_pod(target, "uid-alpha", ["/checkpoints/alpha/step-0000000007"], writer)
    for pod in (verifier, collector):
        pod["metadata"].pop("ownerReferences")
        cluster.kubectl("create", "--dry-run=server", "-f", "-", stdin=json.dumps(pod), as_controller="checkpoint")

    def refused(change: Callable[[dict[str, Any], dict[str, Any]], object], base: dict[str, Any] = verifier) -> str:
        """The API server's answer to the controller creating the verifier pod (or ``base``) with
        ``change(pod, container)``."""
        pod: dict[str, Any] = json.loads(json.dumps(base))
        change(pod, pod["spec"]["containers"][0])
        with pytest.raises(KubectlError) as err:
            cluster.kubectl("create", "--dry-run=server", "-f", "-", stdin=json.dumps(pod), as_controller="checkpoint")
        return err.value.stderr

    container = {"name": "c", "image": "x"}
    host = {"name": "host", "hostPath": {"path": "/"}}
    root = {"capabilities": {"add": ["SYS_ADMIN"]}, "allowPrivilegeEscalation": False}
    secret = {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "ckpt-creds", "key": "AWS_SECRET_ACCESS_KEY"}}}
    assert "only checkpoint verifier and collector pods" in refused(lambda p, c: p["metadata"]["labels"].clear())
    assert "python -m trainerop_checkpoint.pvc_worker" in refused(lambda p, c: c.update(command=["sh", "-c", "id"]))
    assert "no ServiceAccount token" in refused(lambda p, c: p["spec"].update(automountServiceAccountToken=True))
    assert "one PersistentVolumeClaim" in refused(lambda p, c: p["spec"]["volumes"].append(host))
    assert "read-only to verify" in refused(lambda p, c: c["volumeMounts"][0].pop("readOnly"))
    assert "adding none back" in refused(lambda p, c: c.update(securityContext=root))
    assert "never a Secret's value" in refused(lambda p, c: c["env"].append(secret))
    assert "the operator's image trainer-operator:dev" in refused(lambda p, c: c.update(image="python:3"))
    non_root = "runs as a non-root user and group, set for the pod, without an fsGroup"
    assert non_root in refused(lambda p, c: p["spec"]["securityContext"].update(runAsNonRoot=False))
    # The collector too: never as root (nor root's group), never changing the shared claim's groups.
    as_root = {"runAsNonRoot": False, "runAsUser": 0}
    assert non_root in refused(lambda p, c: p["spec"]["securityContext"].update(as_root), collector)
    assert non_root in refused(lambda p, c: p["spec"]["securityContext"].update(runAsGroup=0), collector)
    assert non_root in refused(lambda p, c: p["spec"]["securityContext"].update(fsGroup=1000), collector)
    assert non_root in refused(lambda p, c: p["spec"]["securityContext"].update(supplementalGroups=[0]), collector)
    unconfined = {"type": "Unconfined"}
    assert "RuntimeDefault seccomp" in refused(
        lambda p, c: p["spec"]["securityContext"].update(seccompProfile=unconfined)
    )
    assert "drops every capability" in refused(lambda p, c: c["securityContext"].update(capabilities={}))
    dac = {"drop": ["ALL"], "add": ["DAC_OVERRIDE"]}
    assert "adding none back" in refused(lambda p, c: c["securityContext"].update(capabilities=dac), collector)
    # Nor may it delete any other pod.
    other = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "other"}, "spec": {"containers": [container]}}
    cluster.apply(other, namespace)
    with pytest.raises(KubectlError) as err:
        cluster.kubectl("delete", "pod", "other", "-n", namespace, "--wait=false", as_controller="checkpoint")
    assert "creates and deletes only checkpoint verifier and collector pods" in err.value.stderr
    # An administrator is not held to it.
    plain = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "admin"}, "spec": {"containers": [container]}}
    cluster.kubectl("create", "--dry-run=server", "-n", namespace, "-f", "-", stdin=json.dumps(plain))


@pytest.mark.parametrize("multipart", [True, False], ids=["boto3 multipart", "one streamed PUT"])
def test_a_shard_saved_from_a_file_is_streamed_to_s3_and_commits(
    cluster: Cluster, namespace: str, bucket: str, tmp_path: Any, multipart: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """save_file never holds the shard in memory: with boto3 (trainerop-sdk[s3]) in parts of
    16 MiB, without it in one PUT read from the file; either way the controller verifies every
    copy against what its writer reported and commits — from the checksum S3 kept (the whole
    object's sha256 after one PUT, a multipart upload's checksum of its parts' ones), reading no
    copy back."""
    from trainerop_sdk import s3_multipart

    monkeypatch.setattr(s3_multipart, "available", lambda: multipart)
    by_stored_checksum = {"verdict": "ok", "source": "stored"}
    before = cluster.metric("checkpoint", "checkpoint_copies_verified_total", by_stored_checksum)
    ckpt = pod_of(cluster, namespace, bucket)
    shard = tmp_path / "shard.bin"
    with shard.open("wb") as f:  # 40 MiB: three parts
        for _ in range(40):
            f.write(os.urandom(1 << 20))
    ckpt.save_file(str(shard), step=300, epoch=3, shard=0)
    ckpt.save(b"the other shard", step=300, epoch=3, shard=1)
    committed = eventually(
        lambda: phase_is(cluster, namespace, "alpha-step-300", "Committed"), timeout=180, what="a commit"
    )
    reported = next(s for s in committed["spec"]["shards"] if s["index"] == 0)
    assert reported["size"] == 40 << 20
    assert reported["sha256"] == hashlib.sha256(shard.read_bytes()).hexdigest()
    prefix = checkpoint_path(ckpt.directory, 300).split("/", 3)[3]
    large, small = (s3(bucket).stored_checksum(f"{prefix}/{copy_key(i, 0)}") for i in (0, 1))
    assert large is not None
    if multipart:  # S3 keeps a multipart upload's checksum, which the writer computed and reported
        assert large.parts_sha256 == reported["partsSha256"]
        assert reported["partsSha256"].endswith("-3")
    else:
        assert large.sha256 == reported["sha256"]
        assert "partsSha256" not in reported
    assert small is not None
    assert small.sha256 == hashlib.sha256(b"the other shard").hexdigest()
    # Every copy was verified from the checksum S3 kept, none read back.
    verified = cluster.metric("checkpoint", "checkpoint_copies_verified_total", by_stored_checksum) - before
    # At least this run's 6 copies (the counter is the controller's: a checkpoint of an earlier
    # test still being looked at meanwhile adds its own, seen once in a full run).
    assert verified >= 6


WRITER = """
import sys, time
from trainerop_sdk import storage
original = storage.S3Location.put_file
written = []
def slow(self, key, path, sha, size):
    if written:  # the first copy is written; killed before the second: the report is never made
        print("uploading", key, flush=True)
        time.sleep(30)
    written.append(key)
    original(self, key, path, sha, size)
storage.S3Location.put_file = slow
"""


def test_a_save_killed_mid_write_leaves_nothing_that_looks_committed(
    cluster: Cluster, namespace: str, bucket: str, tmp_path: Any
) -> None:
    ckpt = pod_of(cluster, namespace, bucket)
    shard = tmp_path / "shard.bin"
    shard.write_bytes(os.urandom(1 << 20))
    script = WRITER + (
        "from trainerop_sdk.checkpoint import Checkpointer\n"
        "from trainerop_sdk.kubeapi import ApiClient\n"
        f"api = ApiClient({ckpt.api.server!r}, {ckpt.api.token!r}, {namespace!r}, {ckpt.api.ca_file!r})\n"
        f"Checkpointer.in_cluster(api, {dict(ckpt.env)!r}).save_file({str(shard)!r}, step=500, epoch=5, shard=0)\n"
    )
    writer = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert writer.stdout is not None
    assert writer.stdout.readline().startswith("uploading")
    writer.send_signal(signal.SIGKILL)
    writer.wait(timeout=30)
    with pytest.raises(KubectlError):  # nothing reported: no Checkpoint of that step at all
        checkpoint(cluster, namespace, "alpha-step-500")
    assert "latest" not in cluster.get("trainer", "alpha", namespace)["status"].get("checkpoint", {})
    # The replica's next save of the step (after its restart) writes and reports the shard whole.
    ckpt.save_file(str(shard), step=500, epoch=5, shard=0)
    ckpt.save(b"shard 1", step=500, epoch=5, shard=1)
    eventually(lambda: phase_is(cluster, namespace, "alpha-step-500", "Committed"), what="the commit of the saved step")


def test_an_unreadable_latest_checkpoint_moves_the_run_back_to_the_previous_one(
    cluster: Cluster, namespace: str, bucket: str
) -> None:
    ckpt = pod_of(cluster, namespace, bucket, maxRetention=3)
    save_steps(cluster, namespace, ckpt, 100, 200)
    eventually(lambda: latest_is(cluster, namespace, "alpha-step-200"), what="the resume point")
    # The storage loses shard 1 of the latest: one copy rots, the two others are gone.
    prefix = checkpoint_path(ckpt.directory, 200).split("/", 3)[3]
    client = s3(bucket)
    client.put(f"{prefix}/{copy_key(1, 0)}", b"bit rot")
    for r in (1, 2):
        client.delete(f"{prefix}/{copy_key(1, r)}")

    resuming = dataclasses.replace(ckpt, resume_from=checkpoint_path(ckpt.directory, 200))
    with pytest.raises(CheckpointUnreadable) as ended:
        resuming.load(shard=1)
    assert ended.value.code == 143  # retryable under restartPolicy ExitCode too
    assert "copy-0: sha256 mismatch" in str(ended.value)
    assert "marked it unreadable: this pod's replacement resumes from the previous" in str(ended.value)

    bad = checkpoint(cluster, namespace, "alpha-step-200")
    assert (bad["status"]["phase"], bad["status"]["reason"]) == ("Failed", "Unreadable")
    assert bad["spec"]["unreadable"][0]["pod"] == "alpha-worker-0"
    # The mark comes after the Trainer's new resume point: the replacement is given the previous one.
    trainer = cluster.get("trainer", "alpha", namespace)
    assert trainer["status"]["checkpoint"]["resumeFrom"] == checkpoint_path(ckpt.directory, 100)
    ready = condition(trainer, "CheckpointReady")
    assert (ready["status"], ready["reason"]) == ("True", "ResumedFromPrevious")
    events = json.loads(cluster.kubectl("get", "events", "-n", namespace, "-o", "json"))["items"]
    said = next(e for e in events if e["reason"] == "CheckpointUnreadable")
    assert said["type"] == "Warning"
    assert "alpha-step-200 (step 200)" in said["message"]
    assert said["message"].endswith("resumes from alpha-step-100 (step 100)")

    with pytest.raises(CheckpointUnreadable, match="is never resumed from"):
        resuming.load(shard=0)  # a rank whose own shard is fine does not resume from it either
    env = replace_worker_0(cluster, namespace)
    assert env["RESUME_FROM"] == checkpoint_path(ckpt.directory, 100)
    assert dataclasses.replace(ckpt, resume_from=env["RESUME_FROM"]).load(shard=1) == b"step 100 shard 1"
    assert len(list(client.keys(prefix + "/"))) == 4  # its data stays until a newer checkpoint commits

    save_steps(cluster, namespace, ckpt, 300)
    eventually(lambda: not list(client.keys(prefix + "/")) or None, what="the unreadable one's data to go")
    trainer = eventually(lambda: latest_is(cluster, namespace, "alpha-step-300"), what="the new resume point")
    assert condition(trainer, "CheckpointReady")["reason"] == "Resumable"


def test_retention_keeps_what_a_live_pod_resumes_from(cluster: Cluster, namespace: str, bucket: str) -> None:
    ckpt = pod_of(cluster, namespace, bucket, maxRetention=1)
    save_steps(cluster, namespace, ckpt, 100)
    eventually(lambda: latest_is(cluster, namespace, "alpha-step-100"), what="the resume point")
    pinned = replace_worker_0(cluster, namespace)["RESUME_FROM"]
    assert pinned == checkpoint_path(ckpt.directory, 100)  # a live pod's: torchrun restarts load it again

    save_steps(cluster, namespace, ckpt, 200, 300)
    eventually(lambda: phase_is(cluster, namespace, "alpha-step-200", "GarbageCollected"), what="200 collected")
    assert checkpoint(cluster, namespace, "alpha-step-100")["status"]["phase"] == "Committed"
    assert len(list(s3(bucket).keys(pinned.split("/", 3)[3] + "/"))) == 6

    assert replace_worker_0(cluster, namespace)["RESUME_FROM"] == checkpoint_path(ckpt.directory, 300)
    # The controller reads the live pods' RESUME_FROM at most once a minute per Trainer.
    eventually(
        lambda: phase_is(cluster, namespace, "alpha-step-100", "GarbageCollected"), timeout=150, what="100 collected"
    )
    assert list(s3(bucket).keys(pinned.split("/", 3)[3] + "/")) == []

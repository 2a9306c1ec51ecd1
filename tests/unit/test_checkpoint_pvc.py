"""Checkpoints on a PVC (trainerop_checkpoint.pvc_pods, .pvc_worker): the verifier and collector pods, what they do on
the mounted claim, and the controller's plan — which pods to create and delete and what their
one-letter answers mean."""

import asyncio
import hashlib
import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import pytest

from trainerop_checkpoint import pvc_pods as pvc
from trainerop_checkpoint import pvc_worker
from trainerop_checkpoint.claim_pods import ClaimPods
from trainerop_checkpoint.decide import RECHECK_SECONDS, Copy
from trainerop_common.cache import ObjectCache
from trainerop_common.config import ControllerConfig
from trainerop_common.kube import Kube
from trainerop_common.runtime import Runtime
from trainerop_sdk.layout import checkpoint_path, copy_key
from trainerop_sdk.storage import LocalLocation

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
TARGET = pvc.Target("team", "llama", "pvc-backups", "trainer-operator:dev")
PATH = "/checkpoints/llama/step-0000000300"


WRITER = pvc.Writer(1000, 1000)


def copies_on_disk(root: Path, data: dict[int, bytes], replicas: int = 3) -> list[Copy]:
    """Shards written as the SDK writes them (replicas copies each) on a claim seen at ``root``,
    described as the controller sees them (at /checkpoints)."""
    location = LocalLocation(checkpoint_path(str(root / "llama"), 300))
    out = []
    for shard, blob in data.items():
        for r in range(replicas):
            location.put(copy_key(shard, r), blob)
            out.append(
                Copy("llama-step-300", "uid-1", PATH, copy_key(shard, r), hashlib.sha256(blob).hexdigest(), len(blob))
            )
    return out


def reported(checkpoint: str = "llama-step-300", uid: str = "uid-1", shards: int = 2, replicas: int = 3) -> list[Copy]:
    return [
        Copy(checkpoint, uid, PATH, copy_key(s, r), f"{s:064x}", 10) for s in range(shards) for r in range(replicas)
    ]


def test_the_verifier_mounts_the_claim_read_only_without_a_token_or_privileges() -> None:
    copies = reported(shards=1, replicas=1)
    pod = pvc.verifier_pod(TARGET, "llama-step-300", "uid-1", copies)
    spec = pod["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["restartPolicy"] == "Never"
    assert spec["activeDeadlineSeconds"] > 0
    assert spec["volumes"] == [
        {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "pvc-backups", "readOnly": True}}
    ]
    (container,) = spec["containers"]
    assert container["volumeMounts"][0] == {"name": "checkpoints", "mountPath": "/checkpoints", "readOnly": True}
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["command"] == ["python", "-m", "trainerop_checkpoint.pvc_worker"]
    (owner,) = pod["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"]) == ("Checkpoint", "uid-1")  # goes with its Checkpoint
    (env,) = container["env"]
    assert json.loads(env["value"]) == [[PATH, "shard-00000/copy-0", "0" * 64, 10]]
    assert pod["metadata"]["labels"][pvc.PURPOSE_LABEL] == "verify"
    assert pvc.trainer_of(pod) == ("team", "llama")
    assert "trainer-name" not in pod["metadata"]["labels"]  # not one of the Trainer's training pods


def test_the_collector_writes_the_claim_as_the_checkpoints_writer_without_privileges_or_a_token() -> None:
    pod = pvc.collector_pod(TARGET, "trainer-uid", [PATH], WRITER)
    spec = pod["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["volumes"] == [{"name": "checkpoints", "persistentVolumeClaim": {"claimName": "pvc-backups"}}]
    (container,) = spec["containers"]
    assert container["volumeMounts"] == [{"name": "checkpoints", "mountPath": "/checkpoints"}]
    security = spec["securityContext"]
    assert (security["runAsNonRoot"], security["runAsUser"], security["runAsGroup"]) == (True, 1000, 1000)
    assert not {"fsGroup", "supplementalGroups"} & set(security)  # the shared claim's groups stay as they are
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    (owner,) = pod["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Trainer", "llama", "trainer-uid")
    assert json.loads(container["env"][0]["value"]) == [PATH]


def test_a_pod_is_named_after_its_work() -> None:
    copies = reported()
    first = pvc.verifier_pod(TARGET, "llama-step-300", "uid-1", copies)["metadata"]["name"]
    assert first == pvc.verifier_pod(TARGET, "llama-step-300", "uid-1", copies)["metadata"]["name"]
    assert first != pvc.verifier_pod(TARGET, "llama-step-300", "uid-1", copies[1:])["metadata"]["name"]
    assert first != pvc.verifier_pod(TARGET, "llama-step-300", "uid-2", copies)["metadata"]["name"]
    long = pvc.verifier_pod(TARGET, "x" * 253, "uid-1", copies)["metadata"]["name"]
    assert len(long) <= 63


def test_the_verifier_finds_good_missing_and_corrupted_copies(tmp_path: Path) -> None:
    copies = copies_on_disk(tmp_path, {0: b"weights of shard 0", 1: b"weights of shard 1"})
    on_disk = tmp_path / "llama" / "step-0000000300"
    (on_disk / copies[1].key).write_bytes(b"bit rot")  # shard 0, copy 1
    (on_disk / copies[5].key).unlink()  # shard 1, copy 2
    assert pvc_worker.check(pvc.encode_request(copies), str(tmp_path)) == "oxooom"


def test_a_copy_with_the_right_hash_but_another_size_is_a_mismatch(tmp_path: Path) -> None:
    (copy,) = copies_on_disk(tmp_path, {0: b"x"}, replicas=1)
    wrong = Copy(copy.checkpoint, copy.uid, copy.path, copy.key, copy.sha256, copy.size + 1)
    assert pvc_worker.check(pvc.encode_request([wrong]), str(tmp_path)) == "x"


def test_the_collector_deletes_checkpoint_directories_and_nothing_outside_the_claim(tmp_path: Path) -> None:
    on_claim = LocalLocation(str(tmp_path / "llama" / "step-0000000300"))
    on_claim.put("shard-00000/copy-0", b"w")
    requested = [
        PATH,  # there: deleted
        "/checkpoints/llama/step-0000000400",  # already gone: done as well
        "/checkpoints/llama",  # the Trainer's whole directory: not a checkpoint
        "/checkpoints/llama/../../etc",
        "/etc/passwd",
        "/checkpoints//llama/x",
        7,
    ]

    def delete(path: str) -> object:
        return pvc_worker.on_claim(path, str(tmp_path)).delete_all()

    assert pvc_worker.collect(json.dumps(requested), delete) == "ddeeeee"
    assert not (tmp_path / "llama" / "step-0000000300").exists()
    assert (tmp_path / "llama").exists()

    def broken(path: str) -> object:
        raise PermissionError(13, "Permission denied", path)

    assert pvc_worker.collect(json.dumps([PATH]), broken) == "e"


def test_large_checkpoints_are_split_so_each_answer_fits_a_termination_message() -> None:
    copies = [Copy("c", "u", PATH, f"shard-{i:05d}/copy-0", "s" * 64, 1) for i in range(1201)]
    assert [len(b) for b in pvc.batches(copies)] == [500, 500, 201]
    assert pvc.BATCH <= 4096  # one letter per copy; the kubelet keeps 4096 bytes
    plan = pvc.plan_verification(TARGET, copies, [], NOW)
    assert [len(json.loads(p["spec"]["containers"][0]["env"][0]["value"])) for p in plan.create] == [500, 500, 201]


def test_main_answers_in_the_termination_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    copies = copies_on_disk(tmp_path, {0: b"w"}, replicas=2)
    log = tmp_path / "termination-log"
    monkeypatch.setenv("TRAINEROP_TERMINATION_LOG", str(log))
    monkeypatch.setenv(pvc.VERIFY_ENV, pvc.encode_request(copies))
    assert pvc_worker.main([str(tmp_path)]) == 0
    assert log.read_text() == "oo"
    monkeypatch.delenv(pvc.VERIFY_ENV)
    monkeypatch.setenv(pvc.COLLECT_ENV, json.dumps(["/elsewhere", PATH]))
    assert pvc_worker.main([str(tmp_path)]) == 0
    assert log.read_text() == "ed"
    assert not (tmp_path / "llama" / "step-0000000300").exists()
    monkeypatch.delenv(pvc.COLLECT_ENV)
    assert pvc_worker.main([]) == 2


# The controller's plan, on pods as the API server returns them (the created manifest plus a status).


def pod_with(manifest: dict[str, Any], status: dict[str, Any], deleting: bool = False) -> pvc.PodView:
    body = json.loads(json.dumps(manifest)) | {"status": status}
    if deleting:
        body["metadata"]["deletionTimestamp"] = "2026-01-01T11:59:59Z"
    view = pvc.view(body)
    assert view is not None
    return view


def ended(letters: str, at: datetime = NOW) -> dict[str, Any]:
    stamp = at.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "phase": "Succeeded",
        "containerStatuses": [{"state": {"terminated": {"exitCode": 0, "message": letters, "finishedAt": stamp}}}],
    }


def test_a_checkpoint_without_a_pod_gets_one_for_all_its_copies() -> None:
    a, b = reported("llama-step-300", "uid-1", shards=1), reported("llama-step-400", "uid-2", shards=1)
    plan = pvc.plan_verification(TARGET, a + b, [], NOW)
    assert [p["metadata"]["ownerReferences"][0]["uid"] for p in plan.create] == ["uid-1", "uid-2"]
    assert plan.create[0] == pvc.verifier_pod(TARGET, "llama-step-300", "uid-1", a)
    assert (plan.delete, plan.copy_states, plan.notes) == ((), {}, {})


def test_a_pod_at_work_is_waited_for_and_its_wait_explained() -> None:
    copies = reported()
    manifest = pvc.verifier_pod(TARGET, "llama-step-300", "uid-1", copies)
    unscheduled = {
        "phase": "Pending",
        "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes are available"}
        ],
    }
    plan = pvc.plan_verification(TARGET, copies, [pod_with(manifest, unscheduled)], NOW)
    assert (plan.create, plan.delete) == ((), ())
    name = manifest["metadata"]["name"]
    assert plan.notes == {
        "uid-1": f"verifying on claim 'pvc-backups': pod {name} is Pending (Unschedulable: 0/3 nodes are available)"
    }
    pulling = {"phase": "Pending", "containerStatuses": [{"state": {"waiting": {"reason": "ErrImagePull"}}}]}
    assert "(ErrImagePull)" in pvc.plan_verification(TARGET, copies, [pod_with(manifest, pulling)], NOW).notes["uid-1"]


def test_an_answer_of_all_good_copies_is_final_and_the_pod_goes() -> None:
    copies = reported(shards=1)
    manifest = pvc.verifier_pod(TARGET, "llama-step-300", "uid-1", copies)
    plan = pvc.plan_verification(TARGET, copies, [pod_with(manifest, ended("ooo"))], NOW)
    assert plan.copy_states == {("uid-1", c.key, c.sha256): "ok" for c in copies}
    assert plan.delete == (manifest["metadata"]["name"],)
    assert plan.create == ()


def test_a_missing_copy_is_looked_at_again_after_a_rest() -> None:
    copies = reported(shards=1)
    manifest = pvc.verifier_pod(TARGET, "llama-step-300", "uid-1", copies)
    name = manifest["metadata"]["name"]
    answered = pod_with(manifest, ended("omo"))
    # Just answered: the verdicts count, the pod stays (no tight loop of pods for a late copy).
    plan = pvc.plan_verification(TARGET, copies, [answered], NOW + timedelta(seconds=1))
    assert plan.copy_states[("uid-1", copies[1].key, copies[1].sha256)] == "missing"
    assert (plan.create, plan.delete) == ((), ())
    # The ok ones are no longer wanted: after the rest the pod goes and a new one reads only copy 1.
    rested = NOW + timedelta(seconds=RECHECK_SECONDS)
    plan = pvc.plan_verification(TARGET, [copies[1]], [answered], rested)
    assert plan.delete == (name,)
    (again,) = plan.create
    request = json.loads(again["spec"]["containers"][0]["env"][0]["value"])
    assert request == [[PATH, copies[1].key, copies[1].sha256, 10]]
    # The same request again (every copy was missing) waits until the old pod of that name is gone.
    plan = pvc.plan_verification(TARGET, copies, [pod_with(manifest, ended("mmm"))], rested)
    assert plan.delete == (name,)
    assert plan.create == ()
    assert pvc.plan_verification(TARGET, copies, [pod_with(manifest, {}, deleting=True)], rested).create == ()
    assert pvc.plan_verification(TARGET, copies, [], rested).create[0]["metadata"]["name"] == name


@pytest.mark.parametrize(
    ("status", "failure"),
    [
        (
            {
                "phase": "Failed",
                "reason": "DeadlineExceeded",
                "message": "Pod was active longer than 600s",
                "startTime": "2026-01-01T12:00:00Z",
            },
            "DeadlineExceeded, Pod was active longer than 600s",
        ),
        (
            {
                "phase": "Failed",
                "containerStatuses": [
                    {"state": {"terminated": {"reason": "Error", "exitCode": 1, "finishedAt": "2026-01-01T12:00:00Z"}}}
                ],
            },
            "Error, exit code 1",
        ),
        (ended("oo"), "its answer does not match its request"),  # three copies asked, two letters
        (ended("ooz"), "its answer does not match its request"),
    ],
)
def test_a_pod_without_an_answer_is_a_failure_retried_after_a_rest(status: dict[str, Any], failure: str) -> None:
    copies = reported(shards=1)
    manifest = pvc.verifier_pod(TARGET, "llama-step-300", "uid-1", copies)
    name = manifest["metadata"]["name"]
    plan = pvc.plan_verification(TARGET, copies, [pod_with(manifest, status)], NOW)
    assert plan.failures == ((name, failure),)
    assert plan.copy_states == {}
    assert (plan.create, plan.delete) == ((), ())
    assert "failed" in plan.notes["uid-1"]
    later = pvc.plan_verification(TARGET, copies, [pod_with(manifest, status)], NOW + timedelta(seconds=60))
    assert later.delete == (name,)


def test_pods_whose_work_is_no_longer_wanted_go() -> None:
    copies = reported(shards=1)
    running = pod_with(pvc.verifier_pod(TARGET, "llama-step-300", "uid-1", copies), {"phase": "Running"})
    failed_checkpoint = pvc.plan_verification(TARGET, [], [running], NOW)
    assert failed_checkpoint.delete == (running.name,)
    collector = pod_with(pvc.collector_pod(TARGET, "t-uid", [PATH], WRITER), {"phase": "Running"})
    assert pvc.plan_verification(TARGET, [], [collector], NOW).delete == ()  # not its kind of pod


def test_collection_marks_what_is_gone_and_retries_the_rest() -> None:
    other = "/checkpoints/llama/step-0000000400"
    both = dict.fromkeys([PATH, other], WRITER)
    plan = pvc.plan_collection(TARGET, "t-uid", both, [], NOW)
    (manifest,) = plan.create
    assert json.loads(manifest["spec"]["containers"][0]["env"][0]["value"]) == [PATH, other]
    done = pvc.plan_collection(TARGET, "t-uid", both, [pod_with(manifest, ended("dd"))], NOW)
    assert done.collected == {PATH, other}
    assert done.delete == (manifest["metadata"]["name"],)
    assert done.create == ()
    half = pvc.plan_collection(TARGET, "t-uid", both, [pod_with(manifest, ended("de"))], NOW)
    assert half.collected == {PATH}
    assert (half.delete, half.create) == ((), ())  # rests, then tries the failed one again
    later = pvc.plan_collection(
        TARGET, "t-uid", {other: WRITER}, [pod_with(manifest, ended("de"))], NOW + timedelta(minutes=1)
    )
    assert later.delete == (manifest["metadata"]["name"],)
    assert [json.loads(p["spec"]["containers"][0]["env"][0]["value"]) for p in later.create] == [[other]]


def test_anything_but_a_storage_pod_is_not_viewed() -> None:
    training = {"metadata": {"name": "x", "labels": {"trainer-name": "llama"}}, "spec": {"containers": [{}]}}
    assert pvc.view(training) is None
    assert pvc.view({"metadata": {"labels": {pvc.PURPOSE_LABEL: "other"}}, "spec": {"containers": [{}]}}) is None


def test_a_pod_this_controller_would_not_have_made_is_deleted_unread() -> None:
    copies = reported(shards=1)
    manifest = pvc.verifier_pod(TARGET, "llama-step-300", "uid-1", copies)
    forged_owner = json.loads(json.dumps(manifest))
    forged_owner["metadata"]["ownerReferences"][0]["uid"] = "someone-else"
    other_image = json.loads(json.dumps(manifest))
    other_image["spec"]["containers"][0]["image"] = "evil:latest"
    other_claim = json.loads(json.dumps(manifest))
    other_claim["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] = "elsewhere"
    for variant in (forged_owner, other_image, other_claim):
        variant["metadata"]["name"] = "forged"
        plan = pvc.plan_verification(TARGET, copies, [pod_with(variant, ended("ooo"))], NOW)
        assert plan.copy_states == {}  # its answer is not believed
        assert plan.delete == ("forged",)
        assert [p["metadata"]["name"] for p in plan.create] == [manifest["metadata"]["name"]]
    upgraded = replace(TARGET, image="trainer-operator:v2")
    assert (
        pvc.verifier_pod(upgraded, "llama-step-300", "uid-1", copies)["metadata"]["name"]
        != manifest["metadata"]["name"]
    )


def test_answers_count_only_for_copies_still_wanted() -> None:
    copies = reported(shards=1)
    manifest = pvc.verifier_pod(TARGET, "llama-step-300", "uid-1", copies)
    plan = pvc.plan_verification(TARGET, copies[:1], [pod_with(manifest, ended("mmm"))], NOW)
    assert set(plan.copy_states) == {("uid-1", copies[0].key, copies[0].sha256)}


def test_a_resting_pod_says_when_it_is_due_and_a_pod_stuck_terminating_is_forced() -> None:
    copies = reported(shards=1)
    manifest = pvc.verifier_pod(TARGET, "llama-step-300", "uid-1", copies)
    plan = pvc.plan_verification(TARGET, copies, [pod_with(manifest, ended("omo"))], NOW + timedelta(seconds=4))
    assert plan.recheck_after == pytest.approx(RECHECK_SECONDS - 4)
    failed = {"phase": "Failed", "reason": "Evicted", "startTime": "2026-01-01T12:00:00Z"}
    assert pvc.plan_verification(TARGET, copies, [pod_with(manifest, failed)], NOW).recheck_after == RECHECK_SECONDS
    stuck = pod_with(manifest, {"phase": "Running"}, deleting=True)  # deletion asked at 11:59:59
    assert pvc.plan_verification(TARGET, copies, [stuck], NOW).force_delete == ()
    later = NOW + timedelta(seconds=pvc.FORCE_AFTER_SECONDS)
    assert pvc.plan_verification(TARGET, copies, [stuck], later).force_delete == (manifest["metadata"]["name"],)


def test_a_directory_the_collector_could_not_delete_is_a_failure() -> None:
    other = "/checkpoints/llama/step-0000000400"
    both = dict.fromkeys([PATH, other], WRITER)
    (manifest,) = pvc.plan_collection(TARGET, "t-uid", both, [], NOW).create
    plan = pvc.plan_collection(TARGET, "t-uid", both, [pod_with(manifest, ended("de"))], NOW, rest_seconds=60)
    assert plan.failures == ((manifest["metadata"]["name"], f"could not delete {other} (its log says why)"),)
    assert plan.recheck_after == 60


# The adapter (claim_pods): what the plan decides to delete goes by the UID the plan saw.


class DeleteRecorder:
    def __init__(self) -> None:
        self.deleted: list[tuple[str, str, str | None, bool]] = []

    async def delete_core(
        self, kind: str, namespace: str, name: str, force: bool = False, uid: str | None = None
    ) -> str:
        self.deleted.append((kind, name, uid, force))
        return "deleting"


class StoragePods:
    def __init__(self, pods: list[dict[str, Any]]) -> None:
        self.pods = pods

    async def grouped(self, key: tuple[str, str]) -> list[dict[str, Any]]:
        return self.pods if key == (TARGET.namespace, TARGET.trainer) else []


def test_a_storage_pod_is_deleted_only_as_the_incarnation_the_plan_saw() -> None:
    copies = reported(shards=1)
    answered = json.loads(json.dumps(pvc.verifier_pod(TARGET, "llama-step-300", "uid-1", copies)))
    answered["metadata"]["uid"] = "pod-uid-7"
    answered["status"] = ended("ooo")
    kube = DeleteRecorder()
    pods = ClaimPods(
        Runtime(ControllerConfig(controller="checkpoint"), cast(Kube, kube)), cast(ObjectCache, StoragePods([answered]))
    )
    states, _, _ = asyncio.run(pods.read(TARGET, {"metadata": {"name": "llama", "namespace": "team"}}, tuple(copies)))
    assert set(states.values()) == {"ok"}  # the answer is read, then the pod goes ...
    assert kube.deleted == [("Pod", answered["metadata"]["name"], "pod-uid-7", False)]  # ... as that pod only

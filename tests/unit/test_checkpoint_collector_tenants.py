"""The checkpoint collector on a claim tenants share (issue 51): it runs as the user the training
pods wrote a checkpoint as, never as root, and neither it nor the verifier follows a symlink
another tenant planted, on a real filesystem."""

import asyncio
import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import pytest

from tests import users
from trainerop_checkpoint import pvc_pods as pvc
from trainerop_checkpoint import pvc_worker
from trainerop_checkpoint.claim_pods import ClaimPods
from trainerop_checkpoint.decide import Collect, Copy
from trainerop_common.api.checkpoint import ShardReport
from trainerop_common.cache import ObjectCache
from trainerop_common.config import ControllerConfig
from trainerop_common.kube import Kube
from trainerop_common.runtime import Body, Runtime
from trainerop_sdk.checkpoint import Checkpointer
from trainerop_sdk.kubeapi import ApiClient
from trainerop_sdk.layout import copy_key
from trainerop_sdk.storage import LocalLocation, NoFollowLocation

TARGET = pvc.Target("team", "llama", "pvc-backups", "trainer-operator:dev")
PATH = "/checkpoints/llama/step-0000000300"
OTHER = "/checkpoints/llama/step-0000000400"
NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
BLOB = b"weights of shard 0"


def shard(index: int, uid: int | None, gid: int | None = None) -> ShardReport:
    return ShardReport.model_validate(
        {"index": index, "sha256": "0" * 64, "size": 1, "copies": [copy_key(index, 0)]}
        | ({"writerUid": uid} if uid is not None else {})
        | ({"writerGid": gid} if gid is not None else {})
    )


@pytest.mark.parametrize(
    ("shards", "writer"),
    [
        ([shard(0, 1000, 100), shard(1, 1000, 100)], pvc.Writer(1000, 100)),
        ([shard(0, 1000, 0)], pvc.Writer(1000, pvc.NOBODY)),  # never root's group
        ([shard(0, 1000)], pvc.Writer(1000, pvc.NOBODY)),
        ([shard(0, 1000, 100), shard(1, None)], pvc.Writer(1000, 100)),  # an older writer's shard says nothing
        ([shard(0, 0, 0)], "wrote it as root (uid 0)"),
        ([shard(0, None), shard(1, None)], "no shard report says which user wrote it"),
        ([], "no shard report says which user wrote it"),
        ([shard(0, 1000), shard(1, 1001)], "written by several users (1000:None, 1001:None)"),
    ],
)
def test_the_collector_runs_as_the_checkpoints_one_non_root_writer(
    shards: list[ShardReport], writer: pvc.Writer | str
) -> None:
    found = pvc.writer_of(shards)
    if isinstance(writer, str):
        assert isinstance(found, str)
        assert writer in found
    else:
        assert found == writer


def test_each_writer_gets_its_own_collector_and_data_no_pod_may_delete_is_left() -> None:
    alice, bob = pvc.Writer(1000, 1000), pvc.Writer(2000, 2000)
    third = "/checkpoints/llama/step-0000000500"
    wanted: dict[str, pvc.Writer | str] = {PATH: alice, OTHER: bob, third: "written as root"}
    plan = pvc.plan_collection(TARGET, "t-uid", wanted, [], NOW)
    made = {
        (p["spec"]["securityContext"]["runAsUser"], p["spec"]["securityContext"]["runAsGroup"]): json.loads(
            p["spec"]["containers"][0]["env"][0]["value"]
        )
        for p in plan.create
    }
    assert made == {(1000, 1000): [PATH], (2000, 2000): [OTHER]}
    assert plan.left == {third: "written as root"}
    # The same paths as another user are another pod: a name never hides a changed identity.
    assert (
        pvc.collector_pod(TARGET, "t-uid", [PATH], alice)["metadata"]["name"]
        != (pvc.collector_pod(TARGET, "t-uid", [PATH], bob)["metadata"]["name"])
    )


@pytest.mark.parametrize(
    "security",
    [
        {"runAsNonRoot": False, "runAsUser": 0},  # an older release's root collector
        {"runAsNonRoot": True, "runAsUser": 2000, "runAsGroup": 2000},  # not the writer of its paths
    ],
    ids=["root", "another user"],
)
def test_a_collector_not_running_as_its_directories_writer_is_not_believed(security: dict[str, Any]) -> None:
    writer = pvc.Writer(1000, 1000)
    body = pvc.collector_pod(TARGET, "t-uid", [PATH], writer) | {"status": {"phase": "Succeeded"}}
    body["spec"]["securityContext"] = security
    body["status"]["containerStatuses"] = [{"state": {"terminated": {"exitCode": 0, "message": "d"}}}]
    pod = pvc.view(body)
    assert pod is not None
    plan = pvc.plan_collection(TARGET, "t-uid", {PATH: writer}, [pod], NOW)
    assert plan.collected == frozenset()  # its answer is not believed
    assert plan.delete == (pod.name,)
    assert plan.create == ()  # its name is taken until it is gone


# The adapter: the writers come from the Checkpoints, what cannot be collected is said once.


class Recorder:
    """The API server's pods as the controller sees them: what it created, at once."""

    def __init__(self, checkpoints: dict[str, dict[str, Any]]) -> None:
        self.created: list[dict[str, Any]] = []
        self.checkpoints = checkpoints

    async def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        return self.checkpoints.get(name) if (kind, namespace) == ("Checkpoint", "team") else None

    async def grouped(self, key: tuple[str, str]) -> list[dict[str, Any]]:
        return self.created

    async def create_core(self, body: dict[str, Any]) -> bool:
        self.created.append(body)
        return True

    async def delete_core(
        self, kind: str, namespace: str, name: str, force: bool = False, uid: str | None = None
    ) -> str:
        return "deleting"


def checkpoint(name: str, path: str, *shards: ShardReport) -> dict[str, Any]:
    spec = {"trainer": "llama", "epoch": 0, "step": 1, "path": path, "shardCount": max(len(shards), 1)}
    spec["shards"] = [s.to_k8s() for s in shards]
    return {
        "apiVersion": "trainer.operator.kubeflow.org/v1alpha1",
        "kind": "Checkpoint",
        "metadata": {"name": name},
        "spec": spec,
    }


@pytest.mark.parametrize("given", [True, False], ids=["the controller's Checkpoints", "read"])
def test_a_root_written_checkpoint_is_left_on_the_claim_and_said_once(given: bool) -> None:
    raw = {
        "llama-step-300": checkpoint("llama-step-300", PATH, shard(0, 1000, 1000)),
        "llama-step-400": checkpoint("llama-step-400", OTHER, shard(0, 0, 0)),
    }
    kube, events = Recorder(raw), []

    def post(body: Body, type_: str, reason: str, message: str) -> None:
        events.append((type_, reason, message))

    runtime = Runtime(ControllerConfig(controller="checkpoint"), cast(Kube, kube), post_event=post)
    pods = ClaimPods(runtime, cast(ObjectCache, kube))
    items = (Collect("llama-step-300", PATH, {}), Collect("llama-step-400", OTHER, {}))
    trainer = {"metadata": {"name": "llama", "namespace": "team", "uid": "t-uid"}}
    for _ in range(2):
        gone, _again = asyncio.run(pods.delete(TARGET, trainer, items, raw if given else None))
        assert gone == set()
    (pod,) = kube.created  # one collector, as the writer of the one it may delete
    assert json.loads(pod["spec"]["containers"][0]["env"][0]["value"]) == [PATH]
    assert pod["spec"]["securityContext"]["runAsUser"] == 1000
    ((type_, reason, message),) = events  # said once, not on every reconcile
    assert (type_, reason) == ("Warning", "CheckpointDataLeft")
    assert "llama-step-400" in message
    assert "as root" in message


def test_the_sdk_reports_who_wrote_the_copies_on_a_claim_only() -> None:
    api = cast(ApiClient, None)
    on_claim = Checkpointer(api, "llama", "/checkpoints/llama")._file_owner()
    assert on_claim == {"writerUid": os.geteuid(), "writerGid": os.getegid()}
    assert ShardReport.model_validate({"index": 0, "sha256": "0" * 64, "size": 1, "copies": ["c"]} | on_claim)
    assert Checkpointer(api, "llama", "s3://bucket/team/llama")._file_owner() == {}


# On a real filesystem: a claim seen at tmp_path/claim, another tenant's data at tmp_path/victim.


@pytest.fixture
def claim(tmp_path: Path) -> Path:
    victim = tmp_path / "victim" / "step-0000000300"
    LocalLocation(str(victim)).put(copy_key(0, 0), BLOB)
    (tmp_path / "claim").mkdir()
    return tmp_path / "claim"


def plant(claim: Path, case: str) -> None:
    """The llama checkpoint on the claim, with another tenant's symlink planted as ``case`` says."""
    victim = claim.parent / "victim"
    ours = claim / "llama" / "step-0000000300"
    if case == "dir":  # /checkpoints/llama -> the victim's directory
        (claim / "llama").symlink_to(victim)
        return
    if case == "checkpoint":  # /checkpoints/llama/step-... -> the victim's checkpoint
        (claim / "llama").mkdir()
        ours.symlink_to(victim / "step-0000000300")
        return
    if case == "dangling":
        (claim / "llama").mkdir()
        ours.symlink_to(claim / "nowhere")
        return
    LocalLocation(str(ours)).put(copy_key(0, 0), BLOB)
    if case == "inside":  # links inside the checkpoint to a directory and a file outside it
        (ours / "out").symlink_to(victim)
        (ours / "shard-00000" / "copy-9").symlink_to(victim / "step-0000000300" / copy_key(0, 0))


def victim_intact(claim: Path) -> bool:
    return (claim.parent / "victim" / "step-0000000300" / copy_key(0, 0)).read_bytes() == BLOB


@pytest.mark.parametrize(
    ("case", "letter"),
    [("dir", "e"), ("checkpoint", "e"), ("dangling", "e"), ("inside", "d"), ("plain", "d")],
)
def test_the_collector_deletes_only_real_directories_never_through_a_symlink(
    claim: Path, case: str, letter: str
) -> None:
    plant(claim, case)
    delete = lambda p: pvc_worker.on_claim(p, str(claim)).delete_all()  # noqa: E731
    assert pvc_worker.collect(json.dumps([PATH]), delete) == letter
    assert victim_intact(claim)
    if letter == "d":
        assert not (claim / "llama" / "step-0000000300").exists()
        assert (claim / "llama").is_dir()  # the Trainer's directory stays


@pytest.mark.parametrize(
    ("case", "key", "letter"),
    [
        ("plain", copy_key(0, 0), "o"),
        ("plain", copy_key(0, 1), "m"),
        ("dir", copy_key(0, 0), "u"),  # the victim's copy, reached through a symlinked directory: not read
        ("checkpoint", copy_key(0, 0), "u"),
        ("dangling", copy_key(0, 0), "u"),
        ("inside", "shard-00000/copy-9", "u"),  # a symlink as the copy
        ("inside", "out/step-0000000300/shard-00000/copy-0", "u"),  # a symlinked directory inside
    ],
)
def test_the_verifier_reads_no_copy_through_a_symlink(claim: Path, case: str, key: str, letter: str) -> None:
    plant(claim, case)
    copy = Copy("llama-step-300", "uid-1", PATH, key, hashlib.sha256(BLOB).hexdigest(), len(BLOB))
    assert pvc_worker.check(pvc.encode_request([copy]), str(claim)) == letter


def test_a_copy_that_is_not_a_regular_file_is_unreadable_without_waiting(claim: Path) -> None:
    plant(claim, "plain")
    os.mkfifo(claim / "llama" / "step-0000000300" / "shard-00000" / "copy-1")  # would block a plain open
    copy = Copy("llama-step-300", "uid-1", PATH, copy_key(0, 1), "0" * 64, 1)
    assert pvc_worker.check(pvc.encode_request([copy]), str(claim)) == "u"


@pytest.mark.parametrize("path", ["/elsewhere/x", "/checkpoints/llama/../victim", "/checkpoints/llama//x"])
def test_a_path_that_could_leave_the_claim_is_refused(claim: Path, path: str) -> None:
    with pytest.raises(ValueError, match="is not"):
        NoFollowLocation(str(claim), path.replace("/checkpoints", str(claim), 1))


def test_reads_without_following_agree_with_the_writers_on_a_plain_checkpoint(claim: Path) -> None:
    plant(claim, "plain")
    location = pvc_worker.on_claim(PATH, str(claim))
    assert location.get(copy_key(0, 0)) == BLOB
    stored = location.stored_checksum(copy_key(0, 0))
    assert stored is not None
    assert stored.size == len(BLOB)
    assert location.get(copy_key(0, 5)) is None
    assert location.delete_all() == 1
    assert location.delete_all() == 0  # already gone


# As the pods run: the writer's uid deletes what it wrote; another non-root user cannot.


def as_user(uid: int, run: Callable[[], str]) -> str:
    """``run()`` in a child process switched to ``uid`` (and that group, no other): its answer."""
    return users.as_user(uid, uid, run)


@pytest.fixture
def shared() -> Iterator[Path]:
    """A claim's root any user may write (and reach: not under root's own pytest directory)."""
    with tempfile.TemporaryDirectory() as folder:
        os.chmod(folder, 0o777)
        yield Path(folder)


@pytest.mark.skipif(os.geteuid() != 0, reason="switching users takes root")
def test_a_non_root_collector_deletes_what_its_user_wrote(shared: Path) -> None:
    ours = shared / "llama" / "step-0000000300"

    def write() -> str:
        LocalLocation(str(ours)).put(copy_key(0, 0), BLOB)
        return "written"

    def collect() -> str:
        return pvc_worker.collect(json.dumps([PATH]), lambda p: pvc_worker.on_claim(p, str(shared)).delete_all())

    assert as_user(1000, write) == "written"
    assert as_user(1001, collect) == "e"  # not its files
    assert (ours / copy_key(0, 0)).read_bytes() == BLOB
    assert as_user(1000, collect) == "d"
    assert not ours.exists()

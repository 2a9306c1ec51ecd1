"""The checkpoint state machine: quorum, timeouts, retention and resume (tables and properties)."""

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.factories import trainer_spec
from trainerop_checkpoint.decide import (
    FORBIDDEN,
    CheckpointView,
    Copy,
    CopyState,
    Decision,
    Observed,
    Storage,
    copies_to_read,
    decide,
    judge_storage,
    quorum,
    stored_copy_state,
)
from trainerop_common.api import Checkpoint
from trainerop_common.api.trainer import TrainerSpec
from trainerop_common.checkpoint_layout import Digest, StoredChecksum, missing_credential_keys
from trainerop_sdk.layout import checkpoint_path, copy_key

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
S3 = "s3://ckpt/runs"
DIR = f"{S3}/ns/t"


def spec(topology: dict[str, Any] | None = None, **checkpoint: Any) -> TrainerSpec:
    ckpt = {"bucket": S3, "credentialsSecret": "creds", "maxRetention": 2, "intervalMinutes": 10, **checkpoint}
    return trainer_spec(epochs=3, image="i", topology=topology or {"workers": 2}, checkpoint=ckpt)


def view(
    step: int,
    shards: int = 2,
    replication: int = 3,
    reported: int | None = None,
    phase: str | None = None,
    age: float = 5,
    path: str | None = None,
    trainer: str = "t",
) -> CheckpointView:
    reported = shards if reported is None else reported
    body = {
        "spec": {
            "trainer": trainer,
            "epoch": 1,
            "step": step,
            "path": path or checkpoint_path(DIR, step),
            "shardCount": shards,
            "replicationFactor": replication,
            "shards": [
                {"index": i, "sha256": "a" * 64, "size": 10, "copies": [copy_key(i, r) for r in range(replication)]}
                for i in range(reported)
            ],
        },
        "status": {"phase": phase, "commitTime": "2026-01-01T11:00:00Z"} if phase else None,
    }
    created = (NOW - timedelta(seconds=age)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return CheckpointView(f"t-step-{step}", f"uid-{step}", created, Checkpoint.model_validate(body))


SHA = "a" * 64


def good(v: CheckpointView, bad: dict[str, CopyState] | None = None) -> dict[tuple[str, str, str], CopyState]:
    """Every copy of ``v`` verified, except the copies in ``bad``."""
    out: dict[tuple[str, str, str], CopyState] = {}
    for shard in v.checkpoint.spec.shards or ():
        for key in shard.copies:
            out[(v.uid, key, shard.sha256)] = (bad or {}).get(key, "ok")
    return out


def observed(
    views: list[CheckpointView], states: dict[tuple[str, str, str], CopyState] | None = None, **kw: Any
) -> Observed:
    return Observed(
        namespace="ns",
        trainer="t",
        spec=kw.pop("trainer_spec", spec()),
        generation=4,
        now=kw.pop("now", NOW),
        checkpoints=views,
        copy_states=states or {},
        **kw,
    )


def observe(
    views: list[CheckpointView], states: dict[tuple[str, str, str], CopyState] | None = None, **kw: Any
) -> Decision:
    return decide(observed(views, states, **kw))


def to_read(
    views: list[CheckpointView], states: dict[tuple[str, str, str], CopyState] | None = None, **kw: Any
) -> tuple[Copy, ...]:
    return copies_to_read(observed(views, states, **kw))


def test_without_checkpointing_the_controller_says_nothing() -> None:
    """Not asked: no section and no condition (what it said of earlier checkpointing goes)."""
    d = observe([], trainer_spec=trainer_spec())
    assert (d.status, d.conditions, d.problem) == ({}, (), None)


def test_before_any_commit_pods_start_from_scratch_with_the_storage_settings() -> None:
    d = observe([])
    section = d.status["checkpoint"]
    assert d.conditions[0].reason == "NoCheckpointYet"
    env = {e["name"]: e for e in section["contribution"]["pod"]["env"]}
    assert env["CHECKPOINT_DIR"]["value"] == DIR
    assert env["RESUME_FROM"]["value"] == ""
    assert env["CHECKPOINT_REPLICATION_FACTOR"]["value"] == "1"
    assert "CHECKPOINT_SHARDS" not in env  # the trainer sets it: it knows the pods it creates
    assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"] == {
        "secretKeyRef": {"name": "creds", "key": "AWS_SECRET_ACCESS_KEY"}
    }
    assert env["AWS_REGION"]["valueFrom"]["secretKeyRef"]["optional"] is True
    # The endpoint the controller verified with is the one the pods write to.
    assert env["AWS_ENDPOINT_URL_S3"]["valueFrom"]["secretKeyRef"]["optional"] is True
    assert section["contribution"]["generation"] == 4


KEYS = {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"}


OK_SECRET = {**KEYS, "AWS_ENDPOINT_URL": "http://s3:8333"}
# A bucket stored before the CRD refused '.'-prefixed segments cannot be built through the model.
BAD_BUCKET = spec().checkpoint.model_copy(update={"bucket": "s3://b/../other"})  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("bucket", "claim_found", "secret", "ready", "reason", "claim"),
    [
        (S3, False, OK_SECRET, True, "", ""),
        (S3, False, None, False, "CredentialsNotFound", ""),
        (S3, False, FORBIDDEN, False, "CredentialsNotReadable", ""),  # not bound in this namespace (yet)
        (S3, False, KEYS, False, "InvalidCredentials", ""),
        ("pvc-backups", True, None, True, "", "pvc-backups"),
        ("pvc-backups", False, None, False, "StorageNotFound", ""),
        (None, False, OK_SECRET, False, "InvalidBucket", ""),
    ],
)
def test_whether_the_storage_can_be_used(
    bucket: str | None, claim_found: bool, secret: Mapping[str, str] | None, ready: bool, reason: str, claim: str
) -> None:
    ckpt = BAD_BUCKET if bucket is None else spec(bucket=bucket).checkpoint
    assert ckpt is not None
    storage = judge_storage(ckpt, "ns", claim_found, secret)
    assert (storage.ready, storage.reason, storage.claim) == (ready, reason, claim)
    assert ready or storage.message  # a problem always says what to fix


@pytest.mark.parametrize(
    ("secret", "missing"),
    [
        ({**KEYS, "AWS_ENDPOINT_URL": "http://s3:8333"}, []),
        ({**KEYS, "AWS_ENDPOINT_URL_S3": "http://s3:8333"}, []),
        (KEYS, ["AWS_ENDPOINT_URL"]),  # never AWS's endpoint by guess
        ({"AWS_ACCESS_KEY_ID": "k", "AWS_ENDPOINT_URL": "http://s3:8333"}, ["AWS_SECRET_ACCESS_KEY"]),
        ({**KEYS, "AWS_ACCESS_KEY_ID": "", "AWS_ENDPOINT_URL": "x"}, ["AWS_ACCESS_KEY_ID"]),
        ({}, ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL"]),
    ],
)
def test_what_a_credentials_secret_lacks(secret: dict[str, str], missing: list[str]) -> None:
    assert missing_credential_keys(secret) == missing


def test_a_pvc_bucket_is_mounted_at_checkpoints() -> None:
    d = observe([], trainer_spec=spec(bucket="pvc-backups", credentialsSecret=None))
    pod = d.status["checkpoint"]["contribution"]["pod"]
    assert pod["volumes"] == [{"name": "checkpoints", "persistentVolumeClaim": {"claimName": "pvc-backups"}}]
    assert pod["volumeMounts"] == [{"name": "checkpoints", "mountPath": "/checkpoints"}]
    assert {e["name"]: e.get("value") for e in pod["env"]}["CHECKPOINT_DIR"] == "/checkpoints/t"


@pytest.mark.parametrize(
    ("reason", "recheck"),
    [
        ("StorageNotFound", None),  # the claims are watched: their change brings the next look
        ("CredentialsNotFound", 10.0),  # Secrets are not: looked at again
        ("CredentialsNotReadable", 10.0),
        ("InvalidCredentials", 10.0),
    ],
)
def test_missing_storage_closes_the_gate_and_says_what_to_do(reason: str, recheck: float | None) -> None:
    d = observe([], storage=Storage(False, reason, "what is missing and what to do"))
    (c,) = d.conditions
    assert (c.status, c.reason) == ("False", reason)
    assert d.problem == c
    assert d.requeue_after == recheck
    # The section goes (an applied empty one would be null, which the API server refuses).
    assert d.status == {}


@pytest.mark.parametrize(
    ("reported", "bad", "phase", "message"),
    [
        (1, {}, "Pending", "1 of 2 shards reported"),
        (2, {copy_key(1, 0): "missing", copy_key(1, 1): "mismatch"}, "Staging", "1 of 2 shards have 2 verified"),
        (2, {copy_key(0, 2): "mismatch", copy_key(1, 0): "missing"}, "Committed", "at least 2 of 3"),
        (2, {}, "Committed", "every shard"),
    ],
)
def test_quorum_needs_a_majority_of_verified_copies_of_every_shard(
    reported: int, bad: dict[str, CopyState], phase: str, message: str
) -> None:
    v = view(10, reported=reported)
    d = observe([v], good(v, bad))
    status = d.checkpoints[v.name]
    assert status["phase"] == phase
    assert message in status["message"]
    if phase == "Staging":
        assert "shard 1 shard-00001/copy-0: missing" in status["message"]
        assert {c.key for c in to_read([v], good(v, bad))} == {copy_key(1, 0), copy_key(1, 1)}  # read again later
        assert d.requeue_after == 10.0


def test_a_commit_becomes_the_resume_point_and_is_announced() -> None:
    v = view(10)
    d = observe([v], good(v))
    section = d.status["checkpoint"]
    assert (section["latest"], section["latestStep"], section["resumeFrom"]) == (v.name, 10, checkpoint_path(DIR, 10))
    env = {e["name"]: e.get("value") for e in section["contribution"]["pod"]["env"]}
    assert env["RESUME_FROM"] == checkpoint_path(DIR, 10)
    assert d.conditions[0].reason == "Resumable"
    assert d.events[0][:2] == ("Normal", "CheckpointCommitted")


def test_no_quorum_within_the_timeout_fails_and_is_never_resumed_from() -> None:
    old = view(10, reported=1, age=601)
    d = observe([old])
    assert d.checkpoints[old.name]["phase"] == "Failed"
    assert d.checkpoints[old.name]["reason"] == "QuorumTimeout"
    assert "latest" not in d.status["checkpoint"]
    assert d.events[0][:2] == ("Warning", "CheckpointFailed")


def test_the_timeout_is_waited_for() -> None:
    young = view(10, reported=1, age=100)
    d = observe([young])
    assert d.requeue_after == pytest.approx(500)


def test_a_path_outside_the_trainers_directory_fails_and_its_data_is_never_touched() -> None:
    rogue = view(10, path="s3://ckpt/runs/ns/other/step-0000000010")
    newer = view(20, phase="Committed")
    d = observe([rogue, newer], good(rogue))
    assert d.checkpoints[rogue.name]["reason"] == "InvalidPath"
    assert not to_read([rogue, newer], good(rogue))
    assert all(c.checkpoint != rogue.name for c in d.collect)


def test_only_this_trainers_checkpoints_count() -> None:
    other = view(10, phase="Committed", trainer="u")
    d = observe([other])
    assert "latest" not in d.status["checkpoint"]


def test_retention_keeps_the_newest_and_collects_older_commits_and_stale_failures() -> None:
    views = [
        view(10, phase="Committed"),
        view(15, phase="Failed"),
        view(20, phase="Committed"),
        view(30, phase="Committed"),
        view(40, reported=1),  # still being written: neither kept nor collected
    ]
    d = observe(views)
    collected = {c.checkpoint: c.status for c in d.collect}
    assert set(collected) == {"t-step-10", "t-step-15"}
    assert collected["t-step-10"]["phase"] == "GarbageCollected"
    assert collected["t-step-10"]["collectTime"]
    assert collected["t-step-15"]["phase"] == "Failed"  # a failure stays a failure; its data goes
    assert d.status["checkpoint"]["latest"] == "t-step-30"
    assert d.status["checkpoint"]["committed"] == 2


@pytest.mark.parametrize(
    ("trainer_phase", "start_age_minutes", "overdue", "reason"),
    [
        ("Pending", 60, "False", "NotRunning"),
        ("Running", 5, "False", "OnSchedule"),
        ("Running", 21, "True", "NoRecentCommit"),
    ],
)
def test_no_commit_for_twice_the_interval_is_overdue(
    trainer_phase: str, start_age_minutes: int, overdue: str, reason: str
) -> None:
    start = (NOW - timedelta(minutes=start_age_minutes)).strftime("%Y-%m-%dT%H:%M:%SZ")
    d = observe([], trainer_phase=trainer_phase, start_time=start)
    c = d.conditions[1]
    assert (c.type, c.status, c.reason) == ("CheckpointOverdue", overdue, reason)
    if reason == "OnSchedule":
        assert d.requeue_after == pytest.approx(15 * 60)
    if overdue == "True":  # the same message a minute later: a resync makes no write
        later = observe([], trainer_phase=trainer_phase, start_time=start, now=NOW + timedelta(minutes=1))
        assert later.conditions[1].message == c.message


def test_on_a_claim_copies_are_verified_once_every_shard_is_reported_and_the_wait_is_explained() -> None:
    claim = Storage(claim="pvc-backups")
    half = view(10, reported=1)
    d = observe([half], storage=claim)
    assert not to_read([half], storage=claim)  # one pod reads them all when the last shard is in
    assert d.checkpoints[half.name]["phase"] == "Pending"
    full = view(10)
    assert len(to_read([full], storage=claim)) == 6
    note = {full.uid: "verifying on claim 'pvc-backups': pod p is Pending (Unschedulable: 0/1 nodes are available)"}
    d = observe([full], storage=claim, notes=note)
    assert d.checkpoints[full.name]["message"].endswith("; " + note[full.uid])
    assert observe([full], good(full), storage=claim, notes=note).checkpoints[full.name]["phase"] == "Committed"


STATES: list[CopyState] = ["ok", "missing", "mismatch"]
states = st.sampled_from(STATES)


@settings(max_examples=300, deadline=None)
@given(
    shards=st.integers(1, 4),
    replication=st.integers(1, 5),
    data=st.data(),
)
def test_property_commit_iff_every_shard_has_a_majority(shards: int, replication: int, data: st.DataObject) -> None:
    v = view(10, shards=shards, replication=replication)
    grid = {(s, r): data.draw(states) for s in range(shards) for r in range(replication)}
    given = {(v.uid, copy_key(s, r), SHA): state for (s, r), state in grid.items()}
    d = observe([v], given)
    majority = all(sum(grid[(s, r)] == "ok" for r in range(replication)) >= quorum(replication) for s in range(shards))
    assert (d.checkpoints[v.name]["phase"] == "Committed") == majority
    weakest = min(sum(grid[(s, r)] == "ok" for r in range(replication)) for s in range(shards))
    assert d.checkpoints[v.name]["committedReplicas"] == weakest


@settings(max_examples=200, deadline=None)
@given(
    phases=st.lists(st.sampled_from(["Committed", "Failed", "GarbageCollected", None]), min_size=0, max_size=8),
    retention=st.integers(1, 4),
)
def test_property_retention_never_collects_what_it_keeps(phases: list[str | None], retention: int) -> None:
    views = [view(10 * (i + 1), phase=p, reported=1 if p is None else 2) for i, p in enumerate(phases)]
    d = observe(views, trainer_spec=spec(maxRetention=retention))
    committed = [v.name for v, p in zip(views, phases, strict=True) if p == "Committed"]
    kept, older = committed[-retention:], committed[:-retention]
    collected = {c.checkpoint for c in d.collect if c.status["phase"] == "GarbageCollected"}
    assert collected == set(older)
    assert not collected & set(kept)
    assert d.status["checkpoint"].get("latest") == (committed[-1] if committed else None)
    assert d.status["checkpoint"]["committed"] == len(kept)


def test_quorum_is_a_majority() -> None:
    assert [quorum(r) for r in range(1, 8)] == [1, 2, 2, 3, 3, 4, 4]


def test_a_report_cannot_lower_the_bar_by_repeating_a_copy_or_claiming_fewer() -> None:
    trainer3 = spec(topology={"workers": 2, "replicationFactor": 3})
    repeated = view(10, shards=1, replication=3)
    assert repeated.checkpoint.spec.shards is not None
    repeated.checkpoint.spec.shards[0].copies = [copy_key(0, 0)] * 3
    d = observe([repeated], {(repeated.uid, copy_key(0, 0), SHA): "ok"}, trainer_spec=trainer3)
    assert d.checkpoints[repeated.name]["phase"] == "Staging"
    assert d.checkpoints[repeated.name]["committedReplicas"] == 1
    fewer = view(20, shards=1, replication=1)  # "1 copy is all there is" on a Trainer that asks for 3
    d = observe([fewer], good(fewer), trainer_spec=trainer3)
    assert d.checkpoints[fewer.name]["phase"] == "Staging"
    assert "0 of 1 shards have 2 verified copies" in d.checkpoints[fewer.name]["message"]


def test_the_published_resume_point_is_not_collected_until_the_new_one_is_out() -> None:
    views = [view(10, phase="Committed"), view(20, phase="Committed"), view(30, phase="Committed")]
    d = observe(views, trainer_spec=spec(maxRetention=1), published="t-step-20")
    assert {c.checkpoint for c in d.collect} == {"t-step-10"}
    assert d.status["checkpoint"]["latest"] == "t-step-30"


def test_an_earlier_trainers_checkpoints_do_not_count() -> None:
    old = view(10, phase="Committed")
    old = CheckpointView(old.name, old.uid, old.created, old.checkpoint, owner_uids=("uid-of-the-old-trainer",))
    mine = view(5, phase="Committed")
    mine = CheckpointView(mine.name, mine.uid, mine.created, mine.checkpoint, owner_uids=("uid-now",))
    d = observe([old, mine], trainer_uid="uid-now")
    assert d.status["checkpoint"]["latest"] == "t-step-5"


@pytest.mark.parametrize(
    ("found", "verdict"),
    [
        (None, "missing"),
        (Digest("abc", 3), "ok"),
        (Digest("abc", 4), "mismatch"),
        (Digest("abd", 3), "mismatch"),
    ],
)
def test_a_copy_is_ok_only_with_the_reported_hash_and_size(found: Digest | None, verdict: str) -> None:
    from trainerop_checkpoint.decide import copy_state

    assert copy_state(found, "abc", 3) == verdict


PARTS = "SDVxpu2ToDLAnjC47+zayOSqIoJ/+lQvLjGp0+5iERs=-3"
WHOLE = Copy("c", "uid", "s3://b/p", "shard-00000/copy-0", "ab" * 32, 10)
MULTIPART = Copy("c", "uid", "s3://b/p", "shard-00000/copy-0", "ab" * 32, 10, PARTS)


@pytest.mark.parametrize(
    ("stored", "copy", "verdict"),
    [
        (None, WHOLE, "missing"),
        (StoredChecksum(10, sha256="ab" * 32), WHOLE, "ok"),  # S3 checked the data against it: not read
        (StoredChecksum(10, parts_sha256=PARTS), MULTIPART, "ok"),
        (StoredChecksum(10), WHOLE, None),  # nothing kept: read it
        (StoredChecksum(10, parts_sha256=PARTS), WHOLE, None),  # the writer reported no parts checksum
        (StoredChecksum(10, sha256="cd" * 32), WHOLE, None),  # differs: read before calling it a mismatch
        (StoredChecksum(10, parts_sha256=PARTS.replace("-3", "-4")), MULTIPART, None),  # another part size
        (StoredChecksum(11, sha256="ab" * 32), WHOLE, None),
    ],
)
def test_a_copy_is_ok_by_its_stored_checksum_only_when_that_is_what_its_writer_reported(
    stored: StoredChecksum | None, copy: Copy, verdict: str | None
) -> None:
    assert stored_copy_state(stored, copy) == verdict

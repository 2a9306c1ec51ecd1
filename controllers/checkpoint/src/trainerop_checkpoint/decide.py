"""The checkpoint controller's decision core: pure, table- and property-tested, no I/O.

A Checkpoint moves Pending (shards still being reported) -> Staging (every shard reported, copies
being verified) -> Committed (every shard has a majority of verified copies) -> GarbageCollected
(older than the newest ``maxRetention`` committed ones: data deleted, object kept as a record).
One that does not commit within ``commitTimeoutSeconds`` of its creation, or that points outside
its Trainer's checkpoint directory, is Failed and never resumed from. The Trainer's
``status.checkpoint`` names the latest committed checkpoint and contributes ``RESUME_FROM`` and
the storage settings to the pods created from then on (DESIGN §3, §5, §6).
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from trainerop_common.api import Checkpoint, Contribution, PodContribution
from trainerop_common.api.base import EnvVar
from trainerop_common.api.trainer import TrainerSpec
from trainerop_common.checkpoint_layout import MOUNT, checkpoint_dir, checkpoint_path, copy_key
from trainerop_common.clock import parse_time, rfc3339
from trainerop_common.conditions import Desired
from trainerop_common.contracts import has_master

CONDITION = "CheckpointReady"
OVERDUE = "CheckpointOverdue"
CONDITIONS = (CONDITION, OVERDUE)
OWNED_FIELDS = ("checkpoint",)
CHECKPOINT_FIELDS = ("phase", "committedReplicas", "verifiedShards", "reason", "message", "commitTime", "collectTime")
VOLUME = "checkpoints"
S3_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_REGION")
REQUIRED_S3_KEYS = S3_KEYS[:2]
RECHECK_SECONDS = 10.0  # a missing or bad copy is read again this often until the timeout

Verdict = Literal["ok", "missing", "mismatch", "unreadable"]


def copy_verdict(found: tuple[str, int] | None, sha256: str, size: int) -> Verdict:
    """A copy read back (its sha256 and size, None when absent) against what its writer reported."""
    if found is None:
        return "missing"
    return "ok" if found == (sha256, size) else "mismatch"


def quorum(replication: int) -> int:
    """A majority of a shard's copies."""
    return replication // 2 + 1


@dataclass(frozen=True)
class CheckpointView:
    name: str
    uid: str
    created: str  # metadata.creationTimestamp
    checkpoint: Checkpoint
    owner_uids: tuple[str, ...] = ()  # metadata.ownerReferences[].uid

    @property
    def phase(self) -> str | None:
        return self.checkpoint.status.phase if self.checkpoint.status else None


@dataclass(frozen=True)
class Storage:
    """What the adapter found out about the Trainer's checkpoint storage."""

    ready: bool = True
    reason: str = ""
    message: str = ""
    claim: str = ""  # a PersistentVolumeClaim: copies are read by pods that mount it, once every shard is reported


@dataclass(frozen=True)
class Copy:
    """A copy to read and check against what its writer reported."""

    checkpoint: str
    uid: str
    path: str
    key: str
    sha256: str
    size: int


@dataclass(frozen=True)
class Collect:
    """Data to delete, and the checkpoint status to record once it is gone."""

    checkpoint: str
    path: str
    status: dict[str, Any]


@dataclass(frozen=True)
class Observed:
    namespace: str
    trainer: str
    spec: TrainerSpec
    generation: int
    now: datetime
    checkpoints: Sequence[CheckpointView] = ()
    # (checkpoint uid, copy key, reported sha256) -> what reading the copy found
    verdicts: Mapping[tuple[str, str, str], Verdict] = field(default_factory=dict)
    storage: Storage = field(default_factory=Storage)
    trainer_phase: str | None = None
    start_time: str | None = None  # status.progress.startTime
    trainer_uid: str = ""  # Checkpoints owned by another (earlier) Trainer of the same name do not count
    published: str | None = None  # status.checkpoint.latest as pods may have read it
    notes: Mapping[str, str] = field(default_factory=dict)  # checkpoint uid -> what its verification waits for


@dataclass(frozen=True)
class Decision:
    status: dict[str, Any]
    conditions: tuple[Desired, ...]
    checkpoints: Mapping[str, dict[str, Any]] = field(default_factory=dict)  # name -> status to apply
    verify: tuple[Copy, ...] = ()
    collect: tuple[Collect, ...] = ()
    events: tuple[tuple[str, str, str], ...] = ()
    requeue_after: float | None = None
    problem: Desired | None = None


@dataclass(frozen=True)
class Judged:
    """One checkpoint's state as decided now."""

    view: CheckpointView
    status: dict[str, Any]
    verify: tuple[Copy, ...] = ()
    due: float | None = None  # seconds until its commit timeout

    @property
    def phase(self) -> str:
        return str(self.status["phase"])


def judge(view: CheckpointView, expected_dir: str, obs: Observed) -> Judged:
    """The phase of one checkpoint from its reports and the verdicts on its copies."""
    spec = view.checkpoint.spec
    if view.phase in ("Committed", "GarbageCollected", "Failed"):
        return Judged(view, _current(view))  # final (collection of a committed one is decided by retention)
    expected = checkpoint_path(expected_dir, spec.step)
    if spec.path.rstrip("/") != expected:
        return Judged(
            view,
            {
                "phase": "Failed",
                "reason": "InvalidPath",
                "message": f"spec.path {spec.path!r} is not this Trainer's path for step {spec.step} ({expected!r}); "
                "the checkpoint is never resumed from and its data is left alone",
            },
        )
    # The quorum counts copies the Trainer asks for (topology.replicationFactor), each at its own
    # key: a report cannot lower the bar by claiming fewer copies or listing one copy twice.
    copies = max(obs.spec.topology.replication_factor, spec.replication_factor)
    need = quorum(copies)
    reports = {s.index: s for s in spec.shards or ()}
    verify: list[Copy] = []
    verified_shards, weakest, problems = 0, copies, []
    for index in range(spec.shard_count):
        report = reports.get(index)
        if report is None:
            weakest = 0
            continue
        good = 0
        for key in sorted(set(report.copies) & {copy_key(index, r) for r in range(copies)}):
            verdict = obs.verdicts.get((view.uid, key, report.sha256))
            if verdict == "ok":
                good += 1
                continue
            verify.append(Copy(view.name, view.uid, spec.path, key, report.sha256, report.size))
            if verdict is not None:
                problems.append(f"shard {index} {key}: {verdict}")
        weakest = min(weakest, good)
        verified_shards += good >= need
    reported = len(reports)
    status: dict[str, Any] = {"committedReplicas": weakest, "verifiedShards": verified_shards}
    if reported == spec.shard_count and verified_shards == spec.shard_count:
        status |= {
            "phase": "Committed",
            "reason": "Quorum",
            "message": f"every shard has at least {need} of {copies} verified copies",
            "commitTime": rfc3339(obs.now),
        }
        return Judged(view, status)
    if reported < spec.shard_count:
        phase, reason, message = "Pending", "WaitingForShards", f"{reported} of {spec.shard_count} shards reported"
    else:
        phase, reason = "Staging", "Verifying"
        message = f"{verified_shards} of {spec.shard_count} shards have {need} verified copies"
    if problems:
        message += "; " + ", ".join(problems[:10]) + (f" and {len(problems) - 10} more" if len(problems) > 10 else "")
    if obs.storage.claim and reported < spec.shard_count:
        verify = []  # a pod reads them all at once when the last shard is in
    if view.uid in obs.notes and verify:
        message += "; " + obs.notes[view.uid]
    timeout = obs.spec.checkpoint.commit_timeout_seconds if obs.spec.checkpoint else 600
    left = timeout - (obs.now - parse_time(view.created)).total_seconds()
    if left <= 0:
        return Judged(
            view,
            status
            | {
                "phase": "Failed",
                "reason": "QuorumTimeout",
                "message": f"no quorum within commitTimeoutSeconds ({timeout}s): {message}; never resumed from",
            },
        )
    return Judged(view, status | {"phase": phase, "reason": reason, "message": message}, tuple(verify), left)


def belongs(view: CheckpointView, obs: Observed) -> bool:
    """This Trainer's checkpoint: its name, and not owned by an earlier Trainer of that name."""
    if view.checkpoint.spec.trainer != obs.trainer:
        return False
    owners = set(view.owner_uids)
    return not owners or not obs.trainer_uid or obs.trainer_uid in owners


def order(view: CheckpointView) -> tuple[int, int, str]:
    spec = view.checkpoint.spec
    return (spec.step, spec.epoch, view.created)


def contribution(obs: Observed, directory: str, resume_from: str) -> Contribution:
    spec = obs.spec
    ckpt = spec.checkpoint
    assert ckpt is not None
    values = {
        "CHECKPOINT_DIR": directory,
        "RESUME_FROM": resume_from,
        "CHECKPOINT_REPLICATION_FACTOR": str(spec.topology.replication_factor),
        "CHECKPOINT_SHARDS": str(spec.topology.workers + (1 if has_master(spec) else 0)),
        "CHECKPOINT_INTERVAL_MINUTES": str(ckpt.interval_minutes),
    }
    env = [EnvVar(name=k, value=v) for k, v in values.items()]
    pod = PodContribution()
    if ckpt.bucket.startswith("s3://"):
        env += [
            EnvVar.model_validate(
                {
                    "name": key,
                    "valueFrom": {
                        "secretKeyRef": {
                            "name": ckpt.credentials_secret,
                            "key": key,
                            **({} if key in REQUIRED_S3_KEYS else {"optional": True}),
                        }
                    },
                }
            )
            for key in S3_KEYS
        ]
    else:
        pod.volumes = [{"name": VOLUME, "persistentVolumeClaim": {"claimName": ckpt.bucket}}]
        pod.volume_mounts = [{"name": VOLUME, "mountPath": MOUNT}]
    pod.env = env
    return Contribution(generation=obs.generation, pod=pod)


def decide(obs: Observed) -> Decision:
    spec = obs.spec.checkpoint
    if spec is None:
        return Decision(
            status={}, conditions=(Desired.true(CONDITION, "NoCheckpointing", "spec.checkpoint is not set"),)
        )
    directory = checkpoint_dir(spec.bucket, obs.namespace, obs.trainer)
    mine = sorted((v for v in obs.checkpoints if belongs(v, obs)), key=order)
    if not obs.storage.ready:
        problem = Desired.false(CONDITION, obs.storage.reason, obs.storage.message)
        return Decision(status={"checkpoint": {}}, conditions=(problem,), problem=problem)

    judged = [judge(v, directory, obs) for v in mine]
    events: list[tuple[str, str, str]] = []
    for j in judged:
        if j.phase != j.view.phase and j.phase in ("Committed", "Failed"):
            kind, reason = (
                ("Normal", "CheckpointCommitted") if j.phase == "Committed" else ("Warning", "CheckpointFailed")
            )
            events.append((kind, reason, f"{j.view.name} (step {j.view.checkpoint.spec.step}): {j.status['message']}"))

    committed = [j for j in judged if j.phase == "Committed"]
    keep = committed[-spec.max_retention :]
    newest = keep[-1] if keep else None
    collect: list[Collect] = []
    stamp = rfc3339(obs.now)
    for j in committed[: -spec.max_retention]:
        if j.view.name == obs.published:
            continue  # pods may still be told to resume from it: collected once the new latest is out
        collect.append(
            Collect(
                j.view.name,
                j.view.checkpoint.spec.path.rstrip("/"),
                j.status
                | {
                    "phase": "GarbageCollected",
                    "reason": "Retention",
                    "message": f"older than the newest {spec.max_retention} committed checkpoints; data deleted",
                    "collectTime": stamp,
                },
            )
        )
    for j in judged:
        # A failed checkpoint's data goes once a newer one has committed (a late writer is done by then).
        stale = newest is not None and order(j.view) < order(newest.view)
        if j.phase == "Failed" and j.status.get("reason") != "InvalidPath" and stale and "collectTime" not in j.status:
            path = j.view.checkpoint.spec.path.rstrip("/")
            collect.append(Collect(j.view.name, path, j.status | {"collectTime": stamp}))

    section: dict[str, Any] = {"committed": len(keep)}
    if newest is not None:
        c = newest.view.checkpoint.spec
        section |= {
            "latest": newest.view.name,
            "latestStep": c.step,
            "resumeFrom": c.path,
            "lastCommitTime": newest.status.get("commitTime"),
        }
        ready = Desired.true(
            CONDITION, "Resumable", f"resumes from {newest.view.name} (epoch {c.epoch}, step {c.step})"
        )
    else:
        ready = Desired.true(CONDITION, "NoCheckpointYet", "training starts from scratch")
    section["contribution"] = contribution(obs, directory, section.get("resumeFrom", "")).to_k8s()

    overdue, overdue_in = _overdue(obs, section.get("lastCommitTime"), spec.interval_minutes)
    waiting = [j.due for j in judged if j.due is not None]
    # A copy found missing or bad is read again a little later, until the commit timeout.
    bad = any((c.uid, c.key, c.sha256) in obs.verdicts for j in judged for c in j.verify)
    recheck = RECHECK_SECONDS if bad else None
    return Decision(
        status={"checkpoint": section},
        conditions=(ready, overdue),
        checkpoints={j.view.name: j.status for j in judged if j.status != _current(j.view)},
        verify=tuple(c for j in judged for c in j.verify),
        collect=tuple(collect),
        events=tuple(events),
        requeue_after=soonest(*waiting, overdue_in, recheck),
    )


def _current(view: CheckpointView) -> dict[str, Any]:
    before = view.checkpoint.status
    dumped = before.model_dump(by_alias=True, exclude_none=True) if before else {}
    return {k: v for k, v in dumped.items() if k in CHECKPOINT_FIELDS}


def _overdue(obs: Observed, last_commit: str | None, interval_minutes: int) -> tuple[Desired, float | None]:
    """CheckpointOverdue: no commit for twice intervalMinutes while the run is Running."""
    limit = 2 * interval_minutes * 60
    if obs.trainer_phase != "Running":
        return Desired.false(OVERDUE, "NotRunning", "checked while the run is Running"), None
    since = max((t for t in (last_commit, obs.start_time) if t), key=parse_time, default=None)
    if since is None:
        return Desired.false(OVERDUE, "OnSchedule", "the run has not started yet"), None
    quiet = (obs.now - parse_time(since)).total_seconds()
    if quiet >= limit:
        what = "the last commit" if since == last_commit else "the run started"
        # No running count of minutes here: the message must not change (and cost a write) on every resync.
        return (
            Desired.true(
                OVERDUE,
                "NoRecentCommit",
                f"no checkpoint committed since {what} at {since} "
                f"(intervalMinutes is {interval_minutes}; overdue after twice that)",
            ),
            None,
        )
    return Desired.false(OVERDUE, "OnSchedule", f"a checkpoint is due every {interval_minutes} minutes"), limit - quiet


def soonest(*delays: float | None) -> float | None:
    due = [max(d, 0.0) for d in delays if d is not None]
    return min(due) if due else None

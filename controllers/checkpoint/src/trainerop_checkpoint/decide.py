"""The checkpoint controller's decision core: pure, table- and property-tested, no I/O.

A Checkpoint moves Pending (shards still being reported) -> Staging (every shard reported, copies
being verified) -> Committed (every shard has a majority of verified copies) -> GarbageCollected
(older than the newest ``maxRetention`` committed ones: data deleted, object kept as a record).
One that does not commit within ``commitTimeoutSeconds`` of its creation, or that points outside
its Trainer's checkpoint directory, is Failed and never resumed from; so is a committed one a
resuming pod reported a shard of unreadable (``Unreadable``): the run resumes from the previous
committed one, and data a live pod's ``RESUME_FROM`` names is never collected. The Trainer's
``status.checkpoint`` names the latest committed checkpoint and contributes ``RESUME_FROM`` and
the storage settings to the pods created from then on (docs/checkpoints.md).

The flow goes one way: :func:`copies_to_read` says which copies the adapter must read (on S3, or
by a pod on the claim), and :func:`decide` decides once, on what the reads found.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any, Literal

from trainerop_common.api import Checkpoint, Contribution, PodContribution
from trainerop_common.api.base import EnvVar
from trainerop_common.api.trainer import CheckpointSpec, RenegotiationStatus, SaveRequest, TrainerSpec
from trainerop_common.checkpoint_layout import (
    MOUNT,
    Claim,
    Digest,
    StoredChecksum,
    checkpoint_dir,
    checkpoint_path,
    copy_key,
    credential_env,
    missing_credential_keys,
)
from trainerop_common.clock import parse_time, rfc3339
from trainerop_common.conditions import Desired
from trainerop_common.contracts import GATE_CONDITIONS, SECRET_READER_ROLES, TRAINER_UID_LABEL
from trainerop_common.outcome import Event, StatusSection, soonest

CONDITION = GATE_CONDITIONS["checkpoint"]
OVERDUE = "CheckpointOverdue"
SECTION = StatusSection(("checkpoint",), (CONDITION, OVERDUE))
# What the controller writes of a Checkpoint's status.
CHECKPOINT_SECTION = StatusSection(
    ("phase", "committedReplicas", "verifiedShards", "reason", "message", "commitTime", "collectTime")
)
VOLUME = "checkpoints"
RECHECK_SECONDS = 10.0  # a missing or bad copy is read again this often until the timeout
# Storage problems of the credentials Secret (not watched: looked at again every RECHECK_SECONDS).
SECRET_PROBLEMS = frozenset({"CredentialsNotFound", "CredentialsNotReadable", "InvalidCredentials"})
FINAL = ("Committed", "GarbageCollected", "Failed")
UNREADABLE = "Unreadable"  # the Failed reason of a committed checkpoint a resuming pod could not load

CopyState = Literal["ok", "missing", "mismatch", "unreadable"]
CopyId = tuple[str, str, str]  # (checkpoint uid, copy key, reported sha256)


def copy_state(found: Digest | None, sha256: str, size: int) -> CopyState:
    """A copy found (its sha256 and size, None when absent) against what its writer reported."""
    if found is None:
        return "missing"
    return "ok" if (found.sha256, found.size) == (sha256, size) else "mismatch"


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


# Credentials this controller may not read (where the trainer controller has not bound the
# ClusterRole trainer-operator-checkpoint-credentials): not the same as a Secret that is missing.
FORBIDDEN: Mapping[str, str] = MappingProxyType({})


def judge_storage(ckpt: CheckpointSpec, namespace: str, claim_found: bool, secret: Mapping[str, str] | None) -> Storage:
    """Whether the Trainer's storage can be used: its bucket parses, and its PersistentVolumeClaim
    exists, or its credentials Secret exists (``None``: it does not; :data:`FORBIDDEN`: it may not
    be read) and holds what the pods need."""
    try:
        location = ckpt.location
    except ValueError as err:  # stored before the CRD's rule was tightened
        message = f"spec.checkpoint.bucket: {err}; change it (the API server now refuses such a bucket)"
        return Storage(False, "InvalidBucket", message)
    if isinstance(location, Claim):
        if claim_found:
            return Storage(claim=location.name)
        return Storage(
            False,
            "StorageNotFound",
            f"PersistentVolumeClaim {location.name!r} (spec.checkpoint.bucket) does not exist in namespace "
            f"{namespace!r}; create it (ReadWriteMany: every replica mounts it) or use an s3:// bucket",
        )
    name = ckpt.credentials_secret or ""
    if secret is None:
        message = f"Secret {name!r} (spec.checkpoint.credentialsSecret) does not exist in namespace {namespace!r}"
        return Storage(False, "CredentialsNotFound", message)
    if secret is FORBIDDEN:
        message = (
            f"the checkpoint controller may not read Secret {name!r} (spec.checkpoint.credentialsSecret) in namespace "
            f"{namespace!r}: the trainer controller grants that there (RoleBinding "
            f"{SECRET_READER_ROLES['checkpoint']}) when it runs with the checkpoint gate; check its RBAC and logs"
        )
        return Storage(False, "CredentialsNotReadable", message)
    missing = missing_credential_keys(secret)
    if missing:
        message = (
            f"Secret {name!r} lacks {', '.join(missing)}; it needs AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY "
            "and AWS_ENDPOINT_URL (optionally AWS_REGION)"
        )
        return Storage(False, "InvalidCredentials", message)
    return Storage()


@dataclass(frozen=True)
class Copy:
    """A copy to read and check against what its writer reported."""

    checkpoint: str
    uid: str
    path: str
    key: str
    sha256: str
    size: int
    parts_sha256: str | None = None  # as S3 keeps a multipart upload's checksum

    @property
    def id(self) -> CopyId:
        return (self.uid, self.key, self.sha256)


def stored_copy_state(stored: StoredChecksum | None, copy: Copy) -> CopyState | None:
    """A copy judged by what its storage says without reading it (None: it must be read): missing,
    or ok when the checksum S3 checked its data against and kept is the one its writer reported
    (the whole object's sha256, or a multipart upload's parts checksum). Anything else is read
    before it is called a mismatch (a writer's part size that differs from the upload's, say)."""
    if stored is None:
        return "missing"
    vouched = stored.sha256 == copy.sha256 or (
        copy.parts_sha256 is not None and stored.parts_sha256 == copy.parts_sha256
    )
    return "ok" if vouched and stored.size == copy.size else None


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
    copy_states: Mapping[CopyId, CopyState] = field(default_factory=dict)  # what reading each copy found
    storage: Storage = field(default_factory=Storage)
    trainer_phase: str | None = None
    start_time: str | None = None  # status.progress.startTime
    trainer_uid: str = ""  # Checkpoints owned by another (earlier) Trainer of the same name do not count
    published: str | None = None  # status.checkpoint.latest as pods may have read it
    notes: Mapping[str, str] = field(default_factory=dict)  # checkpoint uid -> what its verification waits for
    # What asks for a save (save_request.py): the Trainer's annotations, the quota's renegotiation,
    # and the latest request, as status.checkpoint.saveRequest has it.
    annotations: Mapping[str, str] = field(default_factory=dict)
    renegotiation: RenegotiationStatus | None = None
    save_request: SaveRequest | None = None
    # The checkpoint paths (RESUME_FROM) the Trainer's live pods were given: their data stays.
    pinned: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Decision:
    status: dict[str, Any]
    conditions: tuple[Desired, ...]
    checkpoints: Mapping[str, dict[str, Any]] = field(default_factory=dict)  # name -> status to apply
    # Committed checkpoints marked unreadable: written once the Trainer's new resume point is (a
    # pod that waits for the mark then knows its replacement is given the previous checkpoint).
    marks: Mapping[str, dict[str, Any]] = field(default_factory=dict)
    collect: tuple[Collect, ...] = ()
    events: tuple[Event, ...] = ()
    requeue_after: float | None = None
    problem: Desired | None = None


@dataclass(frozen=True)
class Judged:
    """One checkpoint's state as decided now."""

    view: CheckpointView
    status: dict[str, Any]
    unread: tuple[Copy, ...] = ()  # copies still to read (none found ok yet)
    due: float | None = None  # seconds until its commit timeout

    @property
    def phase(self) -> str:
        return str(self.status["phase"])


@dataclass(frozen=True)
class Tally:
    """What the reads found of one checkpoint's copies."""

    copies: int  # the copies each shard must have
    verified_shards: int = 0  # shards with a quorum of ok copies
    weakest: int = 0  # ok copies of the weakest shard
    unread: tuple[Copy, ...] = ()
    problems: tuple[str, ...] = ()  # "shard i key: state" of copies found missing or bad


def tally(view: CheckpointView, obs: Observed) -> Tally:
    """The copies that are ok, per shard. The quorum counts the copies the Trainer asks for
    (topology.replicationFactor), each at its own key: a report cannot lower the bar by claiming
    fewer copies or listing one copy twice."""
    spec = view.checkpoint.spec
    copies = max(obs.spec.topology.replication_factor, spec.replication_factor)
    reports = {s.index: s for s in spec.shards or ()}
    unread: list[Copy] = []
    problems: list[str] = []
    verified, weakest = 0, copies
    for index in range(spec.shard_count):
        report = reports.get(index)
        if report is None:
            weakest = 0
            continue
        good = 0
        for key in sorted(set(report.copies) & {copy_key(index, r) for r in range(copies)}):
            state = obs.copy_states.get((view.uid, key, report.sha256))
            if state == "ok":
                good += 1
                continue
            unread.append(Copy(view.name, view.uid, spec.path, key, report.sha256, report.size, report.parts_sha256))
            if state is not None:
                problems.append(f"shard {index} {key}: {state}")
        weakest = min(weakest, good)
        verified += good >= quorum(copies)
    return Tally(copies, verified, weakest, tuple(unread), tuple(problems))


def judge(view: CheckpointView, expected_dir: str, obs: Observed) -> Judged:
    """The phase of one checkpoint from its reports and what reading its copies found."""
    spec = view.checkpoint.spec
    if view.phase == "Committed" and spec.unreadable:
        return Judged(view, _current(view) | _phase("Failed", UNREADABLE, unreadable_message(view)))
    if view.phase in FINAL:
        return Judged(view, _current(view))  # final (collection of a committed one is decided by retention)
    expected = checkpoint_path(expected_dir, spec.step)
    if spec.path.rstrip("/") != expected:
        message = (
            f"spec.path {spec.path!r} is not this Trainer's path for step {spec.step} ({expected!r}); "
            "the checkpoint is never resumed from and its data is left alone"
        )
        return Judged(view, {"phase": "Failed", "reason": "InvalidPath", "message": message})
    t = tally(view, obs)
    reported, need = len(spec.shards or ()), quorum(t.copies)
    status: dict[str, Any] = {"committedReplicas": t.weakest, "verifiedShards": t.verified_shards}
    if t.verified_shards == spec.shard_count:
        message = f"every shard has at least {need} of {t.copies} verified copies"
        return Judged(view, status | _phase("Committed", "Quorum", message) | {"commitTime": rfc3339(obs.now)})
    if reported < spec.shard_count:
        phase, reason, message = "Pending", "WaitingForShards", f"{reported} of {spec.shard_count} shards reported"
    else:
        phase, reason = "Staging", "Verifying"
        message = f"{t.verified_shards} of {spec.shard_count} shards have {need} verified copies"
    if t.problems:
        more = f" and {len(t.problems) - 10} more" if len(t.problems) > 10 else ""
        message += "; " + ", ".join(t.problems[:10]) + more
    # On a claim, a pod reads every copy at once when the last shard is in.
    unread = () if obs.storage.claim and reported < spec.shard_count else t.unread
    if view.uid in obs.notes and unread:
        message += "; " + obs.notes[view.uid]
    timeout = obs.spec.checkpoint.commit_timeout_seconds if obs.spec.checkpoint else 600
    left = timeout - (obs.now - parse_time(view.created)).total_seconds()
    if left <= 0:
        why = f"no quorum within commitTimeoutSeconds ({timeout}s): {message}; never resumed from"
        return Judged(view, status | _phase("Failed", "QuorumTimeout", why))
    return Judged(view, status | _phase(phase, reason, message), unread, left)


def unreadable_message(view: CheckpointView) -> str:
    """What the resuming pods found of a committed checkpoint: the shards they could not load."""
    reports = sorted(view.checkpoint.spec.unreadable or (), key=lambda r: r.index)
    found = "; ".join(f"shard {r.index} (pod {r.pod}): {r.problem}" for r in reports[:5])
    more = f"; and {len(reports) - 5} more shards" if len(reports) > 5 else ""
    return (
        f"no copy of a shard could be loaded: {found}{more}; never resumed from again, its data deleted once "
        "a newer checkpoint commits"
    )


def _phase(phase: str, reason: str, message: str) -> dict[str, Any]:
    return {"phase": phase, "reason": reason, "message": message}


def belongs(view: CheckpointView, obs: Observed) -> bool:
    """This Trainer's checkpoint: its name, and not owned by an earlier Trainer of that name."""
    if view.checkpoint.spec.trainer != obs.trainer:
        return False
    owners = set(view.owner_uids)
    return not owners or not obs.trainer_uid or obs.trainer_uid in owners


def order(view: CheckpointView) -> tuple[int, int, str]:
    spec = view.checkpoint.spec
    return (spec.step, spec.epoch, view.created)


def _s3_credentials(secret: str | None) -> list[EnvVar]:
    """The AWS_* variables of the pods, from the Trainer's credentials Secret (region optional)."""
    return [EnvVar.model_validate(env) for env in credential_env(secret)]


def contribution(obs: Observed, directory: str, resume_from: str) -> Contribution:
    spec = obs.spec
    ckpt = spec.checkpoint
    assert ckpt is not None
    values = {
        "CHECKPOINT_DIR": directory,
        "RESUME_FROM": resume_from,
        "CHECKPOINT_REPLICATION_FACTOR": str(spec.topology.replication_factor),
        "CHECKPOINT_INTERVAL_MINUTES": str(ckpt.interval_minutes),
    }
    env = [EnvVar(name=k, value=v) for k, v in values.items()]
    location = ckpt.location
    if not isinstance(location, Claim):
        return Contribution(
            generation=obs.generation, pod=PodContribution(env=env + _s3_credentials(ckpt.credentials_secret))
        )
    pod = PodContribution(
        env=env,
        volumes=[{"name": VOLUME, "persistentVolumeClaim": {"claimName": location.name}}],
        volume_mounts=[{"name": VOLUME, "mountPath": MOUNT}],
    )
    return Contribution(generation=obs.generation, pod=pod)


def _judged(obs: Observed) -> list[Judged]:
    """This Trainer's checkpoints, oldest first, each judged."""
    assert obs.spec.checkpoint is not None
    directory = checkpoint_dir(obs.spec.checkpoint.location, obs.namespace, obs.trainer)
    mine = sorted((v for v in obs.checkpoints if belongs(v, obs)), key=order)
    return [judge(v, directory, obs) for v in mine]


def copies_to_read(obs: Observed) -> tuple[Copy, ...]:
    """The copies to read before deciding: of checkpoints still waiting for a quorum, those not yet
    found ok (a missing or bad one again, a little later, until the commit timeout)."""
    if obs.spec.checkpoint is None or not obs.storage.ready:
        return ()
    return tuple(c for j in _judged(obs) for c in j.unread)


def decide(obs: Observed) -> Decision:
    spec = obs.spec.checkpoint
    if spec is None:
        # Not asked (contracts.asks): nothing said, and what was said of earlier checkpointing goes.
        return Decision(status={}, conditions=())
    if not obs.storage.ready:
        # The section goes (no resume point, no contribution: the gate is closed). Applying an
        # empty section instead would leave status.checkpoint null, which the API server refuses.
        problem = Desired.false(CONDITION, obs.storage.reason, obs.storage.message)
        # Secrets are not watched: one made, mended or granted is seen at the next look.
        recheck = RECHECK_SECONDS if obs.storage.reason in SECRET_PROBLEMS else None
        return Decision(status={}, conditions=(problem,), problem=problem, requeue_after=recheck)
    judged = _judged(obs)
    committed = [j for j in judged if j.phase == "Committed"]
    keep = committed[-spec.max_retention :]
    broken = unreadable_latest(judged, keep)
    section, ready = _section(obs, keep, broken)
    overdue, overdue_in = _overdue(obs, section.get("lastCommitTime"), spec.interval_minutes)
    # A copy found missing or bad is read again a little later, until the commit timeout.
    bad = any(c.id in obs.copy_states for j in judged for c in j.unread)
    changed = {j.view.name: j for j in judged if j.status != _current(j.view)}
    return Decision(
        status={"checkpoint": section},
        conditions=(ready, overdue),
        checkpoints={n: j.status for n, j in changed.items() if j.view.phase != "Committed"},
        marks={n: j.status for n, j in changed.items() if j.view.phase == "Committed"},
        collect=tuple(_retention(obs, judged, committed, spec.max_retention)),
        events=tuple(_announced(judged, keep)),
        requeue_after=soonest(*(j.due for j in judged), overdue_in, RECHECK_SECONDS if bad else None),
        problem=ready if ready.status == "False" else None,
    )


def unreadable_latest(judged: Sequence[Judged], keep: Sequence[Judged]) -> Judged | None:
    """The newest checkpoint found unreadable after it committed, when it is newer than every
    committed one kept: the run falls back from it (to the newest kept, if any)."""
    newest = keep[-1].view if keep else None
    broken = [j for j in judged if j.phase == "Failed" and j.status.get("reason") == UNREADABLE]
    if not broken or (newest is not None and order(broken[-1].view) < order(newest)):
        return None
    return broken[-1]


def _fallback(keep: Sequence[Judged]) -> str:
    """Where a run whose latest checkpoint is unreadable goes on from."""
    if not keep:
        return "no earlier committed checkpoint remains: the run waits (CheckpointReady=False) with no new pods"
    c = keep[-1].view.checkpoint.spec
    return f"the run resumes from {keep[-1].view.name} (step {c.step})"


def _announced(judged: Sequence[Judged], keep: Sequence[Judged]) -> list[Event]:
    """An Event for each checkpoint that commits or fails now, or is found unreadable (naming the
    checkpoint the run goes on from)."""
    events: list[Event] = []
    for j in judged:
        spec = j.view.checkpoint.spec
        if j.view.phase == "Committed" and j.phase == "Failed":
            why = unreadable_message(j.view).split("; never")[0]
            events.append(
                ("Warning", "CheckpointUnreadable", f"{j.view.name} (step {spec.step}): {why}; {_fallback(keep)}")
            )
        elif j.phase != j.view.phase and j.phase in ("Committed", "Failed"):
            kind, reason = (
                ("Normal", "CheckpointCommitted") if j.phase == "Committed" else ("Warning", "CheckpointFailed")
            )
            events.append((kind, reason, f"{j.view.name} (step {j.view.checkpoint.spec.step}): {j.status['message']}"))
    return events


def _retention(obs: Observed, judged: Sequence[Judged], committed: Sequence[Judged], keep: int) -> list[Collect]:
    """Data to delete: committed checkpoints older than the newest ``keep`` (never the one pods may
    still be told to resume from), and failed ones once a newer one has committed (a late writer is
    done by then; never one pointing elsewhere) — never what a live pod was told to resume from."""
    stamp = rfc3339(obs.now)
    out: list[Collect] = []
    for j in committed[:-keep]:
        if j.view.name == obs.published or pinned(j.view, obs):
            continue  # collected once the new latest is out, and no live pod may still load it
        message = f"older than the newest {keep} committed checkpoints; data deleted"
        gone = _phase("GarbageCollected", "Retention", message) | {"collectTime": stamp}
        out.append(Collect(j.view.name, j.view.checkpoint.spec.path.rstrip("/"), j.status | gone))
    newest = committed[-1].view if committed else None
    for j in judged:
        stale = newest is not None and order(j.view) < order(newest)
        if (
            j.phase == "Failed"
            and j.status.get("reason") != "InvalidPath"
            and stale
            and "collectTime" not in j.status
            and not pinned(j.view, obs)
        ):
            out.append(Collect(j.view.name, j.view.checkpoint.spec.path.rstrip("/"), j.status | {"collectTime": stamp}))
    return out


def resume_points(pods: Sequence[Mapping[str, Any]], trainer_uid: str) -> frozenset[str]:
    """The RESUME_FROM values of a Trainer's pods that have not ended (one being deleted may still
    run): what a process restarted inside one loads. Pods of an earlier Trainer of the name do not
    count."""
    points: set[str] = set()
    for pod in pods:
        uid = (pod.get("metadata", {}).get("labels") or {}).get(TRAINER_UID_LABEL)
        if (trainer_uid and uid and uid != trainer_uid) or pod.get("status", {}).get("phase") in (
            "Succeeded",
            "Failed",
        ):
            continue
        spec = pod.get("spec", {})
        for container in (spec.get("initContainers") or []) + (spec.get("containers") or []):
            points |= {e.get("value") or "" for e in container.get("env") or () if e.get("name") == "RESUME_FROM"}
    return frozenset(p for p in points if p)


def pinned(view: CheckpointView, obs: Observed) -> bool:
    """Whether a live pod of the Trainer was given this checkpoint as RESUME_FROM (a process
    restarted inside it, torchrun's for one, loads it again)."""
    return view.checkpoint.spec.path.rstrip("/") in {p.rstrip("/") for p in obs.pinned}


def _section(obs: Observed, keep: Sequence[Judged], broken: Judged | None) -> tuple[dict[str, Any], Desired]:
    """status.checkpoint (the committed checkpoints kept, the resume point, the pods' contribution)
    and CheckpointReady."""
    assert obs.spec.checkpoint is not None
    section: dict[str, Any] = {"committed": len(keep)}
    newest = keep[-1] if keep else None
    if newest is not None:
        c = newest.view.checkpoint.spec
        section |= {
            "latest": newest.view.name,
            "latestStep": c.step,
            "resumeFrom": c.path,
            "lastCommitTime": newest.status.get("commitTime"),
        }
    ready = _ready(obs, newest, broken)
    directory = checkpoint_dir(obs.spec.checkpoint.location, obs.namespace, obs.trainer)
    section["contribution"] = contribution(obs, directory, section.get("resumeFrom", "")).to_k8s()
    return section, ready


def _ready(obs: Observed, newest: Judged | None, broken: Judged | None) -> Desired:
    """CheckpointReady: where the run resumes from, and why not from a newer checkpoint that
    committed but could not be loaded (without an earlier one the gate closes: starting over
    from scratch would lose the run's training, so a user decides)."""
    if broken is not None:
        bad = f"{broken.view.name} (step {broken.view.checkpoint.spec.step}) could not be loaded"
        if newest is None:
            message = (
                f"{bad} and no earlier committed checkpoint remains: the run waits with no new pods; to start "
                f"over from scratch, delete it (kubectl delete checkpoint {broken.view.name} -n {obs.namespace})"
            )
            return Desired.false(CONDITION, "NoReadableCheckpoint", message)
        c = newest.view.checkpoint.spec
        return Desired.true(
            CONDITION,
            "ResumedFromPrevious",
            f"resumes from {newest.view.name} (epoch {c.epoch}, step {c.step}): {bad}",
        )
    if newest is None:
        return Desired.true(CONDITION, "NoCheckpointYet", "training starts from scratch")
    c = newest.view.checkpoint.spec
    return Desired.true(CONDITION, "Resumable", f"resumes from {newest.view.name} (epoch {c.epoch}, step {c.step})")


def _current(view: CheckpointView) -> dict[str, Any]:
    before = view.checkpoint.status
    dumped = before.model_dump(by_alias=True, exclude_none=True) if before else {}
    return {k: v for k, v in dumped.items() if k in CHECKPOINT_SECTION.fields}


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

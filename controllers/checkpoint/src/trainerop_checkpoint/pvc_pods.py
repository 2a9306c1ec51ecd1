"""Checkpoints on a PersistentVolumeClaim, verified and deleted by pods that mount the claim.

The controller cannot read a claim; a short-lived pod in the Trainer's namespace can. It runs the
operator's own image (``python -m trainerop_checkpoint.pvc_worker``), gets its work in an env var
and answers with one letter per item in its termination message:

- a verifier pod (owned by its Checkpoint) mounts the claim read-only, reads each copy it is asked
  about and compares its sha256 and size with what the writer reported: ``o`` ok, ``m`` missing,
  ``x`` mismatch, ``u`` unreadable (also a copy reached through a symlink: none is followed). It
  has no ServiceAccount token, runs as 65532 with a read-only root filesystem, no capabilities and
  a deadline.
- a collector pod (owned by the Trainer) mounts the claim read-write and deletes checkpoint
  directories: ``d`` deleted (or already gone), ``e`` error. It runs as the user the training pods
  wrote those files as (each shard report says: :func:`writer_of`), never as root, with no
  capabilities (and no token, a read-only root filesystem, a deadline); it deletes nothing outside
  ``/checkpoints/<trainer>/`` and follows no symlink (a tenant sharing the claim may plant one).
  Data whose writer is unknown or root is left on the claim, and the Trainer's Events say so.

Neither sets an fsGroup: the kubelet would change the group of everything on the shared claim.

4096 bytes (the kubelet's limit for a termination message) hold 4096 letters; a pod gets at most
BATCH items and a larger checkpoint gets several pods. The controller's side is pure:
``plan_verification`` and ``plan_collection`` turn the wanted work and the pods that exist into
answers, pods to create and pods to delete (a pod whose answer calls for another look stays
RECHECK_SECONDS, so a missing copy is not re-read in a tight loop). This module is pure; the program
the pods run is :mod:`trainerop_checkpoint.pvc_worker`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Hashable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar

from trainerop_common.api import GROUP, VERSION
from trainerop_common.api.checkpoint import ShardReport
from trainerop_common.checkpoint_layout import MOUNT
from trainerop_common.clock import parse_time
from trainerop_common.names import PART_OF, child_name

from .decide import RECHECK_SECONDS, Copy, CopyId, CopyState

BATCH = 500  # items per pod: keeps the request (an env var) small and the answer far under 4096
VERIFY_ENV = "TRAINEROP_VERIFY_REQUEST"
COLLECT_ENV = "TRAINEROP_COLLECT_REQUEST"
TERMINATION_LOG = "/dev/termination-log"
LETTERS: dict[CopyState, str] = {"ok": "o", "missing": "m", "mismatch": "x", "unreadable": "u"}
STATES: dict[str, CopyState] = {letter: state for state, letter in LETTERS.items()}
WORKER = ["python", "-m", "trainerop_checkpoint.pvc_worker"]
DELETED, FAILED = "d", "e"
PURPOSE_LABEL = f"{GROUP}/checkpoint-pod"  # verify | collect
TRAINER_LABEL = f"{GROUP}/checkpoint-of"  # the Trainer's name (not trainer-name: those are its training pods)
CHECKPOINT_UID_LABEL = f"{GROUP}/checkpoint-uid"
MAX_POD_NAME = 63  # a pod's name is its hostname: a DNS label's length
DEADLINE_SECONDS = 600
FORCE_AFTER_SECONDS = 60  # a storage pod still terminating this long is force-deleted (its node is gone)
NOBODY = 65532  # the verifier's user and group, and a collector's group when its writer's is root's
T = TypeVar("T")


@dataclass(frozen=True)
class Target:
    """Where the pods go and what they run."""

    namespace: str
    trainer: str
    claim: str
    image: str


@dataclass(frozen=True)
class Writer:
    """The user (and group) a checkpoint's files were written as: the collector deletes them as it."""

    uid: int
    gid: int


def writer_of(shards: Sequence[ShardReport]) -> Writer | str:
    """Who the collector runs as to delete a checkpoint's data, from its shard reports; else why
    it must not be deleted by a pod: no report says, several users wrote it, or root did (the
    collector never runs as root). A group of root's gives the collector NOBODY's instead."""
    users = sorted({(s.writer_uid, s.writer_gid) for s in shards if s.writer_uid is not None}, key=str)
    if not users:
        return "no shard report says which user wrote it (an SDK older than the writerUid field)"
    if len(users) > 1:
        return f"its shards were written by several users ({', '.join(f'{u}:{g}' for u, g in users)})"
    ((uid, gid),) = users
    if uid == 0:
        return "the training pods wrote it as root (uid 0), and the collector never runs as root"
    return Writer(uid, gid if gid else NOBODY)


@dataclass(frozen=True)
class PodView:
    """What the controller needs of a verifier or collector pod."""

    name: str
    purpose: str
    request: str
    phase: str
    uid: str = ""  # the pod's own: deleted only with it as a precondition (never a new pod of that name)
    deleting: datetime | None = None  # when its deletion was asked for
    checkpoint_uid: str = ""
    owner_uid: str = ""
    image: str = ""
    claim: str = ""
    message: str | None = None  # the container's termination message
    finished: datetime | None = None
    waiting: str = ""  # why a pod that has not finished is not running
    failure: str = ""  # why a failed pod gave no answer
    writer: Writer | None = None  # the non-root user it runs as (None: root, or not said)


@dataclass(frozen=True)
class Plan:
    create: tuple[dict[str, Any], ...] = ()
    delete: tuple[str, ...] = ()
    failures: tuple[tuple[str, str], ...] = ()  # (pod, what went wrong) for pods that ended without an answer
    copy_states: Mapping[CopyId, CopyState] = field(default_factory=dict)
    notes: Mapping[str, str] = field(default_factory=dict)  # checkpoint uid -> what its verification waits for
    collected: frozenset[str] = frozenset()  # checkpoint paths whose data is gone
    left: Mapping[str, str] = field(default_factory=dict)  # checkpoint path -> why no pod deletes its data
    force_delete: tuple[str, ...] = ()  # pods whose deletion their node never confirmed
    recheck_after: float | None = None  # seconds until a resting pod's work is due again


def batches(items: Sequence[T]) -> list[tuple[T, ...]]:
    return [tuple(items[i : i + BATCH]) for i in range(0, len(items), BATCH)]


def encode_request(copies: Iterable[Copy]) -> str:
    """What a verifier checks: [path, key, sha256, size] per copy, in order."""
    return json.dumps([[c.path, c.key, c.sha256, c.size] for c in copies], separators=(",", ":"))


def pod_name(prefix: str, purpose: str, owner_uid: str, request: str, target: Target, user: str = "") -> str:
    """Names follow the work: the same request for the same owner, claim, image (and user) is the
    same pod (creating it twice is refused), another request is another pod."""
    work = f"{owner_uid}\n{target.claim}\n{target.image}\n{request}" + (f"\n{user}" if user else "")
    digest = hashlib.sha256(work.encode()).hexdigest()[:10]
    return child_name(prefix, purpose, digest, limit=MAX_POD_NAME)


def _storage_pod(
    target: Target,
    purpose: str,
    owner: dict[str, str],
    env: str,
    request: str,
    labels: Mapping[str, str],
    writer: Writer = Writer(NOBODY, NOBODY),
) -> dict[str, Any]:
    read_only = purpose == "verify"
    pod_security = {"runAsNonRoot": True, "runAsUser": writer.uid, "runAsGroup": writer.gid}
    user = "" if read_only else f"{writer.uid}:{writer.gid}"
    claim: dict[str, Any] = {"claimName": target.claim} | ({"readOnly": True} if read_only else {})
    mount: dict[str, Any] = {"name": "checkpoints", "mountPath": MOUNT} | ({"readOnly": True} if read_only else {})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(owner["name"], purpose, owner["uid"], request, target, user),
            "namespace": target.namespace,
            "labels": {
                PURPOSE_LABEL: purpose,
                TRAINER_LABEL: target.trainer,
                **labels,
                **PART_OF,
                "app.kubernetes.io/component": f"checkpoint-{'verifier' if read_only else 'collector'}",
            },
            "ownerReferences": [{"apiVersion": f"{GROUP}/{VERSION}", "controller": True, **owner}],
        },
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "activeDeadlineSeconds": DEADLINE_SECONDS,
            "terminationGracePeriodSeconds": 5,
            "securityContext": pod_security | {"seccompProfile": {"type": "RuntimeDefault"}},
            "volumes": [{"name": "checkpoints", "persistentVolumeClaim": claim}],
            "containers": [
                {
                    "name": purpose,
                    "image": target.image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": list(WORKER),
                    "env": [{"name": env, "value": request}],
                    "volumeMounts": [mount],
                    "terminationMessagePolicy": "File",
                    "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "readOnlyRootFilesystem": True,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        },
    }


def verifier_pod(target: Target, checkpoint: str, checkpoint_uid: str, copies: Sequence[Copy]) -> dict[str, Any]:
    """The pod that checks ``copies`` (one batch, all of one checkpoint) on the claim."""
    return _storage_pod(
        target,
        "verify",
        {"kind": "Checkpoint", "name": checkpoint, "uid": checkpoint_uid},
        VERIFY_ENV,
        encode_request(copies),
        {CHECKPOINT_UID_LABEL: checkpoint_uid},
    )


def collector_pod(target: Target, trainer_uid: str, paths: Sequence[str], writer: Writer) -> dict[str, Any]:
    """The pod that deletes checkpoint directories (``paths``, one batch, all written by
    ``writer``) on the claim, as ``writer``."""
    request = json.dumps(list(paths), separators=(",", ":"))
    owner = {"kind": "Trainer", "name": target.trainer, "uid": trainer_uid}
    return _storage_pod(target, "collect", owner, COLLECT_ENV, request, {}, writer)


def _runs_as(security: Mapping[str, Any]) -> Writer | None:
    """The non-root user a pod's securityContext makes it run as (None: root, or not said)."""
    uid, gid = security.get("runAsUser"), security.get("runAsGroup")
    if security.get("runAsNonRoot") is not True or not isinstance(uid, int) or not isinstance(gid, int) or uid == 0:
        return None
    return Writer(uid, gid)


def trainer_of(pod: Mapping[str, Any]) -> tuple[str, str]:
    """The (namespace, Trainer) a storage pod works for."""
    meta = pod.get("metadata", {})
    return (str(meta.get("namespace", "")), str((meta.get("labels") or {}).get(TRAINER_LABEL, "")))


def view(pod: Mapping[str, Any]) -> PodView | None:
    """A verifier or collector pod as the planner sees it (None: not one of them)."""
    meta, spec, status = pod.get("metadata", {}), pod.get("spec", {}), pod.get("status") or {}
    labels = meta.get("labels") or {}
    purpose = labels.get(PURPOSE_LABEL)
    if purpose not in ("verify", "collect") or not spec.get("containers"):
        return None
    wanted_env = VERIFY_ENV if purpose == "verify" else COLLECT_ENV
    request = next((e.get("value", "") for e in spec["containers"][0].get("env") or () if e["name"] == wanted_env), "")
    phase = status.get("phase") or "Pending"
    statuses = status.get("containerStatuses") or ()
    state = (statuses[0].get("state") or {}) if statuses else {}
    ended = state.get("terminated") or {}
    waiting = ""
    if phase == "Pending":
        unscheduled = next(
            (c for c in status.get("conditions") or () if c.get("type") == "PodScheduled" and c["status"] == "False"),
            None,
        )
        held = unscheduled or state.get("waiting")
        if held:
            waiting = ": ".join(x for x in (held.get("reason", ""), held.get("message", "")) if x)
    failure = ""
    if phase == "Failed":
        parts = [status.get("reason"), status.get("message")]
        if ended:
            parts += [ended.get("reason"), f"exit code {ended.get('exitCode')}", ended.get("message")]
        failure = ", ".join(str(p).strip() for p in parts if p)
    when = ended.get("finishedAt") or status.get("startTime") or meta.get("creationTimestamp")
    owners = [o.get("uid", "") for o in meta.get("ownerReferences") or () if o.get("controller")]
    claims = [
        v["persistentVolumeClaim"].get("claimName", "")
        for v in spec.get("volumes") or ()
        if "persistentVolumeClaim" in v
    ]
    deleting = meta.get("deletionTimestamp")
    return PodView(
        name=meta.get("name", ""),
        purpose=purpose,
        request=request,
        phase=phase,
        uid=meta.get("uid", ""),
        deleting=parse_time(deleting) if deleting else None,
        checkpoint_uid=labels.get(CHECKPOINT_UID_LABEL, ""),
        owner_uid=owners[0] if len(owners) == 1 else "",
        image=str(spec["containers"][0].get("image", "")),
        claim=claims[0] if len(claims) == 1 else "",
        message=ended.get("message"),
        finished=parse_time(when) if when and phase in ("Succeeded", "Failed") else None,
        waiting=waiting,
        failure=failure or ("ended without an answer" if phase == "Failed" else ""),
        writer=_runs_as(spec.get("securityContext") or {}),
    )


def _rows(pod: PodView) -> list[Any]:
    try:
        rows = json.loads(pod.request)
    except ValueError:
        return []
    return rows if isinstance(rows, list) else []


@dataclass
class _Settled:
    answers: dict[Hashable, str] = field(default_factory=dict)
    covered: set[Hashable] = field(default_factory=set)  # items a pod is on (running, or answered and resting)
    names: set[str] = field(default_factory=set)  # pods that exist: not created again until they are gone
    delete: list[str] = field(default_factory=list)
    force: list[str] = field(default_factory=list)
    failures: list[tuple[str, str]] = field(default_factory=list)
    notes: dict[Hashable, str] = field(default_factory=dict)  # item -> what its pod waits for
    due: list[float] = field(default_factory=list)  # seconds until resting pods are due


def _settle(
    pods: Iterable[tuple[PodView, Sequence[Hashable]]],
    wanted: AbstractSet[Hashable],
    final: str,
    letters: str,
    now: datetime,
    rest_seconds: float,
) -> _Settled:
    """The pods' answers on the work still wanted, and which pods go: one whose work is no longer
    wanted, or whose answer is final; one whose answer calls for another look (or that failed)
    rests ``rest_seconds`` first. A pod whose deletion its node never confirms is forced after
    FORCE_AFTER_SECONDS (its name blocks the same work)."""
    out = _Settled()
    rest = timedelta(seconds=rest_seconds)
    for pod, items in pods:
        out.names.add(pod.name)
        if pod.deleting is not None:
            if now >= pod.deleting + timedelta(seconds=FORCE_AFTER_SECONDS):
                out.force.append(pod.name)
            continue
        needed = {item for item in items if item in wanted}
        if pod.phase in ("Succeeded", "Failed"):
            text = (pod.message or "").strip() if pod.phase == "Succeeded" else ""
            answered = len(text) == len(items) > 0 and all(letter in letters for letter in text)
            answer = dict(zip(items, text, strict=True)) if answered else {}
            out.answers |= {item: letter for item, letter in answer.items() if item in needed}
            if not answered:
                out.failures.append((pod.name, pod.failure or "its answer does not match its request"))
            final_answer = answered and set(text) <= {final}
            if final_answer or not needed or pod.finished is None or now >= pod.finished + rest:
                out.delete.append(pod.name)
            else:
                out.covered |= needed
                out.due.append((pod.finished + rest - now).total_seconds())
                if not answered:
                    out.notes |= dict.fromkeys(needed, f"pod {pod.name} failed ({pod.failure}); tried again shortly")
        elif not needed:
            out.delete.append(pod.name)
        else:
            out.covered |= needed
            state = f"pod {pod.name} is {pod.phase}" + (f" ({pod.waiting})" if pod.waiting else "")
            out.notes |= dict.fromkeys(needed, state)
    return out


def _trusted(pod: PodView, target: Target, owner_uid: str) -> bool:
    """A pod this controller would have made for this work: its owner, claim and image."""
    return pod.owner_uid == owner_uid and pod.claim == target.claim and pod.image == target.image


def _plan(
    settled: _Settled, mine: list[PodView], trusted: list[PodView], create: list[dict[str, Any]], **answers: Any
) -> Plan:
    """The plan either kind of pod ends with: pods of names that exist are not created again, pods
    this controller would not have made are deleted unread."""
    untrusted = [p.name for p in mine if p not in trusted and p.deleting is None]
    names = settled.names | {p.name for p in mine}
    return Plan(
        create=tuple(p for p in create if p["metadata"]["name"] not in names),
        delete=tuple(settled.delete) + tuple(untrusted),
        failures=tuple(settled.failures),
        force_delete=tuple(settled.force),
        recheck_after=min(settled.due, default=None),
        **answers,
    )


def plan_verification(target: Target, wanted: Sequence[Copy], pods: Sequence[PodView], now: datetime) -> Plan:
    """What the verifier pods that answered found on copies still ``wanted``, the pods to delete,
    and pods for the wanted copies no pod is on (one per checkpoint and batch). A pod this
    controller would not have made (another owner, claim or image: an older image's, or anyone
    else's with the label) is deleted unread."""
    mine = [p for p in pods if p.purpose == "verify" and p.checkpoint_uid]
    trusted = [p for p in mine if _trusted(p, target, p.checkpoint_uid)]
    work = [
        (p, [(p.checkpoint_uid, str(r[1]), str(r[2])) for r in _rows(p) if isinstance(r, list) and len(r) == 4])
        for p in trusted
    ]
    settled = _settle(work, {c.id for c in wanted}, LETTERS["ok"], "".join(STATES), now, RECHECK_SECONDS)
    states = {item: STATES[letter] for item, letter in settled.answers.items() if isinstance(item, tuple)}
    todo: dict[str, list[Copy]] = {}
    for copy in wanted:
        if copy.id not in settled.covered and states.get(copy.id) != "ok":
            todo.setdefault(copy.uid, []).append(copy)
    create = [verifier_pod(target, cs[0].checkpoint, uid, batch) for uid, cs in todo.items() for batch in batches(cs)]
    notes: dict[str, str] = {}
    for copy in wanted:
        note = settled.notes.get(copy.id)
        if note and copy.uid not in notes:
            notes[copy.uid] = f"verifying on claim {target.claim!r}: {note}"
    return _plan(settled, mine, trusted, create, copy_states=states, notes=notes)


def _keyed(answers: Mapping[Hashable, str]) -> dict[tuple[str, Writer | None], str]:
    """A collector's answers by (path, writer), the items it was planned with."""
    return {item: letter for item, letter in answers.items() if isinstance(item, tuple)}


def plan_collection(
    target: Target,
    trainer_uid: str,
    wanted: Mapping[str, Writer | str],
    pods: Sequence[PodView],
    now: datetime,
    rest_seconds: float = RECHECK_SECONDS,
) -> Plan:
    """Checkpoint directories the collector pods deleted, the pods to delete, failures (a pod without
    an answer, or one that could not delete a directory), and pods for the directories ``wanted``
    gone that no pod is on: one per writer and batch, running as that writer. A directory wanted
    with a reason instead of a writer gets no pod (``left``). A collector running as root (an
    older release's) or as another user than its directories' writer is not believed."""
    mine = [p for p in pods if p.purpose == "collect"]
    trusted = [p for p in mine if _trusted(p, target, trainer_uid) and p.writer is not None]
    work = [(p, [(str(r), p.writer) for r in _rows(p)]) for p in trusted]
    writers = {path: w for path, w in wanted.items() if isinstance(w, Writer)}
    settled = _settle(work, set(writers.items()), DELETED, DELETED + FAILED, now, rest_seconds)
    done = frozenset(path for (path, _), letter in _keyed(settled.answers).items() if letter == DELETED)
    for pod, items in work:
        text = (pod.message or "").strip()
        if pod.phase == "Succeeded" and pod.deleting is None and len(text) == len(items):
            kept = [path for (path, _), letter in zip(items, text, strict=True) if letter == FAILED]
            if kept:
                settled.failures.append((pod.name, f"could not delete {', '.join(kept)} (its log says why)"))
    todo: dict[Writer, list[str]] = {}
    for path, writer in writers.items():
        if (path, writer) not in settled.covered and path not in done:
            todo.setdefault(writer, []).append(path)
    create = [collector_pod(target, trainer_uid, batch, w) for w, paths in todo.items() for batch in batches(paths)]
    left = {path: why for path, why in wanted.items() if isinstance(why, str)}
    return _plan(settled, mine, trusted, create, collected=done, left=left)

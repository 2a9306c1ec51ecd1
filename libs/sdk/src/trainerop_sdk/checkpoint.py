"""Checkpoints from training code (docs/checkpoints.md), with the pod's own identity.

    from trainerop_sdk.checkpoint import Checkpointer
    ckpt = Checkpointer.in_cluster()
    state = ckpt.load()                     # bytes of this replica's shard, or None on a first start
    ckpt.save_on_sigterm(lambda: (serialize(model), step, epoch))   # eviction, spot reclaim
    ...
    ckpt.save(serialize(model), step=step, epoch=epoch)

``save`` writes the replica's shard ``CHECKPOINT_REPLICATION_FACTOR`` times under
``CHECKPOINT_DIR`` and reports the copies and their sha256 in the step's Checkpoint object
(server-side apply: every replica applies its own shard). The checkpoint controller verifies
the copies and commits the checkpoint once every shard has a majority of good ones; a replica
restarted later gets its path in ``RESUME_FROM``. A pod may only report for its own Trainer (an
admission policy checks the pod's ServiceAccount against ``spec.trainer``).

Only the standard library is used, so any training image can carry it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import signal
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from . import s3_multipart
from .kubeapi import APPLY, ApiClient, ApiError
from .layout import S3_SCHEME, checkpoint_name, checkpoint_path, copy_key
from .names import API_VERSION, TRAINER_NAME_LABEL
from .storage import Location, open_location

API = f"/apis/{API_VERSION}"


class CheckpointError(Exception):
    """A checkpoint could not be written, reported or loaded."""


UNREADABLE_EXIT = 143  # as a pod the operator ends: retryable under every restart policy but Never
UNREADABLE_WAIT_SECONDS = 60.0  # how long load() waits for the controller to mark a checkpoint unreadable
UNREADABLE_POLL_SECONDS = 1.0


class CheckpointUnreadable(SystemExit):
    """RESUME_FROM names a checkpoint this replica cannot load: no copy of its shard is there with
    the reported sha256 (reported on the Checkpoint, which the checkpoint controller then marks
    unreadable and stops resuming from), or one already marked so or deleted. The process must end
    so that its replacement gets the previous committed checkpoint, the one every rank resumes
    from: a SystemExit (exit code 143), so that no ``except Exception`` around ``load()`` starts
    training from scratch instead."""

    def __init__(self, message: str) -> None:
        super().__init__(UNREADABLE_EXIT)
        self.message = message

    def __str__(self) -> str:
        return self.message


def default_shard(env: Mapping[str, str]) -> int:
    """This replica's shard: torchrun's node rank, else the operator's CHECKPOINT_SHARD (the
    master or chief 0, then the workers), else its rank where the framework has one, else its
    replica index."""
    # torchrun: GROUP_RANK is the node's rank (RANK counts processes); one process per pod saves.
    for name in ("GROUP_RANK", "CHECKPOINT_SHARD", "RANK", "PROCESS_ID", "REPLICA_INDEX"):
        if env.get(name, "").isdigit():
            return int(env[name])
    return 0


def default_shards(env: Mapping[str, str]) -> int:
    """How many shards a checkpoint has: torchrun's GROUP_WORLD_SIZE (the nodes of the current
    rendezvous: an elastic run's membership changes without new pods, and torchrun restarts the
    worker processes with the new size), else the operator's CHECKPOINT_SHARDS (the replicas that
    write a shard as the run was admitted: docs/checkpoints.md)."""
    for name in ("GROUP_WORLD_SIZE", "CHECKPOINT_SHARDS"):
        if env.get(name, "").isdigit() and int(env[name]) > 0:
            return int(env[name])
    return 1


def _ending(message: str) -> CheckpointUnreadable:
    """The exit of a pod that cannot resume, said on stderr first (a SystemExit with a code prints
    nothing): the pod's log says why it ended."""
    print(f"checkpoint: {message}; exiting with {UNREADABLE_EXIT}", file=sys.stderr, flush=True)
    return CheckpointUnreadable(message)


def _not_resumable(obj: Mapping[str, Any]) -> str:
    """Why the Checkpoint ``obj`` is no longer resumed from ("" while it is)."""
    status = obj.get("status") or {}
    if status.get("phase") == "Failed":
        return f"is never resumed from ({status.get('reason')}: {status.get('message', '')})"
    if status.get("phase") == "GarbageCollected":
        return "was garbage-collected (its data is deleted)"
    return ""


def _first_good_copy(location: Location, report: Mapping[str, Any]) -> tuple[bytes | None, dict[str, str]]:
    """The first copy with the reported sha256, else what each copy was: ``missing``, ``sha256
    mismatch``, or ``error: ...`` (the storage could not answer: no verdict)."""
    found: dict[str, str] = {}
    for key in report["copies"]:
        try:
            data = location.get(key)
        except Exception as err:  # S3 or the file system: retried by the client already
            found[key] = f"error: {type(err).__name__}: {str(err)[:80]}"
            continue
        if data is not None and hashlib.sha256(data).hexdigest() == report["sha256"]:
            return data, found
        found[key] = "missing" if data is None else "sha256 mismatch"
    return None, found


@dataclass
class Checkpointer:
    api: ApiClient
    trainer: str
    directory: str  # CHECKPOINT_DIR
    resume_from: str = ""  # RESUME_FROM
    replication: int = 1
    shards: int = 1
    shard: int = 0
    trainer_uid: str = ""
    writer: str = "trainer"  # the pod's name: the field manager of its shard report
    env: Mapping[str, str] = field(default_factory=dict)  # the AWS_* variables for s3:// storage

    @classmethod
    def in_cluster(cls, api: ApiClient | None = None, env: Mapping[str, str] | None = None) -> Checkpointer:
        """From the environment the operator gives every training pod."""
        env = dict(os.environ if env is None else env)
        if not env.get("CHECKPOINT_DIR"):
            raise CheckpointError("CHECKPOINT_DIR is not set: the Trainer has no spec.checkpoint")
        return cls(
            api=api or ApiClient.in_cluster(),
            trainer=env["TRAINER_NAME"],
            directory=env["CHECKPOINT_DIR"],
            resume_from=env.get("RESUME_FROM", ""),
            replication=int(env.get("CHECKPOINT_REPLICATION_FACTOR", "1")),
            shards=default_shards(env),
            shard=default_shard(env),
            trainer_uid=env.get("TRAINER_UID", ""),
            writer=env.get("POD_NAME") or env.get("HOSTNAME", "trainer"),
            env=env,
        )

    def save(self, data: bytes, step: int, epoch: int, shard: int | None = None, shards: int | None = None) -> str:
        """Write this replica's shard of ``step`` and report it; returns the Checkpoint's name.

        ``step`` must grow over the whole run (a global step): it names the checkpoint. The first
        replica to report a step fixes its shard count; a shard already reported for the step is
        kept as it is (a replica that replays a step after a restart must not overwrite a
        checkpoint that may have committed)."""
        digest = hashlib.sha256(data).hexdigest()
        return self._write(step, epoch, shard, shards, digest, len(data), lambda loc, key: loc.put(key, data))

    def save_file(self, path: str, step: int, epoch: int, shard: int | None = None, shards: int | None = None) -> str:
        """As :meth:`save`, from a file the training code wrote (a shard of any size: read twice in
        chunks — to hash it, then to write each copy, multipart on S3 — never held in memory)."""
        digest, size = hashlib.sha256(), 0
        # A multipart upload's checksum (S3 keeps it), computed in the same pass, so the operator
        # can verify those copies without reading them.
        part = s3_multipart.part_bytes(os.path.getsize(path)) if self._multipart() else None
        parts = s3_multipart.PartsHasher(part) if part else None
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
                if parts is not None:
                    parts.update(chunk)
                size += len(chunk)
        sha = digest.hexdigest()
        extra = {"partsSha256": parts.checksum()} if parts is not None else {}
        put: Callable[[Location, str], None] = lambda loc, key: loc.put_file(key, path, sha, size)  # noqa: E731
        return self._write(step, epoch, shard, shards, sha, size, put, extra)

    def _file_owner(self) -> dict[str, int]:
        """Who wrote the copies on a claim (its files are this process's): the checkpoint
        controller's collector deletes them as that user, never as root. Nothing on S3."""
        if self.directory.startswith(S3_SCHEME):
            return {}
        return {"writerUid": os.geteuid(), "writerGid": os.getegid()}

    def _multipart(self) -> bool:
        """Whether a file's copies go up as multipart uploads (S3 with boto3, for a large one)."""
        return self.directory.startswith(S3_SCHEME) and s3_multipart.available()

    def _write(
        self,
        step: int,
        epoch: int,
        shard: int | None,
        shards: int | None,
        sha256: str,
        size: int,
        put: Callable[[Location, str], None],
        extra: Mapping[str, str] | None = None,
    ) -> str:
        """Every copy of the shard with ``put``, then the report (a reader never trusts a copy the
        report does not vouch for: an interrupted write leaves nothing that looks committed)."""
        shard = self.shard if shard is None else shard
        shards = self.shards if shards is None else shards
        name = checkpoint_name(self.trainer, step)
        path, replication = checkpoint_path(self.directory, step), self.replication
        existing = self._existing(name)
        if existing is not None:  # take the first reporter's settings: shared, never conflicting
            spec = existing.get("spec", {})
            if any(s.get("index") == shard for s in spec.get("shards", [])):
                return name
            shards, replication = int(spec.get("shardCount", shards)), int(spec.get("replicationFactor", replication))
            epoch = int(spec.get("epoch", epoch))  # the path is this Trainer's own, never taken from the object
        if not 0 <= shard < shards:
            raise CheckpointError(f"shard {shard} is not one of the {shards} shards of {name}; pass shard= and shards=")
        location = open_location(path, self.env)
        keys = [copy_key(shard, r) for r in range(replication)]
        t0 = time.monotonic()
        for key in keys:
            put(location, key)
        seconds = time.monotonic() - t0
        report: dict[str, Any] = {"index": shard, "sha256": sha256, "size": size, "copies": keys}
        report |= {"writeSeconds": round(seconds, 3)} | dict(extra or {}) | self._file_owner()
        return self.report(step, epoch, path, shards, report, replication)

    def _existing(self, name: str) -> dict[str, Any] | None:
        """The step's Checkpoint if some replica reported it already (and it is this Trainer's)."""
        try:
            obj = self.api.request("GET", f"{API}/namespaces/{self.api.namespace}/checkpoints/{name}")
        except ApiError as err:
            if err.code == 404:
                return None
            raise CheckpointError(f"reading {name}: {err}") from err
        owners = {ref.get("uid") for ref in obj.get("metadata", {}).get("ownerReferences", [])}
        if self.trainer_uid and owners and self.trainer_uid not in owners:
            raise CheckpointError(
                f"{name} belongs to an earlier Trainer named {self.trainer}; it goes when that one's deletion "
                "completes (or delete it), then save again"
            )
        return obj

    def report(
        self,
        step: int,
        epoch: int,
        path: str,
        shards: int,
        shard: dict[str, Any],
        replication: int | None = None,
        retried: bool = False,
    ) -> str:
        """Apply this replica's shard to the step's Checkpoint, creating it if it is the first.
        Every reporter applies the same spec values (taken from the object once it exists), so
        they share ownership of them and each owns its shard entry."""
        name = checkpoint_name(self.trainer, step)
        metadata: dict[str, Any] = {"name": name, "labels": {TRAINER_NAME_LABEL: self.trainer}}
        if self.trainer_uid:
            metadata["ownerReferences"] = [
                {"apiVersion": API_VERSION, "kind": "Trainer", "name": self.trainer, "uid": self.trainer_uid}
            ]
        spec: dict[str, Any] = {
            "trainer": self.trainer,
            "epoch": epoch,
            "step": step,
            "path": path,
            "shardCount": shards,
            "replicationFactor": self.replication if replication is None else replication,
            "shards": [shard],
        }
        body = {"apiVersion": API_VERSION, "kind": "Checkpoint", "metadata": metadata, "spec": spec}
        # One field manager per shard: a later apply of another shard (the same pod may write several)
        # must not take back this one.
        manager = f"trainerop-sdk/{self.writer}/shard-{shard['index']}"[-128:]
        try:
            self.api.request(
                "PATCH",
                f"{API}/namespaces/{self.api.namespace}/checkpoints/{name}?fieldManager={manager}",
                body,
                APPLY,
            )
        except ApiError as err:
            existing = self._existing(name) if err.code == 409 and not retried else None
            if existing is not None:
                # Another replica created it first with other settings: take them.
                s = existing["spec"]
                return self.report(step, s["epoch"], s["path"], s["shardCount"], shard, s["replicationFactor"], True)
            raise CheckpointError(f"reporting shard {shard['index']} of {name}: {err}") from err
        return name

    def load(self, shard: int | None = None) -> bytes | None:
        """This replica's shard of the checkpoint in RESUME_FROM (None on a first start): the first
        copy whose sha256 matches what was reported, so one bad copy does not stop a resume.

        When no copy is there with that sha256 (each missing or different; a storage error is no
        verdict: CheckpointError), the shard is reported unreadable on the Checkpoint, ``load``
        waits (up to UNREADABLE_WAIT_SECONDS) for the checkpoint controller to mark it so and
        move the run's resume point to the previous committed checkpoint, and raises
        :class:`CheckpointUnreadable`: the process ends, and the pod that replaces it resumes from
        there, as every rank does (docs/checkpoints.md)."""
        if not self.resume_from:
            return None
        shard = self.shard if shard is None else shard
        match = re.search(r"/step-(\d+)/?$", self.resume_from)
        if match is None:
            raise CheckpointError(f"RESUME_FROM {self.resume_from!r} is not a checkpoint path")
        name = checkpoint_name(self.trainer, int(match.group(1)))
        obj = self._checkpoint(name)
        gone = _not_resumable(obj)
        if gone:
            raise _ending(f"{name} {gone}; this pod's replacement resumes from the run's current one")
        reports = {s["index"]: s for s in obj.get("spec", {}).get("shards", [])}
        if shard not in reports:
            raise CheckpointError(f"{name} has no shard {shard} (it has {sorted(reports)})")
        report = reports[shard]
        data, found = _first_good_copy(open_location(self.resume_from, self.env), report)
        if data is not None:
            return data
        problem = ", ".join(f"{key}: {state}" for key, state in found.items())
        if any(state.startswith("error") for state in found.values()):
            raise CheckpointError(f"no copy of shard {shard} of {name} could be read ({problem}); not reported")
        self._report_unreadable(obj, shard, problem)
        marked = self._await_mark(name)
        after = (
            "the checkpoint controller marked it unreadable: this pod's replacement resumes from the previous "
            "committed checkpoint"
            if marked
            else f"the checkpoint controller did not mark it unreadable within {UNREADABLE_WAIT_SECONDS:.0f}s: "
            "this pod's replacement tries again"
        )
        raise _ending(f"no copy of shard {shard} of {name} matches its sha256 ({problem}); reported it, and {after}")

    def _checkpoint(self, name: str) -> dict[str, Any]:
        try:
            return self.api.request("GET", f"{API}/namespaces/{self.api.namespace}/checkpoints/{name}")
        except ApiError as err:
            raise CheckpointError(f"reading {name}: {err}") from err

    def _report_unreadable(self, obj: Mapping[str, Any], shard: int, problem: str) -> None:
        """Apply this shard's entry of ``spec.unreadable`` (its own field manager; kept as the first
        pod to find it unreadable said it)."""
        name = obj["metadata"]["name"]
        if any(u.get("index") == shard for u in obj.get("spec", {}).get("unreadable") or ()):
            return
        entry = {"index": shard, "pod": self.writer, "problem": problem[:512]}
        body = {
            "apiVersion": API_VERSION,
            "kind": "Checkpoint",
            "metadata": {"name": name},
            "spec": {"unreadable": [entry]},
        }
        manager = f"trainerop-sdk/{self.writer}/unreadable-{shard}"[-128:]
        path = f"{API}/namespaces/{self.api.namespace}/checkpoints/{name}?fieldManager={manager}"
        try:
            self.api.request("PATCH", path, body, APPLY)
        except ApiError as err:
            raise CheckpointError(f"reporting shard {shard} of {name} unreadable: {err}") from err

    def _await_mark(self, name: str) -> bool:
        """Whether the checkpoint controller marked ``name`` no longer resumable in time (it does so
        once the run's new resume point is written)."""
        deadline = time.monotonic() + UNREADABLE_WAIT_SECONDS
        while True:
            with contextlib.suppress(CheckpointError):  # a read that fails is not an answer
                if _not_resumable(self._checkpoint(name)):
                    return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(UNREADABLE_POLL_SECONDS)

    def save_on_sigterm(self, state: Callable[[], tuple[bytes, int, int]], hard_exit: bool = False) -> None:
        """On SIGTERM (eviction, spot reclaim, scale-down) save ``state()`` -> (data, step, epoch)
        and exit 143, even if the save fails (a failed save must not turn a reclaim into a failed
        run); the pod's grace period (terminationGracePeriodSeconds) bounds the save. A second
        SIGTERM during the save does not start another one. ``hard_exit`` leaves with os._exit,
        skipping exit handlers: JAX's waits at a shutdown barrier for peers that may be gone."""
        saving = False

        def handler(signum: int, _frame: FrameType | None) -> None:
            nonlocal saving
            if saving:
                return
            saving = True
            try:
                data, step, epoch = state()
                self.save(data, step, epoch)
            except Exception as err:
                # Unbuffered: the signal may have come while the main thread was inside a write to
                # sys.stderr, where a buffered print would raise (a reentrant call) and lose the exit.
                os.write(2, f"checkpoint on SIGTERM failed: {err}\n".encode(errors="replace"))
            finally:
                if hard_exit:
                    for stream in (sys.stdout, sys.stderr):
                        with contextlib.suppress(Exception):  # the same reentrancy: flushed if it can be
                            stream.flush()
                    os._exit(128 + signum)
                raise SystemExit(128 + signum)

        signal.signal(signal.SIGTERM, handler)

"""Progress heartbeats from training code (docs/trainer.md), with the pod's own identity.

Each training pod has a Lease named after the pod, created by its first heartbeat (owned by
the Trainer, so it goes with it). The pods' ServiceAccount may create and renew only the Lease
named like the pod its token is bound to (the API server's admission policy
trainer-operator-checkpoint-reporters), so a pod can never report progress for another. A heartbeat renews
the Lease and records in its annotations the epochs done and the step, the run's total steps
when given, the pace this process measured (seconds per step and per epoch since its first beat)
and a few metrics; the trainer controller folds them into ``Trainer.status.progress`` (percent
done, an estimated completion time, the latest metrics) and detects stalls when they stop. A
beat's answer carries back a save the operator asks for before a disruption (a reclaimed or
drained node, a user's `kubectl trainer checkpoint`): ``save_requested(step)`` is true at the step
every rank of the run is asked to save at.

    from trainerop_sdk.heartbeat import Heartbeat
    beat = Heartbeat.in_cluster()
    for epoch in range(ctx.epochs):
        ...
        for batch in ...:
            ...
            if beat.save_requested(global_step):
                checkpointer.save(state_bytes, step=global_step, epoch=epoch)
        beat.send(epoch=epoch + 1, step=global_step, total_steps=ctx.epochs * steps_per_epoch, metrics={"loss": loss})

Only the standard library is used, so any training image can carry it.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from .kubeapi import MERGE, SA_DIR, ApiClient, ApiError
from .names import (
    API_VERSION,
    EPOCH_ANNOTATION,
    MAX_METRICS,
    METRIC_NAME,
    METRICS_ANNOTATION,
    REPLICA_INDEX_LABEL,
    REPLICA_TYPE_LABEL,
    SAVE_AT_STEP_ANNOTATION,
    SECONDS_PER_EPOCH_ANNOTATION,
    SECONDS_PER_STEP_ANNOTATION,
    STEP_ANNOTATION,
    STEPS_PER_BEAT_ANNOTATION,
    TOTAL_STEPS_ANNOTATION,
    TRAINER_NAME_LABEL,
    TRAINER_UID_LABEL,
)

# A Lease's annotations as a heartbeat sends them: None removes one this beat does not know (a
# pace measured by an earlier process of the pod, say).
Annotations = dict[str, str | None]


class HeartbeatError(Exception):
    """The API server refused or could not be reached; training may go on and retry later."""


FENCED_EXIT = 143  # as if stopped by SIGTERM: the operator ended this pod


class Fenced(SystemExit):
    """This pod no longer exists in the API: the token it is bound to was refused (401), so its
    pod object was deleted — the operator replaced it (a node that stopped answering, then came
    back). Another pod may now hold this rank: this one must stop training at once. A SystemExit,
    so a generic ``except Exception`` around the heartbeat cannot keep a fenced rank running."""

    def __init__(self, lease: str) -> None:
        super().__init__(FENCED_EXIT)
        self.message = (
            f"pod {lease} was deleted (its token is refused): its rank belongs to a replacement now; stopping"
        )

    def __str__(self) -> str:
        return self.message


def micro_time(moment: datetime) -> str:
    """Kubernetes MicroTime, as Lease.spec.renewTime wants it."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class ReplicaIdentity:
    """Whose Lease it is: the pod's Trainer and place in it (the operator's env contract)."""

    trainer: str
    trainer_uid: str
    role: str
    index: str

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ReplicaIdentity | None:
        keys = ("TRAINER_NAME", "TRAINER_UID", "REPLICA_TYPE", "REPLICA_INDEX")
        return cls(*(env[k] for k in keys)) if all(env.get(k) for k in keys) else None


@dataclass
class Pace:
    """How fast this process trains: seconds per step and per epoch since its first beat (the
    first epoch's compilation and the rendezvous before it are not training)."""

    first: tuple[datetime, int, int] | None = None  # (when, epoch, step) of the first beat

    def measure(self, now: datetime, epoch: int, step: int) -> tuple[float | None, float | None]:
        """Seconds per step and per epoch (None: not moved since the first beat); progress going
        back (the process resumed from an earlier checkpoint) starts the measurement over."""
        if self.first is None or epoch < self.first[1] or step < self.first[2]:
            self.first = (now, epoch, step)
            return None, None
        since, epoch0, step0 = self.first
        elapsed = (now - since).total_seconds()
        per_step = elapsed / (step - step0) if step > step0 and elapsed > 0 else None
        per_epoch = elapsed / (epoch - epoch0) if epoch > epoch0 and elapsed > 0 else None
        return per_step, per_epoch


@dataclass
class Exchange:
    """What this process's beats carry back and forth: the step of its last beat (to report the
    steps between beats) and the step the operator asked it to save at, as the Lease its last beat
    renewed says (docs/checkpoints.md: before a disruption every rank saves at one step)."""

    last_step: int | None = None
    save_at: int | None = None

    def steps_since_last(self, step: int) -> int | None:
        """Steps since the previous beat (None: the first beat, or no step forward)."""
        before, self.last_step = self.last_step, step
        return step - before if before is not None and step > before else None

    def read(self, lease: object) -> None:
        """The save request on the Lease a beat renewed (the API server's answer to it)."""
        meta = lease.get("metadata") if isinstance(lease, dict) else None
        annotations = meta.get("annotations") if isinstance(meta, dict) else None
        value = annotations.get(SAVE_AT_STEP_ANNOTATION) if isinstance(annotations, dict) else None
        self.save_at = int(value) if isinstance(value, str) and value.isdigit() else None


def metrics_json(metrics: Mapping[str, float]) -> str:
    """The metrics annotation: at most MAX_METRICS names (letters, digits, _ . -) of finite numbers,
    six significant digits each. Anything else is the caller's mistake, said at once."""
    if len(metrics) > MAX_METRICS:
        raise ValueError(f"at most {MAX_METRICS} metrics per heartbeat (got {len(metrics)}): report the ones to watch")
    out = {}
    for name, value in sorted(metrics.items()):
        if not re.match(METRIC_NAME, name):
            raise ValueError(f"metric name {name!r}: use letters, digits, '_', '.' or '-' (at most 63)")
        number = float(value)
        if not math.isfinite(number):
            raise ValueError(f"metric {name} is {number}: only finite numbers are reported")
        out[name] = float(f"{number:.6g}")
    return json.dumps(out, separators=(",", ":"))


def seconds_text(seconds: float | None) -> str | None:
    return None if seconds is None else f"{seconds:.4g}"


@dataclass(frozen=True)
class Heartbeat:
    server: str  # https://host:port
    token: str
    namespace: str
    lease: str  # the pod's name
    ca_file: str | None = None
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    replica: ReplicaIdentity | None = None  # to create the Lease on the first beat (None: it must exist)
    token_file: str | None = None  # read again when the token is refused (the kubelet rotates it)
    pace: Pace = field(default_factory=Pace, compare=False)  # this process's beats so far
    exchange: Exchange = field(default_factory=Exchange, compare=False)

    @classmethod
    def in_cluster(cls) -> Heartbeat:
        """From the pod's environment: the mounted ServiceAccount token and the pod's name."""
        try:
            api = ApiClient.in_cluster()
        except ApiError as err:
            raise HeartbeatError(str(err)) from err
        lease = os.environ.get("POD_NAME") or os.environ["HOSTNAME"]
        replica = ReplicaIdentity.from_env(os.environ)
        return cls(
            api.server, api.token, api.namespace, lease, api.ca_file, replica=replica, token_file=str(SA_DIR / "token")
        )

    def report(
        self, epoch: int, step: int, total_steps: int | None = None, metrics: Mapping[str, float] | None = None
    ) -> Annotations:
        """The annotations of a beat at ``epoch`` (epochs done) and ``step``; it measures the pace."""
        if total_steps is not None and total_steps < 1:
            raise ValueError(f"total_steps must be at least 1 (got {total_steps}), or None when unknown")
        per_step, per_epoch = self.pace.measure(self.clock(), epoch, step)
        per_beat = self.exchange.steps_since_last(step)
        return ({STEPS_PER_BEAT_ANNOTATION: str(per_beat)} if per_beat else {}) | {
            EPOCH_ANNOTATION: str(epoch),
            STEP_ANNOTATION: str(step),
            TOTAL_STEPS_ANNOTATION: None if total_steps is None else str(total_steps),
            SECONDS_PER_STEP_ANNOTATION: seconds_text(per_step),
            SECONDS_PER_EPOCH_ANNOTATION: seconds_text(per_epoch),
            METRICS_ANNOTATION: None if not metrics else metrics_json(metrics),
        }

    def save_requested(self, step: int) -> bool:
        """Whether the operator asked this rank to save a checkpoint at ``step``: call it every
        step and save when true (every rank of the run is asked the same step, so the shards form
        one checkpoint). Read from the last heartbeat's answer, so it costs no request."""
        return self.exchange.save_at == step

    def patch_body(self, annotations: Annotations) -> dict[str, object]:
        return {"metadata": {"annotations": annotations}, "spec": {"renewTime": micro_time(self.clock())}}

    def lease_body(self, replica: ReplicaIdentity, annotations: Annotations) -> dict[str, object]:
        """The Lease the first heartbeat creates: labelled like the pod, owned by the Trainer."""
        labels = {
            TRAINER_NAME_LABEL: replica.trainer,
            REPLICA_TYPE_LABEL: replica.role,
            REPLICA_INDEX_LABEL: replica.index,
            TRAINER_UID_LABEL: replica.trainer_uid,
        }
        owner = {"apiVersion": API_VERSION, "kind": "Trainer", "name": replica.trainer, "uid": replica.trainer_uid}
        known = {k: v for k, v in annotations.items() if v is not None}
        meta = {"name": self.lease, "labels": labels, "annotations": known}
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {**meta, "ownerReferences": [owner]},
            "spec": {"holderIdentity": self.lease, "renewTime": micro_time(self.clock())},
        }

    def send(
        self,
        epoch: int,
        step: int = 0,
        timeout: float = 5.0,
        *,
        total_steps: int | None = None,
        metrics: Mapping[str, float] | None = None,
    ) -> None:
        """Renew the pod's Lease with the epochs done, the step and, when known, the run's total
        steps and a few metrics (``{"loss": 0.12}``: at most 8, names of letters, digits, _ . -);
        the first beat creates it. Raises :class:`Fenced` when the pod's own token is refused even
        as freshly read: the pod was deleted and its rank given to a replacement; ValueError for
        metrics or a total it cannot report."""
        annotations = self.report(epoch, step, total_steps, metrics)
        tokens = [self.token] + ([t] if (t := self._fresh_token()) and t != self.token else [])
        for attempt, token in enumerate(tokens):
            try:
                lease = self._beat(ApiClient(self.server, token, self.namespace, self.ca_file), annotations, timeout)
                self.exchange.read(lease)
                return
            except ApiError as err:
                if err.code == 401 and attempt == len(tokens) - 1:
                    raise Fenced(self.lease) from err
                if err.code != 401:
                    raise HeartbeatError(f"heartbeat to lease {self.lease}: {err}") from err

    def _fresh_token(self) -> str | None:
        if self.token_file is None:
            return None
        try:
            return Path(self.token_file).read_text().strip()
        except OSError:
            return None

    def _beat(self, api: ApiClient, annotations: Annotations, timeout: float) -> dict[str, object]:
        """One attempt per call (the next beat is the retry): training does not wait on an
        unreachable API server. Returns the Lease as renewed."""
        leases = f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases"

        def renew() -> dict[str, object]:
            path = f"{leases}/{self.lease}"
            return api.request("PATCH", path, self.patch_body(annotations), MERGE, timeout, attempts=1)

        try:
            return renew()
        except ApiError as err:
            if err.code != 404 or self.replica is None:
                raise
        try:
            return api.request("POST", leases, self.lease_body(self.replica, annotations), timeout=timeout, attempts=1)
        except ApiError as err:
            if err.code != 409:
                raise
            return renew()  # another process of the pod (a local rank) created it first: renew that one

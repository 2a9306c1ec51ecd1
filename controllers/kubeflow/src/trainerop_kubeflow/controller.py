"""kopf adapter of the kubeflow controller: Kubeflow v1 jobs carried out by Trainers
(docs/kubeflow.md, docs/design/kubeflow-v1.md).

Each job kind has a work queue of its own, fed by a watch of the kind; a job's reconcile applies
its Trainer and writes its status (``decide``). The runtime watches Trainers as every controller
does; a Trainer owned by a job only brings its job's reconcile forward, and one deleted makes its
job's reconcile make it again (this controller writes no part of Trainer.status). Jobs deleted while
a watch was away are forgotten when its relist converges, as Trainers are.
"""

import functools
import logging
import time
from dataclasses import replace
from datetime import datetime
from typing import Any

import kopf
from lightkube import ApiError

from trainerop_common.api import kind_info
from trainerop_common.api.kubeflow import KUBEFLOW_API_VERSION
from trainerop_common.cache import Key, Relists
from trainerop_common.clock import rfc3339
from trainerop_common.contracts import KUBEFLOW_JOB_KIND_LABEL
from trainerop_common.kube import is_namespace_terminating, is_not_found
from trainerop_common.lookup import CachedLookup
from trainerop_common.metrics import RECONCILE_DURATION, WATCHED
from trainerop_common.names import field_manager
from trainerop_common.objects import managers_only, metadata_only
from trainerop_common.outcome import Outcome, StatusSection
from trainerop_common.process import run_entrypoint
from trainerop_common.runtime import Body, Runtime
from trainerop_common.status_writer import resource_version
from trainerop_common.watch_events import on_event
from trainerop_common.workqueue import WorkQueue, key_of

from .config import KubeflowConfig
from .convert import replica_specs
from .decide import APPLIED_ANNOTATION, Decision, Observed, decide
from .kinds import JOB_KINDS, JobKind
from .mirror import Job, refused_status

log = logging.getLogger("trainerop.kubeflow")
# What the API server answers a request it refuses for what it holds (invalid, forbidden, or a
# webhook's denial): a retry would be refused the same.
REFUSED_CODES = (400, 403, 422)


def upstream_validator(kind: JobKind) -> str:
    """The name of the validating webhook Kubeflow's own operator registers for ``kind``."""
    return f"validator.{kind.kind.lower()}.training-operator.kubeflow.org"


def owning_job(trainer: Body) -> tuple[str, str] | None:
    """(kind, name) of the Kubeflow job that owns ``trainer``, if one does."""
    for ref in trainer.get("metadata", {}).get("ownerReferences") or ():
        if ref.get("apiVersion") == KUBEFLOW_API_VERSION and ref.get("controller") and ref.get("kind") in JOB_KINDS:
            return str(ref["kind"]), str(ref["name"])
    return None


class KubeflowController:
    name = "kubeflow"
    section = StatusSection((), ())  # it writes no part of Trainer.status
    trainer_labels = {KUBEFLOW_JOB_KIND_LABEL: kopf.PRESENT}  # only the Trainers it made

    def __init__(self, runtime: Runtime, config: KubeflowConfig) -> None:
        self.rt = runtime
        self.queues = {
            name: WorkQueue(runtime.tasks, functools.partial(self._reconcile_job, kind), limit=runtime.config.workers)
            for name, kind in JOB_KINDS.items()
        }
        self.webhooks: CachedLookup[str, set[str]] = CachedLookup(
            lambda _: runtime.kube.validating_webhooks(), config.upstream_check_seconds, runtime.clock
        )
        self.relists = {name: self._relists(kind) for name, kind in JOB_KINDS.items()}
        self.manager = field_manager(self.name)
        self._said: dict[Key, tuple[int, str]] = {}  # (generation, reason) of the last Event per job
        self._applied: dict[Key, str] = {}  # the digest of the Trainer last applied per job (Observed.applied)
        self._wrote: dict[Key, int] = {}  # the job's resourceVersion this controller's last status write made
        self._counts_held: dict[Key, datetime] = {}  # since when a change of a job's counts alone waits
        for name, queue in self.queues.items():
            WATCHED.labels(self.name, name).set_function(functools.partial(len, queue.objects))

    def _relists(self, kind: JobKind) -> Relists:
        """Jobs of ``kind`` deleted in a watch's gap: forgotten once the relist is read."""

        async def listed() -> set[Key]:
            return {key_of(j) for j in await self.rt.kube.list_all(kind.kind, metadata_only)}

        return Relists(listed, lambda: self.queues[kind.kind].objects.keys(), functools.partial(self._forget, kind))

    def _forget(self, kind: JobKind, key: Key) -> None:
        self.queues[kind.kind].drop(key)
        self._said.pop(key, None)
        self._applied.pop(key, None)
        self._wrote.pop(key, None)
        self._counts_held.pop(key, None)

    def register(self, registry: kopf.OperatorRegistry, runtime: Runtime) -> None:
        for name, kind in JOB_KINDS.items():
            info = kind_info(name)
            on_event(registry, (info.group, info.version, info.plural), functools.partial(self._on_job, kind))
        runtime.every(runtime.config.resync_seconds, self._resync_jobs, "resync of Kubeflow jobs")

    def _on_job(self, kind: JobKind, event_type: str | None, body: dict[str, Any]) -> None:
        queue = self.queues[kind.kind]
        self.relists[kind.kind].seen(key_of(body), event_type)
        if event_type == "DELETED":
            if queue.forget(body):
                self._said.pop(key_of(body), None)
            return
        queue.poke(key_of(queue.seen(managers_only(body))))

    async def _resync_jobs(self) -> None:
        """Every job reconciled once, after those gone are forgotten (a relist that found none of a
        kind left ends without an object to start its convergence)."""
        for name, queue in self.queues.items():
            try:
                await self.relists[name].converge()
            except Exception as err:  # the API server away: the jobs are reconciled all the same
                log.warning("listing %s jobs failed: %s", name, err)
            for key in list(queue.objects):
                await queue.process(key)

    async def reconcile(self, body: Body) -> Outcome:
        """A Trainer changed: its job's status follows (nothing else to do with Trainers)."""
        self._poke_owner(body)
        return Outcome()

    def trainer_gone(self, last: Body) -> None:
        """A job's Trainer deleted (by hand, or in a watch's gap): the job's reconcile makes it again
        unless the job is finished or going too."""
        owner = owning_job(last)
        if owner is None:
            return
        kind, name = owner
        key = (last["metadata"]["namespace"], name)
        self._applied.pop(key, None)  # what was applied is gone
        if key in self.queues[kind].objects:  # (a job deleted before its Trainer is forgotten already)
            self.rt.tasks.spawn(self._remake(JOB_KINDS[kind], key))

    async def _remake(self, kind: JobKind, key: Key) -> None:
        """The job read afresh before its Trainer is made again, and reconciled as read: one deleted
        in a watch's gap (its Trainer collected meanwhile) is forgotten, one being deleted or made
        again under its name is not given a Trainer owned by what went."""
        queue = self.queues[kind.kind]
        try:
            fresh = await self.rt.kube.get(kind.kind, key[1], key[0])
        except Exception as err:  # the API server away: the reconcile tries, and backs off
            log.warning("reading %s %s/%s failed: %s", kind.kind, *key, err)
            queue.poke(key)
            return
        if fresh is None:
            self._forget(kind, key)
        elif not fresh["metadata"].get("deletionTimestamp"):
            queue.seen(managers_only(fresh))
            queue.poke(key)

    def _poke_owner(self, trainer: Body) -> None:
        owner = owning_job(trainer)
        if owner is not None:
            kind, name = owner
            self.queues[kind].poke((trainer["metadata"]["namespace"], name))

    async def _reconcile_job(self, kind: JobKind, job: Body) -> None:
        key = key_of(job)
        queue = self.queues[kind.kind]
        started, result = time.perf_counter(), "ok"
        if self._before_our_write(job):  # the event of that write brings the job back
            return
        try:
            upstream = upstream_validator(kind) in await self.webhooks.get("")
            trainer, applied, now = self.rt.trainers.get(key), self._applied.get(key), self.rt.clock.now()
            decision = decide(Observed(kind, job, trainer, upstream, now, applied, self._counts_held.get(key)))
            if decision.counts_held:
                self._counts_held.setdefault(key, now)
            else:
                self._counts_held.pop(key, None)
            await self._carry_out(kind, job, decision)
            queue.backoff.reset(key)
            if decision.requeue_after is not None:
                queue.after(key, max(decision.requeue_after, 1.0))
        except ApiError as err:
            if is_not_found(err):  # the job went meanwhile (its DELETED event may be in a watch's gap)
                self._forget(kind, key)
                return
            result = "temporary_error"
            log.warning("reconcile of %s %s/%s failed, retrying in %.0fs: %s", kind.kind, *key, queue.retry(key), err)
        except Exception:  # a bug or a transport error: the next try comes after a backoff, not never
            result = "error"
            log.exception("reconcile of %s %s/%s crashed, retrying in %.0fs", kind.kind, *key, queue.retry(key))
        finally:
            RECONCILE_DURATION.labels(self.name, kind.kind, result).observe(time.perf_counter() - started)
            if key not in queue.objects:  # forgotten meanwhile: nothing of it kept (an Event said, a backoff)
                self._forget(kind, key)

    def _before_our_write(self, job: Body) -> bool:
        """``job`` is older than the version this controller's last status write made: read as it
        is, its status (without what was written) would be written again, with new times."""
        version, wrote = resource_version(job), self._wrote.get(key_of(job))
        return version is not None and wrote is not None and version < wrote

    def _say(self, job: Body, type_: str, reason: str, message: str) -> None:
        """An Event about the job, once per generation and reason (a resync says nothing new)."""
        meta = job["metadata"]
        seen = (int(meta.get("generation", 0)), reason)
        if self._said.get((meta["namespace"], meta["name"])) != seen:
            self._said[(meta["namespace"], meta["name"])] = seen
            self.rt.event(job, type_, reason, message)

    async def _apply_trainer(self, kind: JobKind, job: Body, trainer: dict[str, Any]) -> dict[str, Any] | None:
        """Apply the job's Trainer; what the API server or a webhook refuses of it becomes the job's
        refusal (a status to write; None: applied)."""
        key = key_of(job)
        try:
            await self.rt.kube.apply("Trainer", trainer)
            self._applied[key] = trainer["metadata"]["annotations"][APPLIED_ANNOTATION]
        except ApiError as err:
            if err.status.code not in REFUSED_CODES:
                raise
            if is_namespace_terminating(err):  # the job goes with its namespace
                return None
            message = f"its Trainer was refused: {err.status.message}"
            self._say(job, "Warning", f"{kind.kind}FailedValidation", message)
            if key in self.rt.trainers:  # an update of a running job: the run goes on as it was
                return None
            meta = job["metadata"]
            mirrored = Job(kind, meta["namespace"], meta["name"], tuple(replica_specs(kind, job)))
            return refused_status(mirrored, job.get("status"), [message], rfc3339(self.rt.clock.now()))
        return None

    async def _carry_out(self, kind: JobKind, job: Body, decision: Decision) -> None:
        meta = job["metadata"]
        for type_, reason, message in decision.events:
            self._say(job, type_, reason, message)
        if decision.delete:
            log.info("%s %s/%s: deleted, past its ttlSecondsAfterFinished", kind.kind, meta["namespace"], meta["name"])
            await self.rt.kube.delete(kind.kind, meta["name"], meta["namespace"])
            return
        refused = await self._apply_trainer(kind, job, decision.trainer) if decision.trainer is not None else None
        decision = replace(decision, status=refused) if refused is not None else decision
        if decision.status is not None:
            body = {
                "apiVersion": KUBEFLOW_API_VERSION,
                "kind": kind.kind,
                "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
                "status": decision.status,
            }
            info = kind_info(kind.kind)
            version = await self.rt.kube.apply_status(info, meta["namespace"], meta["name"], body, self.manager)
            if version is not None and version.isdigit():
                self._wrote[key_of(job)] = int(version)


entry = run_entrypoint("kubeflow", KubeflowController, KubeflowConfig)

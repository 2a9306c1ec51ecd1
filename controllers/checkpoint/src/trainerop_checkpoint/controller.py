"""kopf adapter of the checkpoint controller: observes a Trainer's Checkpoints and storage, reads the
copies :func:`decide.copies_to_read` names (on S3 itself, on a claim by pods), decides once, writes
the Checkpoints' status, deletes collected data and returns the Trainer's outcome to the runtime."""

import logging
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import kopf
from lightkube import ApiError

from trainerop_common.api import Checkpoint, Trainer, kind_info
from trainerop_common.api.trainer import TrainerSpec
from trainerop_common.cache import Key, ObjectCache
from trainerop_common.checkpoint_layout import Claim, S3Bucket, StorageLocation, parse_bucket
from trainerop_common.clock import age_seconds, parse_time, rfc3339
from trainerop_common.contracts import GRANT_RECHECK_SECONDS, TRAINER_NAME_LABEL, awaiting_grant
from trainerop_common.kube import is_forbidden
from trainerop_common.lookup import CachedLookup
from trainerop_common.outcome import Outcome, soonest
from trainerop_common.process import run_entrypoint
from trainerop_common.runtime import Body, Runtime
from trainerop_common.status_writer import StatusWriter
from trainerop_common.tracing import record_span

from . import pvc_pods
from .claim_pods import ClaimPods
from .config import CheckpointConfig
from .decide import (
    CHECKPOINT_SECTION,
    FORBIDDEN,
    RECHECK_SECONDS,
    SECTION,
    CheckpointView,
    Collect,
    CopyId,
    CopyState,
    Decision,
    Observed,
    Storage,
    copies_to_read,
    decide,
    judge_storage,
    resume_points,
)
from .metrics import COLLECTED, COMMIT_SECONDS, COMMITS, FAILURES, SAVE_REQUESTS, VERIFIED, WRITE_SECONDS
from .object_store import ObjectStore
from .rank_leases import RankLeases
from .save_request import Latest, SavePlan, is_new, plan_save, trigger_of

log = logging.getLogger("trainerop.checkpoint")
PINNED_SECONDS = 60.0  # how long a reading of the RESUME_FROM of a Trainer's live pods is reused


def checkpoint_view(body: Mapping[str, Any]) -> CheckpointView:
    meta = body["metadata"]
    owners = tuple(ref.get("uid", "") for ref in meta.get("ownerReferences") or ())
    return CheckpointView(
        meta["name"], meta.get("uid", ""), meta.get("creationTimestamp", ""), Checkpoint.model_validate(body), owners
    )


def location_of(bucket: object) -> StorageLocation | None:
    """Where a bucket points (one that does not parse, stored before the CRD's rule: nowhere)."""
    try:
        return parse_bucket(bucket) if isinstance(bucket, str) else None
    except ValueError:
        return None


def claim_of(trainer: Mapping[str, Any]) -> Claim | None:
    """The claim a Trainer checkpoints to, if it does."""
    location = location_of((trainer.get("spec", {}).get("checkpoint") or {}).get("bucket"))
    return location if isinstance(location, Claim) else None


class CheckpointController:
    name = "checkpoint"
    section = SECTION

    def __init__(self, runtime: Runtime, config: CheckpointConfig) -> None:
        self.rt = runtime
        kube = runtime.kube
        by_trainer = lambda o: (o["metadata"].get("namespace", ""), o.get("spec", {}).get("trainer", ""))  # noqa: E731
        self.checkpoints = ObjectCache.for_kind(kube, "Checkpoint", index=by_trainer)
        self.claims = ObjectCache(
            lambda keep: kube.list_core("PersistentVolumeClaim", "", keep), "", "v1", "persistentvolumeclaims"
        )
        # Verifier and collector pods of PVC checkpoints, by (namespace, Trainer).
        storage_pods = ObjectCache(
            lambda keep: kube.list_core("Pod", pvc_pods.PURPOSE_LABEL, keep),
            "",
            "v1",
            "pods",
            {pvc_pods.PURPOSE_LABEL: kopf.PRESENT},
            index=pvc_pods.trainer_of,
        )
        self.claim_pods = ClaimPods(runtime, storage_pods)
        self.object_store = ObjectStore(runtime.clock)
        self.image = config.storage_pod_image
        self.config = config
        self.ranks = RankLeases(kube)
        self.checkpoint_writer = StatusWriter(kube, kind_info("Checkpoint"), self.name, CHECKPOINT_SECTION)
        # Trainer uid -> (when, the RESUME_FROM of its live pods then): _pinned's last reading.
        self.pinned: dict[str, tuple[datetime, frozenset[str]]] = {}
        self.copy_states: dict[CopyId, CopyState] = {}  # what reading each copy found; "ok" is final
        self.reported: set[tuple[str, int]] = set()  # shard write times already observed
        # The Trainers' storage credentials, read once per RECHECK_SECONDS, not on every reconcile.
        # Forbidden is looked at again within a second: the trainer controller grants the right to
        # read in a namespace when it meets the first Trainer there, at the same moment as this one.
        self.credentials: CachedLookup[Key, Mapping[str, str] | None] = CachedLookup(
            self._read_credentials,
            RECHECK_SECONDS,
            runtime.clock,
            ttl_for=lambda found: GRANT_RECHECK_SECONDS if found is FORBIDDEN else RECHECK_SECONDS,
        )

    async def _read_credentials(self, key: Key) -> Mapping[str, str] | None:
        """A credentials Secret's values (None: it does not exist; FORBIDDEN: not readable here)."""
        try:
            return await self.rt.kube.secret_data(*key)
        except ApiError as err:
            if is_forbidden(err):
                return FORBIDDEN
            raise

    def register(self, registry: kopf.OperatorRegistry, runtime: Runtime) -> None:
        self.checkpoints.register(registry, self._checkpoint_changed)
        self.claims.register(registry, self._claim_changed)
        self.claim_pods.pods.register(registry, self._storage_pod_changed)

    def _storage_pod_changed(self, key: Key, body: dict[str, Any], deleted: bool) -> None:
        trainer = (body["metadata"].get("labels") or {}).get(pvc_pods.TRAINER_LABEL)
        if trainer:
            self.rt.requeue([(key[0], trainer)])

    def _checkpoint_changed(self, key: Key, body: dict[str, Any], deleted: bool) -> None:
        trainer = body.get("spec", {}).get("trainer")
        if trainer:
            self.rt.requeue([(key[0], trainer)])
        if deleted:
            self.checkpoint_writer.forget_object(body)
            uid = body["metadata"].get("uid", "")
            self.copy_states = {k: v for k, v in self.copy_states.items() if k[0] != uid}
            self.reported = {k for k in self.reported if k[0] != uid}

    def _claim_changed(self, key: Key, body: dict[str, Any], deleted: bool) -> None:
        namespace, name = key
        users = [k for k, t in self.rt.trainers.items() if k[0] == namespace and claim_of(t) == Claim(name)]
        self.rt.requeue(users)

    async def _storage(self, namespace: str, spec: TrainerSpec) -> tuple[Storage, Mapping[str, str]]:
        """Is the storage there, and the credentials to read it (S3) — never logged."""
        ckpt = spec.checkpoint
        if ckpt is None:
            return Storage(), {}
        location = location_of(ckpt.bucket)
        claim_found = isinstance(location, Claim) and await self.claims.get(namespace, location.name) is not None
        s3 = isinstance(location, S3Bucket)
        secret = await self.credentials.get((namespace, ckpt.credentials_secret or "")) if s3 else None
        storage = judge_storage(ckpt, namespace, claim_found, secret)
        return storage, (secret or {}) if storage.ready else {}

    async def _observe(self, body: Body) -> tuple[Observed, dict[str, dict[str, Any]], Mapping[str, str]]:
        """The Trainer, its Checkpoints (by name, as read) and its storage's credentials."""
        trainer = Trainer.model_validate(body)
        meta, status = body["metadata"], trainer.status
        namespace, name = meta["namespace"], meta["name"]
        raw = {c["metadata"]["name"]: c for c in await self.checkpoints.grouped((namespace, name))}
        views = [checkpoint_view(c) for c in raw.values()]
        self._observe_writes(views)
        storage, env = await self._storage(namespace, trainer.spec)
        progress = status.progress if status else None
        obs = Observed(
            namespace=namespace,
            trainer=name,
            spec=trainer.spec,
            generation=int(meta.get("generation", 0)),
            now=self.rt.clock.now(),
            checkpoints=views,
            copy_states=self.copy_states,
            storage=storage,
            trainer_phase=status.phase if status else None,
            start_time=progress.start_time if progress else None,
            trainer_uid=meta.get("uid", ""),
            published=status.checkpoint.latest if status and status.checkpoint else None,
            annotations=meta.get("annotations") or {},
            renegotiation=status.quota.renegotiation if status and status.quota else None,
            save_request=status.checkpoint.save_request if status and status.checkpoint else None,
        )
        return obs, raw, env

    def _target(self, obs: Observed) -> pvc_pods.Target | None:
        claim = obs.storage.claim
        return pvc_pods.Target(obs.namespace, obs.trainer, claim, self.image) if claim else None

    async def _read(self, obs: Observed, body: Body, env: Mapping[str, str]) -> tuple[Observed, float | None]:
        """Read the copies the decision needs; the observation with what was found, and when to
        look again (a pod on the claim at work or resting)."""
        wanted = copies_to_read(obs)
        target = self._target(obs)
        if target is None:
            if wanted:
                self.copy_states.update(await self.object_store.read(wanted, env))
            return replace(obs, copy_states=self.copy_states, now=self.rt.clock.now()), None
        states, notes, recheck = await self.claim_pods.read(target, body, wanted)
        for key, state in states.items():
            if self.copy_states.get(key) not in (state, "ok"):  # ok is final
                VERIFIED.labels(state, "read").inc()  # (a pod on the claim read the data)
                self.copy_states[key] = state
        return replace(obs, copy_states=self.copy_states, notes=notes, now=self.rt.clock.now()), recheck

    async def reconcile(self, body: Body) -> Outcome:
        obs, raw, env = await self._observe(body)
        if awaiting_grant(obs.storage.reason == "CredentialsNotReadable", age_seconds(body, self.rt.clock.now())):
            return Outcome(requeue_after=GRANT_RECHECK_SECONDS)  # no answer yet: the gate waits
        obs, recheck = await self._read(obs, body, env)
        decision = decide(obs)
        if decision.collect:  # data would go: not what a live pod was told to resume from
            collected = {c.path for c in decision.collect}
            obs = replace(obs, pinned=await self._pinned(obs))
            decision = decide(obs)
            if collected - {c.path for c in decision.collect}:  # held for a live pod: looked at again
                recheck = soonest(recheck, PINNED_SECONDS)
        assert self.rt.writer is not None
        stale = self.rt.writer.is_stale(body)
        save = await self._save(obs, decision.status.get("checkpoint"), stale)
        if save.request is not None:
            decision.status["checkpoint"]["saveRequest"] = save.request.to_k8s()
        now = rfc3339(self.rt.clock.now())
        for checkpoint, wanted in decision.checkpoints.items():
            if await self.checkpoint_writer.write(raw[checkpoint], wanted, (), now):
                self._count(raw[checkpoint], wanted)
        # Old data goes once the new resume point is written (pods created meanwhile must never be
        # told to resume from deleted data), and not at all on a body older than this controller's
        # own last write (its resume point may not be the one pods read): the next event has it.
        # The ranks are asked once the request is written, with the step it says.
        collect = None if stale else lambda: self._after_write(obs, body, decision, raw, env, save)
        warning = (("Warning", decision.problem.reason, decision.problem.message),) if decision.problem else ()
        return Outcome(
            status=decision.status,
            conditions=decision.conditions,
            on_change=warning + save.events,  # said once the status saying it is written
            events=decision.events,
            requeue_after=soonest(decision.requeue_after, recheck, save.requeue_after),
            after=collect,
        )

    async def _save(self, obs: Observed, section: dict[str, Any] | None, stale: bool) -> SavePlan:
        """The save request (save_request.py) of a Trainer that checkpoints to ready storage (else
        none: nothing could be saved). On a body older than this controller's own last write
        nothing is decided (its request may be one already replaced, and asking the ranks again
        could give them another step)."""
        if section is None or stale:
            return SavePlan(obs.save_request if section is not None else None)
        latest = Latest(section["latest"], section["latestStep"]) if section.get("latest") else None
        trigger = trigger_of(
            obs.annotations, obs.renegotiation, obs.save_request, obs.now, self.config.save_deadline_seconds
        )
        fresh = is_new(trigger, obs.save_request)
        reports = await self.ranks.reports(obs.namespace, obs.trainer_uid) if fresh else None
        return plan_save(trigger, obs.save_request, reports, latest, obs.now, self.config.save_margin_steps)

    async def _pinned(self, obs: Observed) -> frozenset[str]:
        """The checkpoints the Trainer's live pods were told to resume from (read from the API
        server, not a watch of every training pod: only when retention would delete data, and
        then at most once a PINNED_SECONDS per Trainer; a pod created since was told the newest
        checkpoint, which retention keeps far longer than that)."""
        now = self.rt.clock.now()
        read = self.pinned.get(obs.trainer_uid)
        if read is not None and now - read[0] < timedelta(seconds=PINNED_SECONDS):
            return read[1]
        pods = await self.rt.kube.list_core_in("Pod", obs.namespace, f"{TRAINER_NAME_LABEL}={obs.trainer}")
        self.pinned = {u: r for u, r in self.pinned.items() if now - r[0] < timedelta(seconds=PINNED_SECONDS)}
        self.pinned[obs.trainer_uid] = (now, resume_points(pods, obs.trainer_uid))
        return self.pinned[obs.trainer_uid][1]

    async def _after_write(
        self,
        obs: Observed,
        body: Body,
        decision: Decision,
        raw: Mapping[str, Any],
        env: Mapping[str, str],
        save: SavePlan,
    ) -> float | None:
        """After the status is written: the checkpoints found unreadable marked (a pod waiting for
        that mark then knows its replacement gets the new resume point), the ranks asked (or the
        answered request taken off their Leases), the request's new phase counted, then the
        collection."""
        now = rfc3339(self.rt.clock.now())
        for checkpoint, wanted in decision.marks.items():
            if await self.checkpoint_writer.write(raw[checkpoint], wanted, (), now):
                self._count(raw[checkpoint], wanted)
        items = decision.collect
        if save.ask_step is not None:
            await self.ranks.ask(obs.namespace, obs.trainer_uid, save.ask_step)
        elif save.answered:
            await self.ranks.clear(obs.namespace, obs.trainer_uid)
        if save.events and save.request is not None:
            SAVE_REQUESTS.labels(save.request.reason, save.request.phase).inc()
        return await self._collect(obs, body, items, raw, env)

    async def _collect(
        self, obs: Observed, body: Body, items: tuple[Collect, ...], raw: Mapping[str, Any], env: Mapping[str, str]
    ) -> float | None:
        """Delete the data retention let go, record what is gone; when to look again. On a claim
        the collector pods are planned even with nothing to delete: pods no longer wanted, or not
        made by this controller, go."""
        target = self._target(obs)
        if target is not None:
            gone, again = await self.claim_pods.delete(target, body, items, raw)
        elif not items:
            return None
        else:
            gone = await self.object_store.delete(items, env)
            again = RECHECK_SECONDS if any(item.path not in gone for item in items) else None
        now = rfc3339(self.rt.clock.now())
        for item in items:
            if item.path in gone and await self.checkpoint_writer.write(raw[item.checkpoint], item.status, (), now):
                COLLECTED.inc()
        return again

    def _count(self, body: Mapping[str, Any], wanted: Mapping[str, Any]) -> None:
        spec = body.get("spec", {})
        created = body["metadata"].get("creationTimestamp")
        attributes = {
            "k8s.namespace.name": body["metadata"].get("namespace", ""),
            "trainer.name": spec.get("trainer", ""),
            "checkpoint.name": body["metadata"].get("name", ""),
            "checkpoint.step": int(spec.get("step", 0)),
            "checkpoint.phase": str(wanted.get("phase")),
        }
        end = self.rt.clock.now()
        if wanted.get("phase") == "Committed":
            COMMITS.inc()
            if created and wanted.get("commitTime"):
                end = parse_time(wanted["commitTime"])
                COMMIT_SECONDS.observe((end - parse_time(created)).total_seconds())
        elif wanted.get("phase") == "Failed":
            FAILURES.labels(str(wanted.get("reason", ""))).inc()
            attributes["checkpoint.reason"] = str(wanted.get("reason", ""))
        was = (body.get("status") or {}).get("phase")
        if created and wanted.get("phase") in ("Committed", "Failed") and was != "Committed":  # not found unreadable
            record_span("checkpoint.commit", parse_time(created), end, attributes)

    def _observe_writes(self, views: list[CheckpointView]) -> None:
        now = self.rt.clock.now()
        for view in views:
            for shard in view.checkpoint.spec.shards or ():
                if shard.write_seconds is not None and (view.uid, shard.index) not in self.reported:
                    self.reported.add((view.uid, shard.index))
                    WRITE_SECONDS.observe(shard.write_seconds)
                    # As the pod reported it: it ended by the time the report was seen.
                    record_span(
                        "checkpoint.write",
                        now - timedelta(seconds=shard.write_seconds),
                        now,
                        {"checkpoint.name": view.name, "checkpoint.shard": shard.index},
                    )


entry = run_entrypoint("checkpoint", CheckpointController, CheckpointConfig)

"""kopf adapter of the checkpoint controller: reads Checkpoints, PVCs and the Trainer's storage
credentials, verifies copies and deletes collected data in worker threads (the event loop never
blocks on storage), and applies the decisions."""

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import replace
from datetime import timedelta
from typing import Any

import kopf
from lightkube.core.exceptions import ApiError
from prometheus_client import Counter, Histogram

from trainerop_common.api import Checkpoint, Trainer, kind_info
from trainerop_common.api.trainer import TrainerSpec
from trainerop_common.cache import Key, ObjectCache
from trainerop_common.checkpoint_storage import Location, S3Error, open_location
from trainerop_common.clock import parse_time, rfc3339
from trainerop_common.lookup import CachedLookup
from trainerop_common.runtime import Body, Runtime, run_entrypoint
from trainerop_common.status_writer import StatusWriter
from trainerop_common.tracing import record_span

from . import pvc
from .decide import (
    CHECKPOINT_FIELDS,
    CONDITIONS,
    OWNED_FIELDS,
    RECHECK_SECONDS,
    REQUIRED_S3_KEYS,
    CheckpointView,
    Collect,
    Copy,
    Decision,
    Observed,
    Storage,
    Verdict,
    copy_verdict,
    decide,
    soonest,
)

COMMITS = Counter("checkpoint_commits_total", "Checkpoints committed (every shard reached a quorum).")
FAILURES = Counter("checkpoint_failures_total", "Checkpoints failed.", ["reason"])
COLLECTED = Counter("checkpoint_collected_total", "Checkpoints whose data was garbage-collected.")
VERIFIED = Counter("checkpoint_copies_verified_total", "Shard copies read and checked.", ["verdict"])
WRITE_SECONDS = Histogram(
    "checkpoint_write_seconds",
    "Time a training pod took to write all copies of its shard (as it reported).",
    buckets=(0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600),
)
COMMIT_SECONDS = Histogram(
    "checkpoint_commit_seconds",
    "From the Checkpoint's creation to its commit.",
    buckets=(0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800),
)
VERIFY_SECONDS = Histogram("checkpoint_verify_seconds", "Reading and hashing one shard copy.")
STORAGE_PODS = Counter(
    "checkpoint_storage_pods_total",
    "Pods that verify or delete checkpoints on a PersistentVolumeClaim, by what happened to them.",
    ["purpose", "outcome"],  # verify|collect, created|failed (ended without an answer, or refused by the API server)
)
PARALLEL_READS = 4
COLLECT_REST_SECONDS = 60.0  # a collector that could not delete is tried again this much later
log = logging.getLogger("trainerop.checkpoint")


def check_copy(location: Location, copy: Copy) -> Verdict:
    """Blocking: read the copy and compare with what its writer reported. A storage error is a
    verdict too ("unreadable", retried later): it must not stop the rest of the reconcile."""
    t0 = time.monotonic()
    try:
        found = location.sha256(copy.key)
    except (S3Error, OSError) as err:
        log.warning("reading %s/%s failed: %s", copy.path, copy.key, err)
        return "unreadable"
    VERIFY_SECONDS.observe(time.monotonic() - t0)
    return copy_verdict(found, copy.sha256, copy.size)


class CheckpointController:
    name = "checkpoint"

    def __init__(self, runtime: Runtime) -> None:
        self.rt = runtime
        kube = runtime.kube
        self.checkpoints = ObjectCache.for_kind(
            kube,
            "Checkpoint",
            index=lambda o: (o["metadata"].get("namespace", ""), o.get("spec", {}).get("trainer", "")),
        )
        self.claims = ObjectCache(
            lambda: kube.list_core("PersistentVolumeClaim", ""), "", "v1", "persistentvolumeclaims"
        )
        # Verifier and collector pods of PVC checkpoints, by (namespace, Trainer).
        self.storage_pods = ObjectCache(
            lambda: kube.list_core("Pod", pvc.PURPOSE_LABEL),
            "",
            "v1",
            "pods",
            {pvc.PURPOSE_LABEL: kopf.PRESENT},
            index=pvc.trainer_of,
        )
        self.image = runtime.config.storage_pod_image
        # Storage pods whose failure or refusal was reported (an Event each), by Trainer and purpose.
        self.pod_reports: dict[tuple[str, str, str], set[str]] = {}
        self.writer = StatusWriter(kube, kind_info("Trainer"), self.name, OWNED_FIELDS, CONDITIONS)
        self.checkpoint_writer = StatusWriter(kube, kind_info("Checkpoint"), self.name, CHECKPOINT_FIELDS, ())
        self.verdicts: dict[tuple[str, str, str], Verdict] = {}  # (checkpoint uid, key, sha256); "ok" is final
        self.reported: set[tuple[str, int]] = set()  # shard write times already observed
        self.reads = asyncio.Semaphore(PARALLEL_READS)
        # The Trainers' storage credentials, read once per RECHECK_SECONDS, not on every reconcile.
        self.credentials: CachedLookup[Key, dict[str, str] | None] = CachedLookup(
            lambda key: kube.secret_data(*key), RECHECK_SECONDS, runtime.clock
        )

    def register(self, registry: kopf.OperatorRegistry, runtime: Runtime) -> None:
        self.checkpoints.register(registry, self._checkpoint_changed)
        self.claims.register(registry, self._claim_changed)
        self.storage_pods.register(registry, self._storage_pod_changed)

    def _storage_pod_changed(self, key: Key, body: dict[str, Any], deleted: bool) -> None:
        trainer = (body["metadata"].get("labels") or {}).get(pvc.TRAINER_LABEL)
        if trainer:
            self.rt.requeue([(key[0], trainer)])

    def _checkpoint_changed(self, key: Key, body: dict[str, Any], deleted: bool) -> None:
        trainer = body.get("spec", {}).get("trainer")
        if trainer:
            self.rt.requeue([(key[0], trainer)])
        if deleted:
            uid = body["metadata"].get("uid", "")
            self.verdicts = {k: v for k, v in self.verdicts.items() if k[0] != uid}
            self.reported = {k for k in self.reported if k[0] != uid}

    def _claim_changed(self, key: Key, body: dict[str, Any], deleted: bool) -> None:
        namespace, name = key
        users = [
            k
            for k, t in self.rt.trainers.items()
            if k[0] == namespace and (t["spec"].get("checkpoint") or {}).get("bucket") == name
        ]
        self.rt.requeue(users)

    async def _storage(self, namespace: str, spec: TrainerSpec) -> tuple[Storage, Mapping[str, str]]:
        """Is the storage there, and the credentials to read it (S3) — never logged."""
        ckpt = spec.checkpoint
        assert ckpt is not None
        if not ckpt.bucket.startswith("s3://"):
            claim = await self.claims.get(namespace, ckpt.bucket)
            if claim is None:
                return Storage(
                    False,
                    "StorageNotFound",
                    f"PersistentVolumeClaim {ckpt.bucket!r} (spec.checkpoint.bucket) does not exist in namespace "
                    f"{namespace!r}; create it (ReadWriteMany: every replica mounts it) or use an s3:// bucket",
                ), {}
            return Storage(claim=ckpt.bucket), {}
        secret = ckpt.credentials_secret or ""
        data = await self.credentials.get((namespace, secret))
        if data is None:
            return Storage(
                False,
                "CredentialsNotFound",
                f"Secret {secret!r} (spec.checkpoint.credentialsSecret) does not exist in namespace {namespace!r}",
            ), {}
        missing = [k for k in REQUIRED_S3_KEYS if not data.get(k)]
        if missing or not (data.get("AWS_ENDPOINT_URL") or data.get("AWS_ENDPOINT_URL_S3")):
            missing += [] if data.get("AWS_ENDPOINT_URL") else ["AWS_ENDPOINT_URL"]
            return Storage(
                False,
                "InvalidCredentials",
                f"Secret {secret!r} lacks {', '.join(missing)}; it needs AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY "
                "and AWS_ENDPOINT_URL (optionally AWS_REGION)",
            ), {}
        return Storage(), data

    async def _verify(self, copies: tuple[Copy, ...], env: Mapping[str, str]) -> None:
        async def one(copy: Copy) -> None:
            async with self.reads:
                verdict = await asyncio.to_thread(check_copy, open_location(copy.path, env), copy)
            VERIFIED.labels(verdict).inc()
            self.verdicts[(copy.uid, copy.key, copy.sha256)] = verdict

        await asyncio.gather(*(one(c) for c in copies))

    async def reconcile(self, body: Body) -> None:
        trainer = Trainer.model_validate(body)
        meta = body["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        raw = {c["metadata"]["name"]: c for c in await self.checkpoints.grouped((namespace, name))}
        views = [
            CheckpointView(
                n,
                c["metadata"].get("uid", ""),
                c["metadata"].get("creationTimestamp", ""),
                Checkpoint.model_validate(c),
                tuple(ref.get("uid", "") for ref in c["metadata"].get("ownerReferences") or ()),
            )
            for n, c in raw.items()
        ]
        self._observe_writes(views)
        status = trainer.status
        progress = status.progress if status else None
        storage, env = (await self._storage(namespace, trainer.spec)) if trainer.spec.checkpoint else (Storage(), {})
        obs = Observed(
            namespace=namespace,
            trainer=name,
            spec=trainer.spec,
            generation=int(meta.get("generation", 0)),
            now=self.rt.clock.now(),
            checkpoints=views,
            verdicts=self.verdicts,
            storage=storage,
            trainer_phase=status.phase if status else None,
            start_time=progress.start_time if progress else None,
            trainer_uid=meta.get("uid", ""),
            published=status.checkpoint.latest if status and status.checkpoint else None,
        )
        decision = decide(obs)
        target = pvc.Target(namespace, name, storage.claim, self.image) if storage.claim else None
        recheck: float | None = None
        if target is not None:
            decision, recheck = await self._verify_on_claim(target, body, obs, decision)
        elif decision.verify:
            await self._verify(decision.verify, env)
            decision = decide(replace(obs, verdicts=self.verdicts, now=self.rt.clock.now()))
        now = rfc3339(self.rt.clock.now())
        for checkpoint, wanted in decision.checkpoints.items():
            if await self.checkpoint_writer.write(raw[checkpoint], wanted, (), now):
                self._count(raw[checkpoint], wanted)
        # The new resume point is published before older data goes (pods created meanwhile must
        # never be told to resume from a deleted checkpoint; decide keeps the published one).
        written = await self.writer.write(body, decision.status, decision.conditions, now)
        if written and decision.problem is not None:
            self.rt.event(body, "Warning", decision.problem.reason, decision.problem.message)
        for kind, reason, message in decision.events:
            self.rt.event(body, kind, reason, message)
        requeue = soonest(decision.requeue_after, recheck)
        if target is not None:
            gone, recheck = await self._collect_on_claim(target, body, decision.collect)
            requeue = soonest(requeue, recheck)  # a collector pod at work requeues with its events
        else:
            gone = await self._collect(decision.collect, env)
            if any(item.path not in gone for item in decision.collect):
                requeue = soonest(requeue, RECHECK_SECONDS)
        for item in decision.collect:
            if item.path in gone and await self.checkpoint_writer.write(raw[item.checkpoint], item.status, (), now):
                COLLECTED.inc()
        if requeue is not None:
            self.rt.requeue_after((namespace, name), requeue)

    async def _collect(self, items: tuple[Collect, ...], env: Mapping[str, str]) -> set[str]:
        """Delete S3 data (worker threads); the paths whose data is gone."""
        gone = set()
        for item in items:
            t0 = self.rt.clock.now()
            try:
                await asyncio.to_thread(open_location(item.path, env).delete_all)
            except (S3Error, OSError) as err:
                log.warning("deleting %s failed, retrying: %s", item.path, err)
                continue
            gone.add(item.path)
            record_span("checkpoint.collect", t0, self.rt.clock.now(), {"checkpoint.name": item.checkpoint})
        return gone

    async def _pods_of(self, target: pvc.Target) -> list[pvc.PodView]:
        found = (pvc.view(p) for p in await self.storage_pods.grouped((target.namespace, target.trainer)))
        return [p for p in found if p is not None]

    async def _verify_on_claim(
        self, target: pvc.Target, body: Body, obs: Observed, decision: Decision
    ) -> tuple[Decision, float | None]:
        """Copies on a PVC: verdicts from the verifier pods that answered, new pods for the rest;
        the decision taken again with them, and when to look again."""
        pods = await self._pods_of(target)
        plan = pvc.plan_verification(target, decision.verify, pods, self.rt.clock.now())
        for key, verdict in plan.verdicts.items():
            if self.verdicts.get(key) not in (verdict, "ok"):  # ok is final
                VERIFIED.labels(verdict).inc()
                self.verdicts[key] = verdict
        refused = await self._apply(target, body, plan, "verify", pods)
        notes = dict(plan.notes) | {uid: f"verifying on claim {target.claim!r}: {why}" for uid, why in refused.items()}
        decided = decide(replace(obs, verdicts=self.verdicts, notes=notes, now=self.rt.clock.now()))
        return decided, soonest(plan.recheck_after, RECHECK_SECONDS if refused else None)

    async def _collect_on_claim(
        self, target: pvc.Target, body: Body, items: tuple[Collect, ...]
    ) -> tuple[set[str], float | None]:
        """Data on a PVC: what the collector pods deleted, new pods for the rest; when to look again."""
        pods = await self._pods_of(target)
        uid = body["metadata"].get("uid", "")
        plan = pvc.plan_collection(
            target, uid, [i.path for i in items], pods, self.rt.clock.now(), COLLECT_REST_SECONDS
        )
        refused = await self._apply(target, body, plan, "collect", pods)
        return set(plan.collected), soonest(plan.recheck_after, COLLECT_REST_SECONDS if refused else None)

    async def _apply(
        self, target: pvc.Target, body: Body, plan: pvc.Plan, purpose: str, pods: list[pvc.PodView]
    ) -> dict[str, str]:
        """Delete and create storage pods, report failures once per pod (an Event each); the pods
        the API server refused, by checkpoint uid ("" for a collector), with its reason."""
        kube = self.rt.kube
        what = "verify checkpoint copies" if purpose == "verify" else "delete checkpoint data"
        reported = self.pod_reports.setdefault((target.namespace, target.trainer, purpose), set())
        for name in plan.delete:
            await kube.delete_core("Pod", target.namespace, name)
        for name in plan.force_delete:
            log.warning("pod %s/%s: its node never confirmed its deletion; forcing it", target.namespace, name)
            await kube.delete_core("Pod", target.namespace, name, force=True)
        refused: dict[str, str] = {}
        refused_names: set[str] = set()
        for pod in plan.create:
            name = pod["metadata"]["name"]
            try:
                if await kube.create_core(pod):
                    STORAGE_PODS.labels(purpose, "created").inc()
                reported.discard(name)
            except ApiError as err:
                reason = f"pod {name} was refused: {err.status.message}"
                refused_names.add(name)
                refused[pod["metadata"]["labels"].get(pvc.CHECKPOINT_UID_LABEL, "")] = reason
                self._report_once(
                    body, reported, name, purpose, f"the pod to {what} on claim {target.claim!r}: {reason}"
                )
        for name, failure in plan.failures:
            message = f"pod {name} could not {what} on claim {target.claim!r}: {failure}"
            self._report_once(body, reported, name, purpose, message)
        # A name is reported again only once its pod has left (a new pod of that name is a new failure).
        reported &= {p.name for p in pods} | refused_names
        if not reported:
            self.pod_reports.pop((target.namespace, target.trainer, purpose), None)
        return refused

    def _report_once(self, body: Body, reported: set[str], name: str, purpose: str, message: str) -> None:
        if name in reported:
            return
        reported.add(name)
        STORAGE_PODS.labels(purpose, "failed").inc()
        rest = RECHECK_SECONDS if purpose == "verify" else COLLECT_REST_SECONDS
        self.rt.event(body, "Warning", "StoragePodFailed", f"{message}; tried again in {rest:g} s")

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
        if created and wanted.get("phase") in ("Committed", "Failed"):
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


entry = run_entrypoint("checkpoint", CheckpointController)

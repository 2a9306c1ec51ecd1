"""kopf adapter of the audit controller: records operator actions from Trainers' status, records
users' requests from the audit webhook (served by the runtime's webhook server), applies
retention, notifies a webhook of chosen events."""

import asyncio
import json
import logging
import sys
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import kopf
from lightkube import ApiError
from prometheus_client import Counter, Gauge

from trainerop_common.api import KINDS, KUBEFLOW_KINDS
from trainerop_common.api.kubeflow import KUBEFLOW_GROUP, KUBEFLOW_VERSION
from trainerop_common.cache import Key, ObjectCache
from trainerop_common.clock import rfc3339, rfc3339_micro
from trainerop_common.conditions import parse
from trainerop_common.kube import is_namespace_terminating
from trainerop_common.names import OPERATOR_NAMESPACE
from trainerop_common.outcome import Event, Outcome, soonest
from trainerop_common.process import run_entrypoint
from trainerop_common.redaction import redact
from trainerop_common.runtime import Body, Runtime, key_of

from .config import AuditConfig
from .decide import (
    SECTION,
    Observed,
    Recorded,
    created_name,
    decide,
    kubeflow_owner,
    manager_of,
    read_uids,
    summary_hold,
)
from .delivery import NOTIFICATIONS, Notifier
from .notices import Notified, RoleFailures, Settings, due, retry_delay
from .record import TRAINER_LABEL, about_uid, job_creation
from .retention import Retention, expired, pruned_record
from .seal import forgettable, held, next_seal, trimmed_seals
from .user_recorder import JOB_RESOURCES, RESOURCES, WEBHOOK, UserRecorder

log = logging.getLogger("trainerop.audit")
RECORDS = Counter("audit_records_total", "AuditLog records created.", ["source"])
PRUNED = Counter("audit_records_pruned_total", "AuditLog records deleted by retention.")
HELD = Gauge("audit_summaries_held", "Trainers whose status.audit does not yet say all their records.")
RECORDS_HELD = Gauge("audit_records_held", "AuditLog records held in memory (not sealed ones of gone Trainers).")
# the kinds by resource (the webhook's reviews): the operator's own, and Kubeflow's jobs
KIND_OF = {info.plural: info.kind for info in (*KINDS, *KUBEFLOW_KINDS)}


def emit(record: dict[str, Any]) -> None:
    """Every record is also one JSON line on stdout (the controller's logs go to stderr), for a log
    forwarder such as fluent-bit to ship to a SIEM; secret-looking values are masked."""
    line = {"apiVersion": record["apiVersion"], "kind": record["kind"], "metadata": record["metadata"]}
    line["spec"] = redact(record["spec"])
    sys.stdout.write(json.dumps(line, sort_keys=True) + "\n")
    sys.stdout.flush()


def observed(body: Body, now: datetime) -> Observed:
    """What the audit trail of operator actions needs of a Trainer."""
    meta, status = body["metadata"], body.get("status") or {}
    replicas: dict[str, Any] = (status.get("topology") or {}).get("replicas") or {}
    failures = [str(r["lastFailureTime"]) for r in replicas.values() if r.get("lastFailureTime")]
    return Observed(
        namespace=meta["namespace"],
        name=meta["name"],
        uid=meta["uid"],
        generation=int(meta.get("generation", 0)),
        manager=manager_of(meta.get("managedFields")),
        created=meta.get("creationTimestamp") or rfc3339(now),
        conditions=parse(status.get("conditions")),
        checkpoint=(status.get("checkpoint") or {}).get("latest"),
        checkpoint_time=(status.get("checkpoint") or {}).get("lastCommitTime"),
        restarts=sum(int(r.get("restarts") or 0) for r in replicas.values()),
        last_failure=max(failures, default=None),
        renegotiations=int((status.get("quota") or {}).get("renegotiations") or 0),
        recorded=Recorded.parse((status.get("audit") or {}).get("recorded")),
        owner=kubeflow_owner(meta.get("ownerReferences")),
    )


class AuditController:
    name = "audit"
    section = SECTION

    def __init__(self, runtime: Runtime, config: AuditConfig) -> None:
        self.rt = runtime
        self.config = config
        # Grouped by the object they are about: a reconcile reads its Trainer's records (and its
        # Kubeflow job's), not the namespace's.
        self.records = ObjectCache.for_kind(runtime.kube, "AuditLog", index=lambda r: about_uid(r) or "", keep=held)
        self.retention = Retention(config.retention_days, config.retention_records)
        # With the API server's client certificate checked, its reviews are believed; else corroborated.
        certified = bool(runtime.config.webhook.webhook_client_ca_file)
        self.users = UserRecorder(
            lambda record, again: self.write(record, "user", print_existing=again),
            runtime.clock,
            OPERATOR_NAMESPACE,
            read=None if certified else self.read_object,
        )
        # Set once this controller knows its own identity (or cannot): retention waits for it, so that
        # the audit webhook tells its deletes from a user's.
        self.identified = asyncio.Event()
        self.notifier = Notifier(Path(config.notify_url_file), config.notify_format) if config.notify_url_file else None
        self.notify_settings = Settings(
            frozenset(config.notify_events),
            config.notify_restart_storm_failures,
            timedelta(seconds=config.notify_max_age_seconds),
        )
        self._attempts: dict[str, dict[tuple[str, str], int]] = {}  # uid -> (event, time) -> failed attempts
        # Trainers whose status.audit waits (summary_wait): the uid, since when, and what it will say
        self._held: dict[Key, tuple[str, float, dict[str, Any]]] = {}
        HELD.set_function(lambda: len(self._held))
        RECORDS_HELD.set_function(lambda: len(self.records.items))

    async def write(self, record: dict[str, Any], source: str, print_existing: bool = False) -> bool:
        """Create one record (idempotent by name) and print it; False if it existed already (then
        printed only if ``print_existing``: an earlier attempt of the same write may have created it).

        A namespace being deleted takes its records with it and accepts no new ones: what happens
        there while it goes (its Trainers deleted, ...) is recorded in the operator's namespace."""
        try:
            created = await self.rt.kube.create("AuditLog", record, namespace=record["metadata"]["namespace"])
        except ApiError as err:
            if not is_namespace_terminating(err) or record["metadata"]["namespace"] == OPERATOR_NAMESPACE:
                raise
            record = {**record, "metadata": {**record["metadata"], "namespace": OPERATOR_NAMESPACE}}
            created = await self.rt.kube.create("AuditLog", record, namespace=OPERATOR_NAMESPACE)
        if created:
            RECORDS.labels(source).inc()
        if created or print_existing:
            emit(record)
        return created

    async def read_object(self, resource: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        """One of the operator's objects as the API server has it now (a review's corroboration)."""
        return await self.rt.kube.get(KIND_OF[resource], name, namespace)

    def register(self, registry: kopf.OperatorRegistry, runtime: Runtime) -> None:
        self.records.register(registry, self._record_changed)
        jobs = [(KUBEFLOW_GROUP, KUBEFLOW_VERSION, plural) for plural in JOB_RESOURCES]
        runtime.observe(registry, WEBHOOK, RESOURCES, self._observe_user, others=jobs)
        if self.retention.active:
            runtime.every(self.config.retention_interval_seconds, self._retention, "audit retention", first=0)
        if self.config.seal_seconds:
            runtime.every(self.config.seal_seconds, self.seal, "sealing the audit trail")

        @kopf.on.startup(registry=registry)
        async def start(**_: Any) -> None:
            try:
                await self._identify()
            finally:
                self.identified.set()

        @kopf.on.cleanup(registry=registry)
        async def stop(**_: Any) -> None:
            await self.users.stop()
            if self.notifier is not None:
                await self.notifier.close()

    async def _observe_user(self, review: Mapping[str, Any]) -> None:
        await self.users.review(review)

    def _record_changed(self, key: Key, body: dict[str, Any], deleted: bool) -> None:
        labels = body.get("metadata", {}).get("labels") or {}
        trainer = labels.get(TRAINER_LABEL)
        if trainer:
            self.rt.requeue([(key[0], trainer)])
        elif job_creation(body) and not deleted:  # the Trainer made for the job (named like it) names its creator
            made = (key[0], str(body["spec"]["objectRef"].get("name") or ""))
            if made in self.rt.trainers:
                self.rt.requeue([made])

    async def _identify(self) -> None:
        if not self.rt.config.webhook.webhook_port:
            log.warning("audit webhook not served (--webhook-port 0): users' requests are not recorded")
            return
        try:
            self.users.self_user = await self.rt.kube.whoami()
        except ApiError as err:  # then its retention deletes are recorded one by one too
            log.warning("could not learn this controller's own identity (SelfSubjectReview): %s", err)

    async def _retention(self) -> None:
        await self.identified.wait()
        await self.apply_retention()

    async def apply_retention(self) -> int:
        """One retention pass; returns how many records it deleted. It reads the records from the
        API server (a cache may lag its own deletions), and records what it deletes before it
        deletes (a pass cut short leaves a record of what it meant to delete, never the reverse)."""
        now = self.rt.clock.now()
        deleted = 0
        for namespace, names in expired(await self.rt.kube.list_all("AuditLog"), now, self.retention).items():
            try:
                await self.write(pruned_record(namespace, names, self.retention, now), "retention")
                for name in names:
                    if await self.rt.kube.delete("AuditLog", name, namespace=namespace):
                        deleted += 1
                        PRUNED.inc()
            except ApiError as err:  # one namespace's refusal does not hold up the others
                log.warning("audit retention in namespace %s failed: %s", namespace, err)
                continue
            log.info("audit retention deleted %d record(s)", len(names), extra={"namespace": namespace})
        return deleted

    async def seal(self) -> int:
        """Seal, in each namespace, the records no seal lists yet (trainerop_audit.seal); returns
        the seals written. A seal another replica wrote first (same sequence) is left to it. The
        records sealed before, old, and of Trainers gone are then no longer held (``forgettable``),
        nor their names in the seals that list them (``trimmed_seals``)."""
        records = await self.records.values()
        for record in forgettable(records, read_uids(self.rt.trainers.values()), self.rt.clock.now()):
            self.records.forget(ObjectCache.key(record))
        for trimmed in trimmed_seals(await self.records.values()):
            self.records.hold(ObjectCache.key(trimmed), trimmed)
        now = rfc3339_micro(self.rt.clock.now())
        written = 0
        for namespace in sorted({str(r["metadata"].get("namespace", "")) for r in records}):
            seal = next_seal(namespace, records, now)
            if seal is None:
                continue
            try:
                if await self.rt.kube.create("AuditLog", seal, namespace=namespace):
                    RECORDS.labels("seal").inc()
                    emit(seal)
                    written += 1
            except ApiError as err:  # a namespace being deleted takes its trail with it
                if not is_namespace_terminating(err):
                    raise
        return written

    async def reconcile(self, body: Body) -> Outcome:
        assert self.rt.writer is not None
        facts = self.with_held(body, observed(body, self.rt.clock.now()))
        pending = self.users.pending(created_name(facts.name, facts.uid))
        records = await self.records.grouped(facts.uid)
        if facts.owner is not None:  # the record of its Kubeflow job's creation names who asked
            records += await self.records.grouped(facts.owner.uid)
        decision = decide(facts, records, self.rt.clock.now(), creation_pending=pending)
        for record in decision.create:
            await self.write(record, "operator")
        status, requeue = decision.status, decision.recheck_after
        events: tuple[Event, ...] = ()
        if self.notifier is not None and not self.rt.writer.is_stale(body):
            # (a body older than this controller's last status write may not show what it notified)
            notified, events, retry = await self.notify(body)
            status = {"audit": {**status["audit"], "notified": notified.to_k8s()}}
            requeue = soonest(requeue, retry)
        hold = self.summary_wait(body, status["audit"])
        if hold > 0:  # the records exist; their summary is written with the next ones
            return Outcome(events=events, requeue_after=soonest(requeue, hold))
        return Outcome(status=status, events=events, requeue_after=requeue)

    def with_held(self, body: Body, facts: Observed) -> Observed:
        """What is recorded for this Trainer: a summary not written yet knows more than its status."""
        held = self._held.get(key_of(body))
        if held is None or held[0] != facts.uid:
            return facts
        return replace(facts, recorded=Recorded.parse(held[2].get("recorded")))

    def summary_wait(self, body: Body, wanted: dict[str, Any]) -> float:
        """Seconds this Trainer's ``status.audit`` waits yet (decide.summary_hold). What it will say
        is held until the status says it (a write that failed keeps it held); a body older than
        this controller's last write changes nothing (the write is skipped for it)."""
        assert self.rt.writer is not None
        if self.rt.writer.is_stale(body):
            return 0.0
        key, uid, now = key_of(body), body["metadata"]["uid"], self.rt.clock.now().timestamp()
        held = self._held.get(key)
        since = held[1] if held is not None and held[0] == uid else None
        current = (body.get("status") or {}).get("audit") or {}
        if current == wanted:
            self._held.pop(key, None)
            return 0.0
        self._held[key] = (uid, now if since is None else since, wanted)  # until the status says it
        if len(self._held) > len(self.rt.trainers):  # some were deleted while held
            for gone in [k for k in self._held if k not in self.rt.trainers]:
                del self._held[gone]
        return summary_hold(current, wanted, None if since is None else now - since, self.config.summary_delay_seconds)

    async def notify(self, body: Body) -> tuple[Notified, tuple[Event, ...], float | None]:
        """Send the notifications this Trainer is due, one attempt each; returns what is notified
        now, the Events to post and when to try again. A notice that could not be delivered stays
        due: the Trainer is reconciled again after a backoff (1 s doubling to 5 min, or the
        receiver's Retry-After), and a Warning Event says so once."""
        assert self.notifier is not None
        meta, status = body["metadata"], body.get("status") or {}
        uid = meta["uid"]
        replicas: dict[str, Any] = (status.get("topology") or {}).get("replicas") or {}
        notified = Notified.parse((status.get("audit") or {}).get("notified"))
        attempts = self._attempts.setdefault(uid, {})
        roles = [
            RoleFailures(role, int(r.get("restarts") or 0), int(r.get("recentFailures") or 0), r.get("lastFailureTime"))
            for role, r in sorted(replicas.items())
        ]
        send, skip = due(
            meta["namespace"],
            meta["name"],
            str(status.get("phase") or ""),
            parse(status.get("conditions")),
            roles,
            notified,
            self.rt.clock.now(),
            self.notify_settings,
            attempted=attempts.keys(),
        )
        for notice in skip:
            NOTIFICATIONS.labels(notice.event, "skipped").inc()
            notified = notice.mark(notified)
        retry: float | None = None
        events: list[Event] = []
        for notice in send:
            key = (notice.event, notice.time)
            delivery = await self.notifier.send(notice)
            if delivery.failure is None:
                notified = notice.mark(notified)
                attempts.pop(key, None)
                continue
            failed = attempts[key] = attempts.get(key, 0) + 1
            if failed == 1:
                again = "with backoff" if delivery.retryable else "at the next resync"
                why = (
                    f"the {notice.event} notification was not delivered ({delivery.failure}); it is tried again {again}"
                )
                events.append(("Warning", "NotificationFailed", why))
            if delivery.retryable:
                delay = retry_delay(failed, delivery.retry_after)
                retry = delay if retry is None else min(retry, delay)
        if not attempts:
            del self._attempts[uid]
        return notified, tuple(events), retry


entry = run_entrypoint("audit", AuditController, AuditConfig, webhooks=True)

"""kopf adapter of the audit controller: records operator actions from Trainers' status, serves the
audit webhook that records users' requests, applies retention, notifies a webhook of chosen events."""

import asyncio
import json
import logging
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import kopf
from lightkube import ApiError
from prometheus_client import Counter

from trainerop_common.api import GROUP, kind_info
from trainerop_common.cache import Key, ObjectCache
from trainerop_common.clock import rfc3339
from trainerop_common.conditions import parse
from trainerop_common.kube import is_namespace_terminating
from trainerop_common.redaction import redact
from trainerop_common.runtime import Body, Runtime, run_entrypoint
from trainerop_common.status_writer import StatusWriter

from .decide import OWNED_FIELDS, Recorded, TrainerFacts, created_name, decide, manager_of
from .notifier import NOTIFICATIONS, Notifier
from .notify import Notified, RoleFailures, Settings, due, retry_delay
from .record import OPERATOR_NAMESPACE, subject_uid
from .retention import Retention, expired, pruned_record
from .webhook import AuditWebhook

log = logging.getLogger("trainerop.audit")
RECORDS = Counter("audit_records_total", "AuditLog records created.", ["source"])
PRUNED = Counter("audit_records_pruned_total", "AuditLog records deleted by retention.")


def emit(record: dict[str, Any]) -> None:
    """Every record is also one JSON line on stdout (the controller's logs go to stderr), for a log
    forwarder such as fluent-bit to ship to a SIEM; secret-looking values are masked."""
    line = {"apiVersion": record["apiVersion"], "kind": record["kind"], "metadata": record["metadata"]}
    line["spec"] = redact(record["spec"])
    sys.stdout.write(json.dumps(line, sort_keys=True) + "\n")
    sys.stdout.flush()


class AuditController:
    name = "audit"

    def __init__(self, runtime: Runtime) -> None:
        self.rt = runtime
        kube = runtime.kube
        # Grouped by the Trainer they are about: a reconcile reads its own records, not the namespace's.
        self.records = ObjectCache.for_kind(kube, "AuditLog", index=lambda r: subject_uid(r) or "")
        self.writer = StatusWriter(kube, kind_info("Trainer"), self.name, OWNED_FIELDS, ())
        cfg = runtime.config
        self.retention = Retention(cfg.retention_days, cfg.retention_records)
        self.webhook = AuditWebhook(
            lambda record, again: self.write(record, "user", print_existing=again), runtime.clock, OPERATOR_NAMESPACE
        )
        self._tasks: list[asyncio.Task[None]] = []
        self.notifier = Notifier(Path(cfg.notify_url_file), cfg.notify_format) if cfg.notify_url_file else None
        self.notify_settings = Settings(
            frozenset(cfg.notify_events),
            cfg.notify_restart_storm_failures,
            timedelta(seconds=cfg.notify_max_age_seconds),
        )
        self._attempts: dict[str, dict[tuple[str, str], int]] = {}  # uid -> (event, time) -> failed attempts
        if cfg.webhook_port:
            runtime.readiness.append(
                lambda: None if self.webhook.serving.is_set() else "the audit webhook is not serving (see the log)"
            )

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

    def register(self, registry: kopf.OperatorRegistry, runtime: Runtime) -> None:
        self.records.register(registry, self._record_changed)

        @kopf.on.startup(registry=registry)
        async def start(**_: Any) -> None:
            cfg = self.rt.config
            if cfg.webhook_port:
                try:
                    self.webhook.self_user = await self.rt.kube.whoami()
                except ApiError as err:  # then its retention deletes are recorded one by one too
                    log.warning("could not learn this controller's own identity (SelfSubjectReview): %s", err)
                await self.webhook.start(
                    cfg.webhook_address, cfg.webhook_port, cfg.webhook_cert_file, cfg.webhook_key_file
                )
            else:
                log.warning("audit webhook not served (--webhook-port 0): users' requests are not recorded")
            if self.retention.active:
                self._tasks.append(asyncio.create_task(self._retention_forever()))

        @kopf.on.cleanup(registry=registry)
        async def stop(**_: Any) -> None:
            for task in self._tasks:
                task.cancel()
            await self.webhook.stop()
            if self.notifier is not None:
                await self.notifier.close()

    def _record_changed(self, key: Key, body: dict[str, Any], deleted: bool) -> None:
        labels = body.get("metadata", {}).get("labels") or {}
        trainer = labels.get(f"{GROUP}/trainer-name")
        if trainer:
            self.rt.requeue([(key[0], trainer)])

    async def _retention_forever(self) -> None:
        while True:
            try:
                await self.apply_retention()
            except Exception:  # a failed pass is retried on the next; the loop must go on
                log.exception("audit retention pass failed; retrying in %ss", self.rt.config.retention_interval_seconds)
            await asyncio.sleep(self.rt.config.retention_interval_seconds)

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

    async def reconcile(self, body: Body) -> None:
        meta, status = body["metadata"], body.get("status") or {}
        replicas: dict[str, Any] = (status.get("topology") or {}).get("replicas") or {}
        now = self.rt.clock.now()
        facts = TrainerFacts(
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
            last_failure=max(
                (str(r["lastFailureTime"]) for r in replicas.values() if r.get("lastFailureTime")), default=None
            ),
            renegotiations=int((status.get("quota") or {}).get("renegotiations") or 0),
            recorded=Recorded.parse((status.get("audit") or {}).get("recorded")),
        )
        pending = self.webhook.pending(created_name(facts.name, facts.uid))
        decision = decide(facts, await self.records.grouped(facts.uid), now, creation_pending=pending)
        for record in decision.create:
            await self.write(record, "operator")
        status = decision.status
        if self.notifier is not None and not self.writer.is_stale(body):
            # (a body older than this controller's last status write may not show what it notified)
            notified = await self.notify(body, replicas)
            status = {"audit": {**status["audit"], "notified": notified.to_k8s()}}
        await self.writer.write(body, status, (), rfc3339(now))
        if decision.recheck_after is not None:
            self.rt.requeue_after((facts.namespace, facts.name), decision.recheck_after)

    async def notify(self, body: Body, replicas: dict[str, Any]) -> Notified:
        """Send the notifications this Trainer is due, one attempt each; returns what is notified
        now. A notice that could not be delivered stays due: the Trainer is reconciled again after
        a backoff (1 s doubling to 5 min, or the receiver's Retry-After), and a Warning Event says
        so once."""
        assert self.notifier is not None
        meta, status = body["metadata"], body.get("status") or {}
        uid = meta["uid"]
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
        for notice in send:
            key = (notice.event, notice.time)
            delivery = await self.notifier.send(notice)
            if delivery.failure is None:
                notified = notice.mark(notified)
                attempts.pop(key, None)
                continue
            failed = attempts[key] = attempts.get(key, 0) + 1
            if failed == 1:
                self.rt.event(
                    body,
                    "Warning",
                    "NotificationFailed",
                    f"the {notice.event} notification was not delivered ({delivery.failure}); it is tried again "
                    + ("with backoff" if delivery.retryable else "at the next resync"),
                )
            if delivery.retryable:
                delay = retry_delay(failed, delivery.retry_after)
                retry = delay if retry is None else min(retry, delay)
        if retry is not None:
            self.rt.requeue_after((meta["namespace"], meta["name"]), retry)
        if not attempts:
            del self._attempts[uid]
        return notified


entry = run_entrypoint("audit", AuditController)

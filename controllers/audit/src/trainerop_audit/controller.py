"""kopf adapter of the audit controller."""

import json
import sys
from typing import Any

import kopf

from trainerop_common.api import kind_info
from trainerop_common.cache import Key, ObjectCache
from trainerop_common.clock import rfc3339
from trainerop_common.conditions import parse
from trainerop_common.redaction import redact
from trainerop_common.runtime import Body, Runtime, run_entrypoint
from trainerop_common.status_writer import StatusWriter

from .decide import OWNED_FIELDS, TrainerFacts, creator_of, decide


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
        self.records = ObjectCache.for_kind(runtime.kube, "AuditLog")
        self.writer = StatusWriter(runtime.kube, kind_info("Trainer"), self.name, OWNED_FIELDS, ())

    def register(self, registry: kopf.OperatorRegistry, runtime: Runtime) -> None:
        self.records.register(registry, self._record_changed)

    def _record_changed(self, key: Key, body: dict[str, Any], deleted: bool) -> None:
        trainer = body.get("spec", {}).get("trainer", {}).get("name")
        if trainer:
            self.rt.requeue([(key[0], trainer)])

    async def reconcile(self, body: Body) -> None:
        meta, status = body["metadata"], body.get("status") or {}
        replicas: dict[str, Any] = (status.get("topology") or {}).get("replicas") or {}
        facts = TrainerFacts(
            namespace=meta["namespace"],
            name=meta["name"],
            uid=meta["uid"],
            generation=int(meta.get("generation", 0)),
            creator=creator_of(meta.get("managedFields")),
            created=meta.get("creationTimestamp") or rfc3339(self.rt.clock.now()),
            conditions=parse(status.get("conditions")),
            checkpoint=(status.get("checkpoint") or {}).get("latest"),
            checkpoint_time=(status.get("checkpoint") or {}).get("lastCommitTime"),
            restarts=sum(int(r.get("restarts") or 0) for r in replicas.values()),
            last_failure=max(
                (str(r["lastFailureTime"]) for r in replicas.values() if r.get("lastFailureTime")), default=None
            ),
        )
        records = [r for r in await self.records.values() if r["metadata"].get("namespace") == facts.namespace]
        decision = decide(facts, records)
        for record in decision.create:
            if await self.rt.kube.create("AuditLog", record, namespace=facts.namespace):
                emit(record)
        await self.writer.write(body, decision.status, (), rfc3339(self.rt.clock.now()))


entry = run_entrypoint("audit", AuditController)

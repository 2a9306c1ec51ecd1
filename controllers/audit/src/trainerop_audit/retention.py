"""Retention of audit records by age and by count: pure, table-tested, no I/O.

Per namespace, records older than the age limit go, then the oldest beyond the count limit. What
retention deletes is itself recorded, in one record per pass and namespace (which counts toward
the limit, so a pass leaves room for it).
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from trainerop_common.api import GROUP, VERSION
from trainerop_common.clock import parse_time, rfc3339_micro

from .record import audit_record, derived_audit_id, operator_user, short_hash, stamp_of


@dataclass(frozen=True)
class Retention:
    max_age_days: float = 0.0  # 0: no age limit
    max_records: int = 0  # per namespace; 0: no count limit

    @property
    def active(self) -> bool:
        return self.max_age_days > 0 or self.max_records > 0


def _moment(record: Mapping[str, Any]) -> datetime:
    """When it happened (timestamps come in second and microsecond precision: compare times, not
    strings); a record without a readable time is as old as can be."""
    try:
        return parse_time(stamp_of(record))
    except ValueError:
        return datetime.min.replace(tzinfo=UTC)


def _older_than(record: Mapping[str, Any], cutoff: datetime) -> bool:
    return _moment(record) < cutoff


def expired(records: Sequence[Mapping[str, Any]], now: datetime, rule: Retention) -> dict[str, list[str]]:
    """namespace -> names of the records retention deletes now, oldest first."""
    by_namespace: dict[str, list[Mapping[str, Any]]] = {}
    for r in records:
        by_namespace.setdefault(str(r["metadata"].get("namespace", "")), []).append(r)
    out: dict[str, list[str]] = {}
    for namespace, items in sorted(by_namespace.items()):
        items = sorted(items, key=lambda r: (_moment(r), r["metadata"]["name"]))
        gone = (
            [r for r in items if _older_than(r, now - timedelta(days=rule.max_age_days))] if rule.max_age_days else []
        )
        left = [r for r in items if r not in gone]
        if rule.max_records and len(left) > rule.max_records:
            gone += left[: len(left) - rule.max_records + 1]  # room for the record of this pass
        if gone:
            out[namespace] = [r["metadata"]["name"] for r in gone]
    return out


def pruned_record(namespace: str, names: Sequence[str], rule: Retention, now: datetime) -> dict[str, Any]:
    """The record of one retention pass in one namespace, named from what it deleted."""
    stamp = rfc3339_micro(now)
    limits = []
    if rule.max_age_days:
        limits.append(f"older than {rule.max_age_days:g} days")
    if rule.max_records:
        limits.append(f"beyond {rule.max_records} records")
    listed = ", ".join(names)
    record = audit_record(
        name=f"retention-{short_hash(namespace, *names)}",
        namespace=namespace,
        audit_id=derived_audit_id("retention", namespace, *names),
        stage="ResponseComplete",
        verb="delete",
        user=operator_user("audit"),
        object_ref={"resource": "auditlogs", "namespace": namespace, "apiGroup": GROUP, "apiVersion": VERSION},
        received=stamp,
        stamp=stamp,
        action="Pruned",
        reason="RetentionPolicy",
        message=f"deletes {len(names)} audit record(s) {' or '.join(limits)}: {listed}",
        details={
            "deleted": str(len(names)),
            "maxAgeDays": f"{rule.max_age_days:g}",
            "maxRecords": str(rule.max_records),
            "first": names[0],
            "last": names[-1],
        },
    )
    record["spec"]["deletedRecords"] = list(names)  # what the seals' verification accounts for
    return record

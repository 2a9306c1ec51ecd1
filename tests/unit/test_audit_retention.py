"""Retention by age and by count, and the record each pass leaves."""

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from trainerop_audit.retention import Retention, expired, pruned_record
from trainerop_common.api import AuditLog
from trainerop_common.clock import rfc3339_micro

NOW = datetime(2026, 11, 30, tzinfo=UTC)


def rec(name: str, days_ago: float, namespace: str = "a") -> dict[str, Any]:
    stamp = rfc3339_micro(NOW - timedelta(days=days_ago))
    return {"metadata": {"name": name, "namespace": namespace}, "spec": {"stageTimestamp": stamp}}


RECORDS = [rec("r1", 100), rec("r2", 50), rec("r3", 10), rec("r4", 1), rec("b1", 100, "b")]


@pytest.mark.parametrize(
    ("rule", "want"),
    [
        (Retention(), {}),
        (Retention(max_age_days=90), {"a": ["r1"], "b": ["b1"]}),
        (Retention(max_age_days=5), {"a": ["r1", "r2", "r3"], "b": ["b1"]}),
        # 4 records over a limit of 3: the oldest two go, leaving room for the pass's own record.
        (Retention(max_records=3), {"a": ["r1", "r2"]}),
        (Retention(max_records=4), {}),
        (Retention(max_age_days=90, max_records=2), {"a": ["r1", "r2", "r3"], "b": ["b1"]}),
        (Retention(max_records=1), {"a": ["r1", "r2", "r3", "r4"]}),
    ],
)
def test_expired(rule: Retention, want: dict[str, list[str]]) -> None:
    assert expired(RECORDS, NOW, rule) == want


def test_records_of_the_earlier_shape_age_by_their_own_time() -> None:
    old_shape = {
        "metadata": {"name": "old-shape", "namespace": "a"},
        "spec": {"time": rec("x", 10)["spec"]["stageTimestamp"]},
    }
    assert expired([old_shape, rec("r4", 1)], NOW, Retention(max_age_days=30)) == {}
    assert expired([old_shape, rec("r4", 1)], NOW, Retention(max_age_days=5)) == {"a": ["old-shape"]}
    stored = {"metadata": {"name": "s", "namespace": "a", "creationTimestamp": "2026-11-29T00:00:00Z"}, "spec": {}}
    assert expired([stored], NOW, Retention(max_age_days=30)) == {}


def test_a_record_without_a_readable_time_is_the_oldest() -> None:
    odd = {"metadata": {"name": "odd", "namespace": "a"}, "spec": {"stageTimestamp": "not a time"}}
    assert expired([odd, rec("r4", 1)], NOW, Retention(max_age_days=30)) == {"a": ["odd"]}


def test_retention_converges_with_its_own_records_counted() -> None:
    records = list(RECORDS[:4])
    rule = Retention(max_records=3)
    for _ in range(3):
        gone = expired(records, NOW, rule).get("a", [])
        if not gone:
            break
        records = [r for r in records if r["metadata"]["name"] not in gone]
        records.append(pruned_record("a", gone, rule, NOW))
    assert len(records) == 3
    assert expired(records, NOW, rule) == {}


def test_the_pass_is_recorded_as_an_audit_event() -> None:
    record = pruned_record("a", ["r1", "r2"], Retention(max_age_days=30, max_records=10), NOW)
    AuditLog.model_validate(record)
    spec = record["spec"]
    assert (spec["action"], spec["verb"], spec["stage"]) == ("Pruned", "delete", "ResponseComplete")
    assert spec["user"]["username"] == "system:serviceaccount:trainer-operator-system:trainer-operator-audit"
    assert spec["objectRef"]["resource"] == "auditlogs"
    assert "name" not in spec["objectRef"]
    assert spec["details"]["deleted"] == "2"
    assert "r1, r2" in spec["message"]
    assert "older than 30 days or beyond 10 records" in spec["message"]
    # Two replicas pruning the same records write one record (same name).
    assert (
        pruned_record("a", ["r1", "r2"], Retention(max_age_days=30), NOW)["metadata"]["name"]
        == (record["metadata"]["name"])
    )

"""Recording users' requests: the record is written before the review is answered, a failed write
is retried in the background, an update the API server retries is recorded once, and nothing ever
raises (the webhook never denies)."""

import asyncio
from datetime import UTC, datetime
from typing import Any

from lightkube import ApiError
from lightkube.models.meta_v1 import Status

from tests.factories import trainer_body
from trainerop_audit.user_recorder import UserRecorder
from trainerop_common.clock import FixedClock

REVIEW: dict[str, Any] = {
    "apiVersion": "admission.k8s.io/v1",
    "kind": "AdmissionReview",
    "request": {
        "uid": "11111111-2222-4333-8444-555555555555",
        "resource": {"group": "trainer.operator.kubeflow.org", "version": "v1alpha1", "resource": "trainers"},
        "namespace": "team-a",
        "name": "llama",
        "operation": "DELETE",
        "userInfo": {"username": "alice"},
        "oldObject": trainer_body("llama", "team-a", uid="abc"),
    },
}


class Writes:
    """Stands in for the API server's AuditLog create: records what was written, fails on demand."""

    def __init__(self, failures: list[BaseException] | None = None) -> None:
        self.records: list[dict[str, Any]] = []
        self.calls: list[bool] = []  # print_existing of each attempt
        self.failures = failures or []
        self.done = asyncio.Event()

    async def __call__(self, record: dict[str, Any], print_existing: bool) -> bool:
        self.calls.append(print_existing)
        if self.failures:
            raise self.failures.pop(0)
        self.records.append(record)
        self.done.set()
        return True


def api_error(code: int) -> ApiError:
    return ApiError(status=Status(code=code, message="refused", reason="x"))


def recorder(writes: Writes) -> UserRecorder:
    return UserRecorder(writes, FixedClock(datetime(2026, 11, 30, tzinfo=UTC)), "ops", retry_delays=(0, 0))


async def test_a_request_is_recorded_before_it_is_answered() -> None:
    writes = Writes()
    assert await recorder(writes).review(REVIEW) == "recorded"
    (record,) = writes.records
    assert record["spec"]["user"] == {"username": "alice"}
    assert record["spec"]["auditID"] == REVIEW["request"]["uid"]
    assert record["spec"]["stageTimestamp"] == "2026-11-30T00:00:00.000000Z"


async def test_a_failed_write_is_retried_and_a_later_attempt_prints_what_it_finds() -> None:
    writes = Writes([api_error(500), api_error(503)])
    users = recorder(writes)
    await users.review(REVIEW)
    await asyncio.wait_for(writes.done.wait(), 5)
    assert len(writes.records) == 1
    # A later attempt may find what an earlier, failed-looking one created: it prints it then.
    assert writes.calls == [False, True, True]


async def test_an_update_the_api_server_retries_is_recorded_once() -> None:
    old = trainer_body("llama", "team-a", uid="abc", epochs=1)
    new = trainer_body("llama", "team-a", uid="abc", generation=2, resource_version="9", epochs=2)
    update: dict[str, Any] = {**REVIEW["request"], "operation": "UPDATE", "object": new, "oldObject": old}
    # The API server's retry after a conflict; its first attempt may have read a stale copy.
    stale = trainer_body("llama", "team-a", uid="abc", epochs=0)
    retried = {**update, "uid": "another-uid", "oldObject": {**old, "status": {"phase": "Running"}}}
    first = {**update, "oldObject": stale}
    back = {**update, "uid": "third-uid", "object": old, "oldObject": new}
    writes = Writes()
    users = recorder(writes)
    outcomes = [await users.review({"request": r}) for r in (first, retried, back)]
    assert outcomes == ["recorded", "repeated", "recorded"]
    assert [r["spec"]["auditID"] for r in writes.records] == [update["uid"], "third-uid"]


async def test_a_refused_write_is_not_retried_and_a_broken_review_does_not_raise() -> None:
    writes = Writes([api_error(403)])
    users = recorder(writes)
    assert await users.review(REVIEW) == "failed"
    broken = {"uid": "x", "operation": "CREATE", "resource": {"resource": "trainers"}, "object": "not an object"}
    assert await users.review({"request": broken}) == "failed"
    assert writes.calls == [False]  # the refusal was final
    assert writes.records == []

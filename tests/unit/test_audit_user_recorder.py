"""Recording users' requests: with the API server's certificate checked the record is written
before the review is answered; without it a review is recorded only once the object read from the
API bears it out, after the answer. A failed write is retried in the background, an update the API
server retries is recorded once, and nothing ever raises (the webhook never denies)."""

import asyncio
from datetime import UTC, datetime
from typing import Any

from lightkube import ApiError
from lightkube.models.meta_v1 import Status
from prometheus_client import REGISTRY

from tests.factories import trainer_body
from trainerop_audit.record import record_name
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


class Reads:
    """Stands in for reading the object from the API: each read answers the next of ``states``
    (the last one again once they are used up); what was read is kept."""

    def __init__(self, *states: dict[str, Any] | None) -> None:
        self.states = list(states)
        self.calls: list[tuple[str, str | None, str]] = []

    async def __call__(self, resource: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        self.calls.append((resource, namespace, name))
        return self.states.pop(0) if len(self.states) > 1 else self.states[0]


def recorder(writes: Writes, reads: Reads | None = None) -> UserRecorder:
    clock = FixedClock(datetime(2026, 11, 30, tzinfo=UTC))
    return UserRecorder(writes, clock, "ops", retry_delays=(0, 0), read=reads, after_delays=(0, 0, 0))


def counted(operation: str, outcome: str) -> float:
    labels = {"operation": operation, "outcome": outcome}
    return REGISTRY.get_sample_value("audit_webhook_requests_total", labels) or 0.0


async def test_a_request_is_recorded_before_it_is_answered() -> None:
    writes = Writes()
    assert await recorder(writes).review(REVIEW) == "recorded"
    (record,) = writes.records
    assert record["spec"]["user"] == {"username": "alice"}
    assert record["spec"]["auditID"] == REVIEW["request"]["uid"]
    assert record["spec"]["stageTimestamp"] == "2026-11-30T00:00:00.000000Z"
    assert record["spec"]["details"] == {"identity": "api-server-certificate"}


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


async def test_without_the_certificate_a_review_is_recorded_once_the_api_bears_it_out() -> None:
    writes, reads = Writes(), Reads(REVIEW["request"]["oldObject"], None)  # there when asked, then gone
    users = recorder(writes, reads)
    assert await users.review(REVIEW) == "corroborating"  # answered after one read, nothing written yet
    assert (reads.calls, writes.records) == ([("trainers", "team-a", "llama")], [])
    name = record_name("llama", "Deleted", REVIEW["request"]["uid"])
    assert users.pending(name)
    assert await users.settled() == ["recorded"]
    (record,) = writes.records
    assert record["metadata"]["name"] == name
    assert not users.pending(name)
    assert record["spec"]["details"] == {"identity": "corroborated"}
    assert record["spec"]["user"] == {"username": "alice"}


async def test_a_forged_deletion_of_an_object_that_stays_writes_nothing() -> None:
    before = counted("DELETE", "uncorroborated")
    writes, reads = Writes(), Reads(REVIEW["request"]["oldObject"])  # never deleted
    users = recorder(writes, reads)
    assert await users.review(REVIEW) == "corroborating"
    assert await users.settled() == ["uncorroborated"]
    assert len(reads.calls) == 4  # before, and each read after the answer
    assert writes.calls == []
    assert counted("DELETE", "uncorroborated") == before + 1


async def test_a_review_the_object_contradicts_on_arrival_is_not_followed() -> None:
    writes, reads = Writes(), Reads(trainer_body("llama", "team-a", uid="another"))
    users = recorder(writes, reads)
    assert await users.review(REVIEW) == "uncorroborated"
    assert (len(reads.calls), writes.calls, await users.settled()) == (1, [], [])


async def test_a_creation_is_pending_while_it_is_corroborated() -> None:
    created = trainer_body("llama", "team-a", uid="0123456789")
    review = {"request": {**REVIEW["request"], "operation": "CREATE", "object": created, "oldObject": None}}
    writes, reads = Writes(), Reads(None, None, created)  # appears at the second read after the answer
    users = recorder(writes, reads)
    assert await users.review(review) == "corroborating"
    assert users.pending("llama-created-01234567")  # the controller's unobserved-creation record waits
    assert await users.settled() == ["recorded"]
    assert writes.records[0]["metadata"]["name"] == "llama-created-01234567"
    assert not users.pending("llama-created-01234567")


async def test_a_flood_of_reviews_is_corroborated_only_up_to_a_bound(monkeypatch: Any) -> None:
    """Reviews that pass the first read each wait for the object's change: beyond the bound a
    review is not believed, so a flood sent to the port cannot grow the controller without end."""
    monkeypatch.setattr("trainerop_audit.user_recorder.MAX_CORROBORATING", 2)
    created = trainer_body("llama", "team-a", uid="0123456789")
    review = {"request": {**REVIEW["request"], "operation": "CREATE", "object": created, "oldObject": None}}
    users = recorder(Writes(), Reads(None, None, None, created))
    outcomes = [await users.review(review) for _ in range(3)]
    assert outcomes == ["corroborating", "corroborating", "uncorroborated"]
    await users.settled()

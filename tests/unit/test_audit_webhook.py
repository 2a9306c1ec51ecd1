"""The audit webhook over real HTTPS: it always allows, writes the record before it answers, retries
a failed write in the background, and starts serving once its certificate appears."""

import asyncio
import os
import ssl
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from hack import cluster
from lightkube import ApiError
from lightkube.models.meta_v1 import Status

from trainerop_audit.webhook import AuditWebhook
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
        "oldObject": {"metadata": {"name": "llama", "namespace": "team-a", "uid": "abc"}},
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


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("pki")
    cluster.make_pki(path)
    cluster.issue_certificate(path, "webhook", "audit-webhook", None, ["127.0.0.1"])
    return path


async def serve(pki: Path, writes: Writes, cert: str = "webhook") -> AuditWebhook:
    hook = AuditWebhook(
        writes, FixedClock(datetime(2026, 11, 30, tzinfo=UTC)), "ops", retry_delays=(0, 0), reload_seconds=0.01
    )
    await hook.start("127.0.0.1", 0, str(pki / f"{cert}.crt"), str(pki / f"{cert}.key"))
    return hook


async def post(pki: Path, hook: AuditWebhook, body: Any) -> tuple[int, Any]:
    await asyncio.wait_for(hook.serving.wait(), 10)
    context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    url = f"https://127.0.0.1:{hook.port}/audit"
    async with aiohttp.ClientSession() as http, http.post(url, json=body, ssl=context) as response:
        return response.status, await response.json(content_type=None) if response.status == 200 else None


async def test_a_request_is_recorded_before_it_is_allowed(pki: Path) -> None:
    writes = Writes()
    hook = await serve(pki, writes)
    try:
        status, answer = await post(pki, hook, REVIEW)
    finally:
        await hook.stop()
    assert status == 200
    assert answer["response"] == {"uid": REVIEW["request"]["uid"], "allowed": True}
    (record,) = writes.records
    assert record["spec"]["user"] == {"username": "alice"}
    assert record["spec"]["stageTimestamp"] == "2026-11-30T00:00:00.000000Z"


async def test_a_failed_write_is_retried_and_the_request_still_allowed(pki: Path) -> None:
    writes = Writes([api_error(500), api_error(503)])
    hook = await serve(pki, writes)
    try:
        _status, answer = await post(pki, hook, REVIEW)
        await asyncio.wait_for(writes.done.wait(), 5)
    finally:
        await hook.stop()
    assert answer["response"]["allowed"] is True
    assert len(writes.records) == 1
    # A later attempt may find what an earlier, failed-looking one created: it prints it then.
    assert writes.calls == [False, True, True]


async def test_an_update_the_api_server_retries_is_recorded_once(pki: Path) -> None:
    old = {"metadata": {"name": "llama", "namespace": "team-a", "uid": "abc"}, "spec": {"epochs": 1}}
    new = {
        "metadata": {"name": "llama", "namespace": "team-a", "uid": "abc", "resourceVersion": "9"},
        "spec": {"epochs": 2},
    }
    update: dict[str, Any] = {**REVIEW["request"], "operation": "UPDATE", "object": new, "oldObject": old}
    # The API server's retry after a conflict; its first attempt may have read a stale copy.
    stale = {**old, "spec": {"epochs": 0}}
    retried = {**update, "uid": "another-uid", "oldObject": {**old, "status": {"phase": "Running"}}}
    first = {**update, "oldObject": stale}
    back = {**update, "uid": "third-uid", "object": old, "oldObject": new}
    writes = Writes()
    hook = await serve(pki, writes)
    try:
        for request in (first, retried, back):
            await post(pki, hook, {"request": request})
    finally:
        await hook.stop()
    assert [r["spec"]["auditID"] for r in writes.records] == [update["uid"], "third-uid"]


async def test_a_refused_write_is_not_retried_and_never_denies(pki: Path) -> None:
    writes = Writes([api_error(403)])
    hook = await serve(pki, writes)
    try:
        _, answer = await post(pki, hook, REVIEW)
        broken = {"uid": "x", "operation": "CREATE", "resource": {"resource": "trainers"}, "object": "not an object"}
        _, again = await post(pki, hook, {"request": broken})  # observe() fails on it: still allowed
        status, _ = await post(pki, hook, "not a review")
    finally:
        await hook.stop()
    assert answer["response"]["allowed"] is True
    assert again["response"]["allowed"] is True
    assert status == 400  # a JSON string is no review
    assert writes.records == []


async def test_the_webhook_serves_once_its_certificate_is_mounted(pki: Path, tmp_path: Path) -> None:
    writes = Writes()
    hook = await serve(tmp_path, writes, cert="late")
    try:
        for _ in range(5):
            await asyncio.sleep(0.02)  # several reload periods
        assert not hook.serving.is_set()  # nothing to serve with yet
        for suffix in ("crt", "key"):
            (tmp_path / f"late.{suffix}").write_bytes((pki / f"webhook.{suffix}").read_bytes())
        status, _ = await post(pki, hook, REVIEW)
    finally:
        await hook.stop()
    assert status == 200
    assert len(writes.records) == 1


async def test_a_rotated_certificate_is_served_and_a_bad_one_does_not_break_tls(pki: Path, tmp_path: Path) -> None:
    for suffix in ("crt", "key"):
        (tmp_path / f"hook.{suffix}").write_bytes((pki / f"webhook.{suffix}").read_bytes())
    writes = Writes()
    hook = await serve(tmp_path, writes, cert="hook")
    try:
        await post(pki, hook, REVIEW)
        # A certificate that does not match the key (a half-written rotation): the old one goes on.
        cluster.issue_certificate(pki, "other", "other", None, ["127.0.0.1"])
        os.utime(tmp_path / "hook.key", (1, 1))
        (tmp_path / "hook.crt").write_bytes((pki / "other.crt").read_bytes())
        for _ in range(5):
            await asyncio.sleep(0.02)  # several reload periods
        status, _ = await post(pki, hook, REVIEW)
        assert status == 200
        (tmp_path / "hook.key").write_bytes((pki / "other.key").read_bytes())  # the rotation completes
        served = None
        for _ in range(100):
            await asyncio.sleep(0.02)
            served = await asyncio.get_running_loop().run_in_executor(None, peer_certificate, hook.port)
            if served == (pki / "other.crt").read_text():
                break
        assert served == (pki / "other.crt").read_text()
    finally:
        await hook.stop()


def peer_certificate(port: int) -> str:
    return ssl.get_server_certificate(("127.0.0.1", port))

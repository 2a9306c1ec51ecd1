"""Notifications of Trainer events: which are due, what they say, and their delivery with retries."""

import asyncio
import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from trainerop_audit.delivery import Delivery, Notifier
from trainerop_audit.notices import Notice, Notified, RoleFailures, Settings, due, payload, retry_delay
from trainerop_common.api.base import Condition

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
T = "2026-11-30T11:59:00Z"
CANARY = "s3cr3t-canary-value"


def cond(type_: str, reason: str = "R", message: str = "", at: str = T, status: str = "True") -> Condition:
    return Condition.model_validate(
        {"type": type_, "status": status, "reason": reason, "message": message, "lastTransitionTime": at}
    )


def notices(
    conditions: list[Condition],
    roles: list[RoleFailures] | None = None,
    notified: Notified | None = None,
    settings: Settings | None = None,
) -> tuple[list[Notice], list[Notice]]:
    return due("team-a", "llm", "Failed", conditions, roles or [], notified or Notified(), NOW, settings or Settings())


OLD = "2026-11-30T10:00:00Z"  # two hours before NOW: older than --notify-max-age-seconds

# Which notices are due (sent) and which are only marked (skipped), one row per situation.
DUE_TABLE: list[tuple[str, list[Condition], frozenset[str], list[str], list[str]]] = [
    # situation, the Trainer's conditions, the events chosen -> sent, skipped
    ("failed", [cond("Failed")], frozenset({"Failed"}), ["Failed"], []),
    ("stalled and running", [cond("Stalled"), cond("Running")], frozenset({"Stalled"}), ["Stalled"], []),
    ("succeeded, not chosen", [cond("Succeeded")], frozenset({"Failed"}), [], []),
    ("a condition that is not True", [cond("Failed", status="False")], frozenset({"Failed"}), [], []),
    ("failed long before the notifier saw it", [cond("Failed", at=OLD)], frozenset({"Failed"}), [], ["Failed"]),
]


@pytest.mark.parametrize(
    ("conditions", "events", "sent", "skipped"), [row[1:] for row in DUE_TABLE], ids=[row[0] for row in DUE_TABLE]
)
def test_which_notices_are_due(
    conditions: list[Condition], events: frozenset[str], sent: list[str], skipped: list[str]
) -> None:
    send, skip = notices(conditions, settings=Settings(events=events))
    assert ([n.event for n in send], [n.event for n in skip]) == (sent, skipped)


def test_failed_stalled_and_succeeded_are_due_once_per_transition() -> None:
    send, skip = notices([cond("Failed", "BackoffLimitExceeded", "6 restarts"), cond("Running", status="False")])
    assert [(n.event, n.reason, n.message, n.time) for n in send] == [
        ("Failed", "BackoffLimitExceeded", "6 restarts", T)
    ]
    assert skip == []
    notified = send[0].mark(Notified())
    assert notified.to_k8s() == {"conditions": {"Failed": T}}
    assert notices([cond("Failed")], notified=notified) == ([], [])  # sent already
    later = "2026-11-30T11:59:30Z"
    assert [n.time for n in notices([cond("Failed", at=later)], notified=notified)[0]] == [later]  # failed again


def test_only_chosen_events_are_due_and_old_ones_are_marked_without_sending() -> None:
    chosen = Settings(events=frozenset({"Failed"}))
    assert notices([cond("Succeeded"), cond("Stalled")], settings=chosen) == ([], [])
    old = (NOW - timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    send, skip = notices([cond("Succeeded", at=old), cond("Stalled")])
    assert [n.event for n in send] == ["Stalled"]
    assert [n.event for n in skip] == ["Succeeded"]


def test_a_restart_storm_is_due_once_per_run_of_failures() -> None:
    calm = RoleFailures("worker", restarts=4, recent_failures=2, last_failure=T)
    assert notices([], [calm]) == ([], [])
    storm = RoleFailures("worker", restarts=5, recent_failures=3, last_failure=T)
    (notice,), _ = notices([], [storm])
    assert (notice.event, notice.role, notice.restarts) == ("RestartStorm", "worker", 5)
    assert notice.message == "worker: 3 failures in a row, each soon after the last (5 restarts in all)"
    notified = notice.mark(Notified())
    assert notified.to_k8s() == {"restartStorms": {"worker": 5}}
    worse = RoleFailures("worker", restarts=7, recent_failures=5, last_failure=T)
    assert notices([], [worse], notified) == ([], [])  # the same storm, still going
    again = RoleFailures("worker", restarts=12, recent_failures=3, last_failure=T)
    assert [n.restarts for n in notices([], [again], notified)[0]] == [12]  # a new storm after a calm


def test_payloads_for_slack_teams_and_json_carry_no_secret() -> None:
    (notice,), _ = notices([cond("Failed", "BackoffLimitExceeded", f"exit 1: API_TOKEN={CANARY}")])
    slack, teams, plain = (payload(notice, fmt) for fmt in ("slack", "teams", "json"))
    assert slack["text"].startswith("Trainer team-a/llm failed: exit 1: API_TOKEN=")
    assert slack["blocks"][0] == {"type": "header", "text": {"type": "plain_text", "text": "Trainer team-a/llm failed"}}
    card = teams["attachments"][0]
    assert card["contentType"] == "application/vnd.microsoft.card.adaptive"
    assert card["content"]["type"] == "AdaptiveCard"
    assert {"title": "Reason", "value": "BackoffLimitExceeded"} in card["content"]["body"][2]["facts"]
    assert plain["event"] == "Failed"
    assert plain["trainer"] == {"namespace": "team-a", "name": "llm"}
    for body in (slack, teams, plain):
        assert CANARY not in json.dumps(body)


class Receiver:
    """Answers with the given status codes in turn (then 200) and keeps what it was sent."""

    def __init__(self, *codes: int, retry_after: str | None = None, down: bool = False) -> None:
        self.codes = list(codes)
        self.retry_after = retry_after
        self.down = down
        self.bodies: list[dict[str, object]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if self.down:
            raise httpx.ConnectError("connection refused", request=request)
        self.bodies.append(json.loads(request.content))
        code = self.codes.pop(0) if self.codes else 200
        headers = {"Retry-After": self.retry_after} if self.retry_after and code == 429 else {}
        return httpx.Response(code, headers=headers)


def notifier(tmp_path: Path, receiver: Receiver, url: str = "https://hooks.example/T000/B000/XXXX") -> Notifier:
    (tmp_path / "url").write_text(url + "\n")
    client = httpx.AsyncClient(transport=httpx.MockTransport(receiver))
    return Notifier(tmp_path / "url", "json", client=client)


def failed_notice() -> Notice:
    return Notice("Failed", "team-a", "llm", "Failed", "BackoffLimitExceeded", "6 restarts", T)


def test_one_attempt_says_whether_trying_again_may_help(tmp_path: Path) -> None:
    def attempt(receiver: Receiver) -> Delivery:
        return asyncio.run(notifier(tmp_path, receiver).send(failed_notice()))

    assert attempt(Receiver()) == Delivery()
    assert attempt(Receiver(503)) == Delivery("the webhook answered 503", retryable=True)
    assert attempt(Receiver(429, retry_after="7")) == Delivery("the webhook answered 429", True, 7.0)
    assert attempt(Receiver(403)) == Delivery("the webhook answered 403", retryable=False)  # a wrong URL
    assert attempt(Receiver(down=True)) == Delivery("no answer (ConnectError)", retryable=True)


def test_retries_back_off_to_five_minutes_or_follow_retry_after() -> None:
    assert [retry_delay(n) for n in (1, 2, 3, 9, 10)] == [1, 2, 4, 256, 300]
    assert retry_delay(3, retry_after=30) == 30
    assert retry_delay(1, retry_after=0) == 1
    assert retry_delay(1, retry_after=3600) == 300


def test_a_notice_that_failed_before_is_sent_however_old() -> None:
    old = (NOW - timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert notices([cond("Failed", at=old)])[0] == []
    send, _ = due(
        "team-a", "llm", "Failed", [cond("Failed", at=old)], [], Notified(), NOW, Settings(), {("Failed", old)}
    )
    assert [n.time for n in send] == [old]


def test_a_bad_url_file_is_reported_without_the_url(tmp_path: Path) -> None:
    receiver = Receiver()
    bad = notifier(tmp_path, receiver, url="hooks.example/T000/B000/secret-path")
    delivery = asyncio.run(bad.send(failed_notice()))
    assert delivery.failure is not None
    assert not delivery.retryable
    assert "does not hold an http(s) URL" in delivery.failure
    assert "secret-path" not in delivery.failure
    assert receiver.bodies == []
    missing = Notifier(tmp_path / "absent", "json")
    assert "cannot read the notification URL" in (asyncio.run(missing.send(failed_notice())).failure or "")


def test_the_url_file_is_read_again_when_it_changes(tmp_path: Path) -> None:
    receiver = Receiver()
    n = notifier(tmp_path, receiver)
    assert n.url() == "https://hooks.example/T000/B000/XXXX"
    (tmp_path / "url").write_text("https://hooks.example/rotated")
    os.utime(tmp_path / "url", (1, 1))  # a new mtime, as a Secret update gives
    assert n.url() == "https://hooks.example/rotated"

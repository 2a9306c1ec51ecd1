"""Delivers notifications (notices.py decides them) to one webhook with httpx: one attempt per
call, never a sleep; the audit controller retries a failed one by requeueing the Trainer
(notices.retry_delay).

The webhook's URL is a credential (a Slack or Teams webhook URL lets anyone post to the channel),
so it is read from a file (a mounted Secret, ``--notify-url-file``), re-read when the file
changes, and never logged: logs, Events and metrics name only the event and the Trainer (and the
httpx loggers, which would print the URL, are kept at WARNING).
"""

import logging
from dataclasses import dataclass
from pathlib import Path

import httpx
from prometheus_client import Counter

from .notices import Notice, payload

log = logging.getLogger("trainerop.audit.notifier")
for noisy in ("httpx", "httpcore"):  # they log each request's URL at INFO/DEBUG
    logging.getLogger(noisy).setLevel(logging.WARNING)
NOTIFICATIONS = Counter(
    "audit_notifications_total",
    "Notifications of Trainer events (Failed, Stalled, Succeeded, RestartStorm), by outcome: sent; failed "
    "(one attempt; retried with backoff); skipped (older than --notify-max-age-seconds when first seen).",
    ["event", "outcome"],
)
ATTEMPT_SECONDS = 5.0
RETRIED = {408, 425, 429, 500, 502, 503, 504}


class NotifierError(Exception):
    pass


@dataclass(frozen=True)
class Delivery:
    """What one attempt came to: delivered, or why not and whether trying again may help."""

    failure: str | None = None  # None: delivered
    retryable: bool = False
    retry_after: float | None = None  # the receiver's Retry-After, in seconds


class Notifier:
    def __init__(self, url_file: Path, fmt: str, client: httpx.AsyncClient | None = None) -> None:
        self._url_file = url_file
        self._fmt = fmt
        self._client = client or httpx.AsyncClient(timeout=ATTEMPT_SECONDS, follow_redirects=False)
        self._url: str | None = None
        self._mtime = 0.0

    def url(self) -> str:
        """The URL, re-read when its file changes (a rotated Secret)."""
        try:
            mtime = self._url_file.stat().st_mtime
            if self._url is None or mtime != self._mtime:
                url = self._url_file.read_text().strip()
                if not url.startswith(("https://", "http://")):
                    raise NotifierError(f"{self._url_file} does not hold an http(s) URL")
                self._url, self._mtime = url, mtime
        except OSError as err:
            raise NotifierError(f"cannot read the notification URL from {self._url_file}: {err.strerror}") from None
        return self._url

    async def send(self, notice: Notice) -> Delivery:
        """One attempt to deliver ``notice`` (no URL in what it says)."""
        delivery = await self._attempt(notice)
        NOTIFICATIONS.labels(notice.event, "failed" if delivery.failure else "sent").inc()
        if delivery.failure:
            log.warning(
                "notification of %s for Trainer %s/%s not delivered: %s",
                notice.event,
                notice.namespace,
                notice.name,
                delivery.failure,
            )
        return delivery

    async def _attempt(self, notice: Notice) -> Delivery:
        try:
            response = await self._client.post(self.url(), json=payload(notice, self._fmt))
        except NotifierError as err:
            return Delivery(str(err))  # the configuration: retrying soon will not help
        except httpx.HTTPError as err:
            return Delivery(f"no answer ({type(err).__name__})", retryable=True)
        if response.is_success:
            return Delivery()
        after = response.headers.get("Retry-After", "")
        return Delivery(
            f"the webhook answered {response.status_code}",
            retryable=response.status_code in RETRIED,
            retry_after=float(after) if after.isdigit() else None,
        )

    async def close(self) -> None:
        await self._client.aclose()

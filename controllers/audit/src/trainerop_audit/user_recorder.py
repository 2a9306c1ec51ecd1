"""Recording users' requests: the audit webhook (served by the runtime's webhook server at /audit,
a validating webhook that observes and never denies) hands each AdmissionReview here.

For each request it writes the AuditLog recording who did what (:mod:`user_actions` says what),
waiting up to a few seconds for the write before the review is answered "allowed"; a write that
fails or takes longer goes on in the background (bounded retries, well within the time after which
the controller would record a creation as unobserved) and, if it never succeeds, is logged as an
error naming the record and counted. Forged reviews are kept out by TLS and a NetworkPolicy, not by
this code.
"""

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from lightkube import ApiError
from prometheus_client import Counter

from trainerop_common.clock import Clock, rfc3339_micro

from .user_actions import observe, transition_key

log = logging.getLogger("trainerop.audit.webhook")
REQUESTS = Counter(
    "audit_webhook_requests_total",
    "Admission requests the audit webhook answered, by outcome: recorded, skipped (nothing to record), "
    "repeated (an update the API server retried), retrying (the write goes on), failed.",
    ["operation", "outcome"],
)
LOST = Counter("audit_webhook_records_lost_total", "Records of users' requests that could not be written.")
WEBHOOK = "audit"  # served at /audit (deploy/controllers/audit/webhook.yaml)
# What the API server sends: every create, update (scale and status included) and delete of
# Trainers and profiles, every delete of an AuditLog (the webhook configuration's rules).
RESOURCES = (("trainers", "*"), ("trainingprofiles", None), ("clustertrainingprofiles", None), ("auditlogs", None))
FIRST_WRITE_SECONDS = 2.5  # how long an answer waits for the write (the API server waits 5 s at most)
ATTEMPT_SECONDS = 2.5
RETRY_DELAYS = (1.0, 2.0, 4.0)  # 4 attempts end within 17 s: before UNOBSERVED_AFTER_SECONDS (30)
STOP_GRACE_SECONDS = 5.0
REMEMBERED = 10_000  # objects whose last recorded transition is remembered (retried updates)

# write(record, print_existing): create the AuditLog; True if created, False if it existed
Writer = Callable[[dict[str, Any], bool], Awaitable[bool]]


def _permanent(err: BaseException) -> bool:
    """A refusal that a retry will not change (e.g. the record is invalid)."""
    code = err.status.code if isinstance(err, ApiError) and err.status else None
    return code is not None and 400 <= code < 500 and code not in (408, 429)  # 409: create() says False


class UserRecorder:
    def __init__(
        self, write: Writer, clock: Clock, operator_namespace: str, retry_delays: tuple[float, ...] = RETRY_DELAYS
    ) -> None:
        self._write = write
        self._retry_delays = retry_delays
        self._clock = clock
        self._namespace = operator_namespace
        self.self_user: str | None = None  # this controller's own identity (its retention deletes)
        self._deliveries: dict[str, asyncio.Task[bool]] = {}  # record name -> its write in flight
        self._last: OrderedDict[str, str] = OrderedDict()  # object uid -> last recorded transition

    def pending(self, name: str) -> bool:
        """A user's record of this name is still being written."""
        return name in self._deliveries

    async def stop(self) -> None:
        """Give writes in flight a few seconds, report the ones that did not finish."""
        deliveries = dict(self._deliveries)
        if deliveries:
            await asyncio.wait(deliveries.values(), timeout=STOP_GRACE_SECONDS)
        for name, delivery in deliveries.items():
            if not delivery.done():
                delivery.cancel()
                LOST.inc()
                log.error("audit record of a user's request not written before shutdown", extra={"record": name})

    async def review(self, review: Mapping[str, Any]) -> str:
        """Record one admission request; the outcome (also counted)."""
        request = review.get("request") or {}
        operation = str(request.get("operation", "")) if isinstance(request, Mapping) else ""
        try:
            record = observe(review, rfc3339_micro(self._clock.now()), self._namespace, self.self_user)
            outcome = "skipped" if record is None else await self._record(review, record)
        except Exception:
            log.exception("audit webhook could not read a request", extra={"operation": operation})
            outcome = "failed"
        REQUESTS.labels(operation, outcome).inc()
        return outcome

    async def _record(self, review: Mapping[str, Any], record: dict[str, Any]) -> str:
        uid = str(record["spec"]["objectRef"].get("uid") or "")
        key = transition_key(review)
        if uid and review["request"].get("operation") != "CREATE" and self._last.get(uid) == key:
            return "repeated"
        if uid:
            self._last[uid] = key
            self._last.move_to_end(uid)
            while len(self._last) > REMEMBERED:
                self._last.popitem(last=False)
        name = record["metadata"]["name"]
        delivery = asyncio.get_running_loop().create_task(self._deliver(record))
        self._deliveries[name] = delivery
        delivery.add_done_callback(lambda _: self._deliveries.pop(name, None))
        done, _ = await asyncio.wait({delivery}, timeout=FIRST_WRITE_SECONDS)  # never cancels it
        if not done:
            return "retrying"
        return "recorded" if delivery.result() else "failed"

    async def _deliver(self, record: dict[str, Any]) -> bool:
        """Write the record: attempts bounded in time, retried after a temporary failure."""
        err: BaseException | None = None
        for attempt, delay in enumerate((0.0, *self._retry_delays)):
            if delay:
                await asyncio.sleep(delay)
            try:
                # After a first attempt that may have gone through, finding the record is success.
                await asyncio.wait_for(self._write(record, attempt > 0), ATTEMPT_SECONDS)
                return True
            except Exception as e:
                err = e
                if _permanent(e):
                    break
        LOST.inc()
        meta = record["metadata"]
        log.error(
            "audit record of a user's request not written: %s",
            err,
            extra={"record": meta["name"], "namespace": meta["namespace"], "action": record["spec"]["action"]},
        )
        return False

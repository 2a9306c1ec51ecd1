"""Recording users' requests: the audit webhook (served by the runtime's webhook server at /audit,
a validating webhook that observes and never denies) hands each AdmissionReview here.

For each request it writes the AuditLog recording who did what (:mod:`user_actions` says what).
Whether a review is believed depends on how it reached the webhook:

- with ``--webhook-client-ca-file`` the webhook server hands over only reviews whose caller
  presented the API server's client certificate: each is believed, and its record is written
  before the review is answered (waiting up to a few seconds for the write; one that fails or
  takes longer goes on in the background);
- without it anyone who reaches the port could send one, so a review is believed only when the
  API bears it out (:mod:`corroboration`): the object is read once before the review is answered
  (the API server stores the change only after the answer), then read again with short backoff
  for a bounded time until it shows the review's effect; only then is the record written. A
  review not corroborated writes nothing, is counted (outcome ``uncorroborated``) and logged.

Each record says which of the two established its requester (``details.identity``). A write is
retried (bounded, well within the time after which the controller would record a creation as
unobserved, corroboration included) and, if it never succeeds, logged as an error naming the
record and counted. While a review is corroborated or its record written, :meth:`pending` is true
for the record's name, so that fallback does not fire early.
"""

import asyncio
import logging
from collections import Counter as Tally
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any

from lightkube import ApiError
from prometheus_client import Counter

from trainerop_common.clock import Clock, rfc3339_micro
from trainerop_common.kube import urgent_requests

from .corroboration import CERTIFICATE, CORROBORATED, Claim, after_doubt, before_doubt, claim_of, identified
from .user_actions import JOBS, observe, transition_key

log = logging.getLogger("trainerop.audit.webhook")
REQUESTS = Counter(
    "audit_webhook_requests_total",
    "Admission requests the audit webhook answered, by outcome: recorded, skipped (nothing to record), "
    "repeated (an update the API server retried), retrying (the write goes on), failed, uncorroborated "
    "(the object read from the API did not bear the review out: nothing written).",
    ["operation", "outcome"],
)
LOST = Counter("audit_webhook_records_lost_total", "Records of users' requests that could not be written.")
WEBHOOK = "audit"  # served at /audit (deploy/controllers/audit/webhook.yaml)
# What the API server sends: every create, update (scale and status included) and delete of
# Trainers and profiles, every delete of an AuditLog (the webhook configuration's rules).
RESOURCES = (("trainers", "*"), ("trainingprofiles", None), ("clustertrainingprofiles", None), ("auditlogs", None))
# ... and every create and delete of a Kubeflow v1 job (group kubeflow.org, where its CRD is installed).
JOB_RESOURCES = tuple(sorted(JOBS))
FIRST_WRITE_SECONDS = 2.5  # how long an answer waits for the write (the API server waits 5 s at most)
ATTEMPT_SECONDS = 2.5
RETRY_DELAYS = (1.0, 2.0, 4.0)  # 4 attempts end within 17 s
# Corroboration: the read before the answer (the API server waits 5 s at most for it), and the
# reads after it until the object shows the review's effect, bounded so that with the write's 17 s
# it ends before UNOBSERVED_AFTER_SECONDS (30).
BEFORE_SECONDS = 2.0
AFTER_SECONDS = 10.0
AFTER_DELAYS = (0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0, 2.0, 2.0)  # cut short at AFTER_SECONDS
CORROBORATING = "corroborating"  # answered; the outcome is counted once it is known
# Reviews corroborated at once, at most: a flood of forged reviews sent to the port (each passing
# the first read) cannot grow the controller without bound; beyond it a review is not believed.
MAX_CORROBORATING = 1000
STOP_GRACE_SECONDS = 5.0
REMEMBERED = 10_000  # objects whose last recorded transition is remembered (retried updates)

# write(record, print_existing): create the AuditLog; True if created, False if it existed
Writer = Callable[[dict[str, Any], bool], Awaitable[bool]]
# read(resource, namespace, name): the object as the API has it now; None if there is none
Reader = Callable[[str, str | None, str], Awaitable[dict[str, Any] | None]]


def _permanent(err: BaseException) -> bool:
    """A refusal that a retry will not change (e.g. the record is invalid)."""
    code = err.status.code if isinstance(err, ApiError) and err.status else None
    return code is not None and 400 <= code < 500 and code not in (408, 429)  # 409: create() says False


def _about(req: Mapping[str, Any]) -> tuple[str, str | None, str]:
    """(resource, namespace, name) of the object a review request is about."""
    obj = req.get("object") if req.get("operation") == "CREATE" else req.get("oldObject")
    meta = (obj.get("metadata") if isinstance(obj, Mapping) else None) or {}
    resource = str((req.get("resource") or {}).get("resource") or "")
    return resource, req.get("namespace") or None, str(meta.get("name") or req.get("name") or "")


class UserRecorder:
    def __init__(
        self,
        write: Writer,
        clock: Clock,
        operator_namespace: str,
        retry_delays: tuple[float, ...] = RETRY_DELAYS,
        read: Reader | None = None,
        after_delays: tuple[float, ...] = AFTER_DELAYS,
    ) -> None:
        """``read``: None when the webhook server hands over only the API server's reviews (its
        client certificate, --webhook-client-ca-file); else how each review is corroborated."""
        self._write = write
        self._read = read
        self._retry_delays = retry_delays
        self._after_delays = after_delays
        self._clock = clock
        self._namespace = operator_namespace
        self.self_user: str | None = None  # this controller's own identity (its retention deletes)
        self._in_flight: dict[asyncio.Task[str], str] = {}  # corroborations and writes -> record name
        self._names: Tally[str] = Tally()  # record names in flight
        self._last: OrderedDict[str, str] = OrderedDict()  # object uid -> last recorded transition

    def pending(self, name: str) -> bool:
        """A user's record of this name is still being corroborated or written."""
        return name in self._names

    async def settled(self) -> list[str]:
        """The outcomes of what is in flight, once it has ended."""
        return list(await asyncio.gather(*self._in_flight))

    async def stop(self) -> None:
        """Give what is in flight a few seconds, report the records that were not written."""
        in_flight = dict(self._in_flight)
        if in_flight:
            await asyncio.wait(in_flight, timeout=STOP_GRACE_SECONDS)
        for task, name in in_flight.items():
            if not task.done():
                task.cancel()
                LOST.inc()
                log.error("audit record of a user's request not written before shutdown", extra={"record": name})

    async def review(self, review: Mapping[str, Any]) -> str:
        """Record one admission request; the outcome known when it is answered (counted; that of
        a review being corroborated is counted once known)."""
        request = review.get("request") or {}
        operation = str(request.get("operation", "")) if isinstance(request, Mapping) else ""
        try:
            record = observe(review, rfc3339_micro(self._clock.now()), self._namespace, self.self_user)
            if record is None:
                outcome = "skipped"
            elif self._read is None:
                outcome = await self._record(review, identified(record, CERTIFICATE))
            else:
                outcome = await self._corroborate(review, record, self._read)
        except Exception:
            log.exception("audit webhook could not read a request", extra={"operation": operation})
            outcome = "failed"
        if outcome != CORROBORATING:
            REQUESTS.labels(operation, outcome).inc()
        return outcome

    def _start(self, name: str, work: Coroutine[Any, Any, str]) -> asyncio.Task[str]:
        task = asyncio.get_running_loop().create_task(work)
        self._in_flight[task] = name
        self._names[name] += 1
        task.add_done_callback(self._ended)
        return task

    def _ended(self, task: asyncio.Task[str]) -> None:
        name = self._in_flight.pop(task)
        self._names[name] -= 1
        if not self._names[name]:
            del self._names[name]

    def _repeated(self, key: str, operation: str, record: dict[str, Any]) -> bool:
        """An update the API server retried (its transition ``key`` recorded last for the object);
        otherwise the transition is remembered as the object's last."""
        uid = str(record["spec"]["objectRef"].get("uid") or "")
        if uid and operation != "CREATE" and self._last.get(uid) == key:
            return True
        if uid:
            self._last[uid] = key
            self._last.move_to_end(uid)
            while len(self._last) > REMEMBERED:
                self._last.popitem(last=False)
        return False

    async def _record(self, review: Mapping[str, Any], record: dict[str, Any]) -> str:
        """Write the record of a believed review, waiting a little for the write."""
        if self._repeated(transition_key(review), str(review["request"].get("operation")), record):
            return "repeated"
        delivery = self._start(record["metadata"]["name"], self._delivered(record))
        done, _ = await asyncio.wait({delivery}, timeout=FIRST_WRITE_SECONDS)  # never cancels it
        return delivery.result() if done else "retrying"

    async def _corroborate(self, review: Mapping[str, Any], record: dict[str, Any], read: Reader) -> str:
        """Read the object before the review is answered; if it bears the review out so far, look
        for the review's effect (and write the record) once it is answered."""
        req = review["request"]
        if len(self._in_flight) >= MAX_CORROBORATING:
            return self._uncorroborated(req, f"{MAX_CORROBORATING} reviews are being corroborated already")
        claim, about = claim_of(req), _about(req)
        try:
            with urgent_requests():  # the API server is waiting
                before = await asyncio.wait_for(read(*about), BEFORE_SECONDS)
        except Exception as err:
            return self._uncorroborated(req, f"could not read the object: {err or type(err).__name__}")
        why = before_doubt(claim, before)
        if why is not None:
            return self._uncorroborated(req, why)
        # Only what the wait needs is kept, not the review (objects up to 16 MiB) for its seconds.
        said = {k: req.get(k) for k in ("operation", "resource", "namespace", "name", "userInfo")}
        said["object" if claim.operation == "CREATE" else "oldObject"] = {"metadata": {"name": about[2]}}
        waited = self._corroborated(transition_key(review), said, record, claim, before, read)
        self._start(record["metadata"]["name"], waited)
        return CORROBORATING

    async def _corroborated(
        self,
        key: str,
        req: Mapping[str, Any],
        record: dict[str, Any],
        claim: Claim,
        before: Mapping[str, Any] | None,
        read: Reader,
    ) -> str:
        """Once the review is answered: its record written if the object shows its effect in time
        (``req``: what the review request said of its object and user; ``key``: its transition)."""
        why = await self._effect_doubt(_about(req), claim, before, read)
        if why is not None:
            outcome = self._uncorroborated(req, why)
        elif self._repeated(key, str(req.get("operation")), record):
            outcome = "repeated"
        else:
            outcome = await self._delivered(identified(record, CORROBORATED))
        REQUESTS.labels(str(req.get("operation", "")), outcome).inc()
        return outcome

    async def _effect_doubt(
        self, about: tuple[str, str | None, str], claim: Claim, before: Mapping[str, Any] | None, read: Reader
    ) -> str | None:
        """Read the object with backoff (for AFTER_SECONDS at most) until it shows the review's
        effect (None), or why it did not."""
        why = "the object was not read"
        try:
            async with asyncio.timeout(AFTER_SECONDS):
                for delay in self._after_delays:
                    await asyncio.sleep(delay)
                    try:
                        doubt = after_doubt(claim, before, await read(*about))
                    except Exception as err:  # read again
                        doubt = f"could not read the object: {err or type(err).__name__}"
                    if doubt is None:
                        return None
                    why = doubt
        except TimeoutError:
            pass
        return f"{why} within {AFTER_SECONDS:g} s"

    def _uncorroborated(self, req: Mapping[str, Any], why: str) -> str:
        resource, namespace, name = _about(req)
        log.warning(
            "audit webhook: %s of %s %s by %s not corroborated, not recorded: %s",
            req.get("operation"),
            resource,
            f"{namespace}/{name}" if namespace else name,
            (req.get("userInfo") or {}).get("username"),
            why,
        )
        return "uncorroborated"

    async def _delivered(self, record: dict[str, Any]) -> str:
        return "recorded" if await self._deliver(record) else "failed"

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

"""The audit webhook: a validating admission webhook (HTTPS) that observes and never denies.

For each request the API server sends (see deploy/controllers/audit/webhook.yaml) it writes the
AuditLog recording who did what, waiting up to a few seconds for the write before it answers
"allowed"; a write that fails or takes longer goes on in the background (bounded retries, well
within the time after which the controller would record a creation as unobserved) and, if it
never succeeds, is logged as an error naming the record and counted. It answers "allowed" whatever
happens: a broken audit trail must never stop training. Forged reviews are kept out by TLS and a
NetworkPolicy, not by this code.
"""

import asyncio
import logging
import os
import ssl
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web
from lightkube import ApiError
from prometheus_client import Counter

from trainerop_common.clock import Clock, rfc3339_micro

from .admission import observe, transition_key

log = logging.getLogger("trainerop.audit.webhook")
REQUESTS = Counter(
    "audit_webhook_requests_total",
    "Admission requests the audit webhook answered, by outcome: recorded, skipped (nothing to record), "
    "repeated (an update the API server retried), retrying (the write goes on), failed.",
    ["operation", "outcome"],
)
LOST = Counter("audit_webhook_records_lost_total", "Records of users' requests that could not be written.")
PATH = "/audit"
FIRST_WRITE_SECONDS = 2.5  # how long an answer waits for the write (the API server waits 5 s at most)
ATTEMPT_SECONDS = 2.5
RETRY_DELAYS = (1.0, 2.0, 4.0)  # 4 attempts end within 17 s: before UNOBSERVED_AFTER_SECONDS (30)
RELOAD_SECONDS = 30.0
STOP_GRACE_SECONDS = 5.0
MAX_REVIEW_BYTES = 16 * 1024 * 1024  # an update's review holds the object twice
REMEMBERED = 10_000  # objects whose last recorded transition is remembered (retried updates)

# write(record, print_existing): create the AuditLog; True if created, False if it existed
Writer = Callable[[dict[str, Any], bool], Awaitable[bool]]


def _permanent(err: BaseException) -> bool:
    """A refusal that a retry will not change (e.g. the record is invalid)."""
    code = err.status.code if isinstance(err, ApiError) and err.status else None
    return code is not None and 400 <= code < 500 and code not in (408, 429)  # 409: create() says False


class AuditWebhook:
    def __init__(
        self,
        write: Writer,
        clock: Clock,
        operator_namespace: str,
        retry_delays: tuple[float, ...] = RETRY_DELAYS,
        reload_seconds: float = RELOAD_SECONDS,
    ) -> None:
        self._write = write
        self._retry_delays = retry_delays
        self._reload_seconds = reload_seconds
        self._clock = clock
        self._namespace = operator_namespace
        self.self_user: str | None = None  # this controller's own identity (its retention deletes)
        self.port = 0
        self.serving = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self._ssl: ssl.SSLContext | None = None  # the context the server was started with
        self._current: ssl.SSLContext | None = None  # the latest certificate, chosen per handshake
        self._cert_mtime = 0.0
        self._tasks: set[asyncio.Task[None]] = set()
        self._deliveries: dict[str, asyncio.Task[bool]] = {}  # record name -> its write in flight
        self._last: OrderedDict[str, str] = OrderedDict()  # object uid -> last recorded transition

    def pending(self, name: str) -> bool:
        """A user's record of this name is still being written."""
        return name in self._deliveries

    async def start(self, address: str, port: int, cert_file: str, key_file: str) -> None:
        """Serve once the certificate exists (it may be mounted later); re-read it when it changes."""
        self._spawn(self._serve_when_ready(address, port, Path(cert_file), Path(key_file)))

    async def stop(self) -> None:
        """Stop serving; give writes in flight a few seconds, report the ones that did not finish."""
        for task in list(self._tasks):
            task.cancel()
        if self._runner is not None:
            await self._runner.cleanup()
        deliveries = dict(self._deliveries)
        if deliveries:
            await asyncio.wait(deliveries.values(), timeout=STOP_GRACE_SECONDS)
        for name, delivery in deliveries.items():
            if not delivery.done():
                delivery.cancel()
                LOST.inc()
                log.error("audit record of a user's request not written before shutdown", extra={"record": name})

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- TLS ------------------------------------------------------------------------------------
    def _load(self, cert: Path, key: Path) -> bool:
        """(Re)load the certificate into a new context; the old one serves until this one loaded."""
        try:
            mtime = max(os.stat(cert).st_mtime, os.stat(key).st_mtime)
        except OSError:
            return self._current is not None
        if mtime != self._cert_mtime:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(cert, key)
            self._current, self._cert_mtime = context, mtime
            if self._ssl is None:
                self._ssl = context
                context.sni_callback = self._choose_context
            log.info("audit webhook certificate loaded", extra={"certificate": str(cert)})
        return True

    def _choose_context(self, connection: Any, _server_name: str | None, _context: ssl.SSLContext) -> None:
        if self._current is not None and self._current is not _context:
            connection.context = self._current

    async def _serve_when_ready(self, address: str, port: int, cert: Path, key: Path) -> None:
        said = ""
        while True:
            problem = ""
            try:
                if not self._load(cert, key):
                    problem = (
                        f"no certificate at {cert} and key at {key}; mount the webhook's TLS Secret there "
                        "(docs/audit.md). Users' requests go unrecorded until then"
                    )
                elif self._runner is None:
                    await self._listen(address, port)
            except Exception as err:  # a bad certificate, a port in use: say so, try again
                problem = f"{type(err).__name__}: {err}"
                if self._runner is not None and not self.serving.is_set():
                    await self._runner.cleanup()
                    self._runner = None
            if problem and problem != said:
                log.error("audit webhook not serving: %s", problem)
            said = problem
            await asyncio.sleep(self._reload_seconds)

    async def _listen(self, address: str, port: int) -> None:
        app = web.Application(client_max_size=MAX_REVIEW_BYTES)
        app.router.add_post(PATH, self.handle)
        app.router.add_get("/healthz", self._healthz)  # TLS up, for probes
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, address, port, ssl_context=self._ssl)
        await site.start()
        sockets = getattr(site._server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1] if sockets else port
        self.serving.set()
        log.info("serving the audit webhook", extra={"address": address, "port": self.port, "path": PATH})

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    # -- admission ------------------------------------------------------------------------------
    async def handle(self, request: web.Request) -> web.Response:
        try:
            review = await request.json()
        except ValueError:
            review = None
        if not isinstance(review, dict):
            REQUESTS.labels("", "failed").inc()
            return web.Response(status=400, text="expected an AdmissionReview (JSON)\n")
        req = review.get("request") or {}
        operation = str(req.get("operation", ""))
        try:
            record = observe(review, rfc3339_micro(self._clock.now()), self._namespace, self.self_user)
            outcome = "skipped" if record is None else await self._record(review, record)
        except Exception:  # never deny, whatever went wrong
            log.exception("audit webhook could not read a request", extra={"operation": operation})
            outcome = "failed"
        REQUESTS.labels(operation, outcome).inc()
        return web.json_response(
            {
                "apiVersion": review.get("apiVersion", "admission.k8s.io/v1"),
                "kind": "AdmissionReview",
                "response": {"uid": req.get("uid", ""), "allowed": True},
            }
        )

    async def _record(self, review: dict[str, Any], record: dict[str, Any]) -> str:
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

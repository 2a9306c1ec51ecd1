"""The audit webhook: a validating admission webhook (HTTPS) that observes and never denies.

For each request the API server sends (see deploy/controllers/audit/webhook.yaml) it writes the
AuditLog recording who did what before it answers "allowed", so a request it answered has its
record, unless that write failed even after retries (logged as an error naming the record). It
answers "allowed" whatever happens: a broken audit trail must never stop training; an attempt to
forge records is kept out by TLS and a NetworkPolicy, not by this code.
"""

import asyncio
import logging
import os
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web
from lightkube import ApiError
from prometheus_client import Counter

from trainerop_common.clock import Clock, rfc3339_micro

from .admission import observe

log = logging.getLogger("trainerop.audit.webhook")
REQUESTS = Counter(
    "audit_webhook_requests_total",
    "Admission requests the audit webhook answered, by outcome: recorded, skipped (nothing to record), "
    "retrying (the first write failed), failed (not understood).",
    ["operation", "outcome"],
)
LOST = Counter("audit_webhook_records_lost_total", "Records of users' requests that could not be written.")
PATH = "/audit"
FIRST_WRITE_SECONDS = 2.5  # the API server waits at most timeoutSeconds (5) for the answer
RETRY_DELAYS = (1.0, 2.0, 4.0, 8.0)
RELOAD_SECONDS = 30.0

Writer = Callable[[dict[str, Any], str], Awaitable[bool]]


def _permanent(err: BaseException) -> bool:
    """A refusal that a retry will not change (e.g. the namespace is being deleted)."""
    code = err.status.code if isinstance(err, ApiError) and err.status else None
    return code is not None and 400 <= code < 500 and code not in (408, 429)


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
        self._runner: web.AppRunner | None = None
        self._ssl: ssl.SSLContext | None = None
        self._cert_mtime = 0.0
        self._tasks: set[asyncio.Task[None]] = set()
        self.serving = asyncio.Event()

    async def start(self, address: str, port: int, cert_file: str, key_file: str) -> None:
        """Serve once the certificate exists (it may be mounted later); re-read it when it changes."""
        self._spawn(self._serve_when_ready(address, port, Path(cert_file), Path(key_file)))

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._runner is not None:
            await self._runner.cleanup()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _load(self, cert: Path, key: Path) -> bool:
        try:
            mtime = max(os.stat(cert).st_mtime, os.stat(key).st_mtime)
        except OSError:
            return False
        if mtime != self._cert_mtime:
            if self._ssl is None:
                self._ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            self._ssl.load_cert_chain(cert, key)  # new connections use the new certificate
            self._cert_mtime = mtime
            log.info("audit webhook certificate loaded", extra={"certificate": str(cert)})
        return True

    async def _serve_when_ready(self, address: str, port: int, cert: Path, key: Path) -> None:
        warned = False
        while True:
            try:
                loaded = self._load(cert, key)
            except (ssl.SSLError, ValueError) as err:
                loaded = False
                log.error("audit webhook certificate %s or key %s is not usable: %s", cert, key, err)
            if loaded and self._runner is None:
                app = web.Application()
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
            elif not loaded and not warned:
                warned = True
                log.error(
                    "audit webhook not served yet: no certificate at %s and key at %s; mount the webhook's TLS "
                    "Secret there (docs/audit.md), users' requests go unrecorded until then",
                    cert,
                    key,
                )
            await asyncio.sleep(self._reload_seconds)

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.Response(text="ok\n")

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
            outcome = "skipped" if record is None else await self._record(record)
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

    async def _record(self, record: dict[str, Any]) -> str:
        try:
            await asyncio.wait_for(self._write(record, "user"), FIRST_WRITE_SECONDS)
            return "recorded"
        except Exception as err:
            if _permanent(err):
                self._lost(record, err)
                return "failed"
            self._spawn(self._retry(record))
            return "retrying"

    async def _retry(self, record: dict[str, Any]) -> None:
        err: BaseException | None = None
        for delay in self._retry_delays:
            await asyncio.sleep(delay)
            try:
                await self._write(record, "user")
                return
            except Exception as e:
                err = e
                if _permanent(e):
                    break
        self._lost(record, err)

    def _lost(self, record: dict[str, Any], err: BaseException | None) -> None:
        LOST.inc()
        meta = record["metadata"]
        log.error(
            "audit record of a user's request not written: %s",
            err,
            extra={"record": meta["name"], "namespace": meta["namespace"], "action": record["spec"]["action"]},
        )

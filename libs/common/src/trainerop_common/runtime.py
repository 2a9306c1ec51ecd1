"""The process shell every controller runs in: kopf, health/metrics server, resync, retries.

A controller supplies a :class:`Controller`: a ``reconcile(body)`` for Trainers (decide purely,
then write through adapters) and optional extra kopf registrations. The runtime serialises
reconciles per object, classifies errors (permanent: condition + Event, no retry; temporary:
retry with capped exponential backoff), resyncs every object periodically, and serves
``/healthz``, ``/readyz`` and ``/metrics``.
"""

import asyncio
import contextlib
import logging
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar, cast

import kopf
from aiohttp import web
from lightkube import ApiError
from opentelemetry import trace
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import ValidationError

from . import admission, jsonlog, kopf_settings, tracing
from .api import GROUP, VERSION
from .clock import Clock, SystemClock
from .config import ControllerConfig, parse_args
from .kube import Kube
from .metrics import (
    ADMISSION_DURATION,
    ADMISSION_REVIEWS,
    EVENTS_POSTED,
    QUEUE_DEPTH,
    RECONCILE_DURATION,
    RECONCILES_IN_FLIGHT,
    UP,
)
from .redaction import redact_text
from .tracing import reconcile_span
from .webhook_tls import SelfSignedTLS, serving_names

log = logging.getLogger("trainerop.runtime")

Key = tuple[str, str]  # (namespace, name)
T = TypeVar("T")
ADMISSION_READ_SECONDS = 3.0  # the webhooks' timeoutSeconds is 5
Body = Mapping[str, Any]


class StartupError(Exception):
    """The controller cannot start as configured; the message says what to change."""


class PermanentError(Exception):
    """The object itself is wrong (bad spec, missing reference): retrying will not help.

    The controller has already recorded it in a condition; the runtime posts an Event."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class Controller(Protocol):
    name: str

    async def reconcile(self, body: Body) -> None: ...

    def register(self, registry: kopf.OperatorRegistry, runtime: "Runtime") -> None: ...


def key_of(body: Body) -> Key:
    meta = body.get("metadata", {})
    return (str(meta.get("namespace", "")), str(meta.get("name", "")))


@dataclass
class Backoff:
    """Capped exponential backoff per object for temporary errors."""

    base: float = 1.0
    cap: float = 300.0
    failures: dict[Key, int] = field(default_factory=dict)

    def next_delay(self, key: Key) -> float:
        n = self.failures.get(key, 0)
        self.failures[key] = n + 1
        return float(min(self.cap, self.base * 2**n))

    def reset(self, key: Key) -> None:
        self.failures.pop(key, None)


EventPoster = Callable[[Body, str, str, str], None]


def post_with_kopf(body: Body, type_: str, reason: str, message: str) -> None:
    kopf.event(cast(kopf.Body, dict(body)), type=type_, reason=reason, message=message)


class Runtime:
    def __init__(
        self, config: ControllerConfig, kube: Kube, clock: Clock | None = None, post_event: EventPoster | None = None
    ) -> None:
        self.config = config
        self._post_event = post_event or post_with_kopf
        # (generation, reason) of the last permanent error reported per object: one Event, not one per resync
        self._reported: dict[Key, tuple[int, str]] = {}
        self.kube = kube
        self.clock = clock or SystemClock()
        self.trainers: dict[Key, Body] = {}
        self._locks: dict[Key, asyncio.Lock] = {}
        self._backoff = Backoff()
        self._retries: dict[Key, asyncio.TimerHandle] = {}
        self._controller: Controller | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.ready = asyncio.Event()
        # More that /readyz waits for: each returns what is not ready yet, or None.
        self.readiness: list[Callable[[], str | None]] = []
        self.admission_checks = 0  # checks registered with kopf (served when --webhook-port is set)
        # The admission checks' own client: their reads never queue behind reconciles' requests.
        self.admission_kube = kube
        self._waiting = 0  # reconciles waiting for the lock of their object
        QUEUE_DEPTH.labels(config.controller).set_function(lambda: self._waiting + len(self._retries))

    # -- events ---------------------------------------------------------------------------------
    def event(self, body: Body, type_: str, reason: str, message: str) -> None:
        """Post a Kubernetes Event about ``body`` (message redacted)."""
        EVENTS_POSTED.labels(self.config.controller, type_, reason).inc()
        try:
            self._post_event(body, type_, reason, redact_text(message))
        except LookupError:
            # kopf posts only from its own context (a watch handler); a reconcile started by our
            # timers (backoff, TTL, stall, resync) posts with the controller's own client instead.
            self.spawn(self._post_directly(body, type_, reason, redact_text(message)))

    async def _post_directly(self, body: Body, type_: str, reason: str, message: str) -> None:
        meta = body["metadata"]
        now = self.clock.now().strftime("%Y-%m-%dT%H:%M:%SZ")
        source = f"trainer-operator-{self.config.controller}"
        await self.kube.create_core(
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"generateName": f"{meta['name']}.", "namespace": meta.get("namespace") or "default"},
                "involvedObject": {
                    "apiVersion": body.get("apiVersion", ""),
                    "kind": body.get("kind", ""),
                    "name": meta["name"],
                    "namespace": meta.get("namespace"),
                    "uid": meta.get("uid"),
                },
                "type": type_,
                "reason": reason,
                "message": message[:1024],
                "source": {"component": source},
                "reportingComponent": source,
                "reportingInstance": self.config.pod_name or source,
                "firstTimestamp": now,
                "lastTimestamp": now,
                "count": 1,
            }
        )

    # -- reconciling ----------------------------------------------------------------------------
    async def reconcile(self, body: Body) -> None:
        assert self._controller is not None
        key = key_of(body)
        lock = self._locks.setdefault(key, asyncio.Lock())
        self._waiting += 1
        try:
            await lock.acquire()
        finally:
            self._waiting -= 1
        try:
            latest = self.trainers.get(key)
            if latest is None:
                return  # deleted meanwhile: nothing to reconcile (its children go with it)
            started = time.perf_counter()
            result = "ok"
            in_flight = RECONCILES_IN_FLIGHT.labels(self.config.controller)
            in_flight.inc()
            span = reconcile_span(self.config.controller, latest)
            try:
                with trace.use_span(span, end_on_exit=False):
                    await self._controller.reconcile(latest)
                self._backoff.reset(key)
            except (PermanentError, ValidationError) as err:
                result = "permanent_error"
                self._backoff.reset(key)
                self._report(latest, err)
            except (TimeoutError, ApiError, OSError) as err:
                result = "temporary_error"
                delay = self._backoff.next_delay(key)
                log.warning("reconcile of %s/%s failed, retrying in %.0fs: %s", *key, delay, err)
                self._schedule(key, delay)
            except Exception:
                result = "error"
                delay = self._backoff.next_delay(key)
                log.exception("reconcile of %s/%s crashed, retrying in %.0fs", *key, delay)
                self._schedule(key, delay)
            finally:
                in_flight.dec()
                span.set_attribute("trainer_operator.result", result)
                span.end()
                RECONCILE_DURATION.labels(self.config.controller, "Trainer", result).observe(
                    time.perf_counter() - started
                )
        finally:
            lock.release()

    def _report(self, body: Body, err: PermanentError | ValidationError) -> None:
        if isinstance(err, ValidationError):
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors(include_url=False)[:3]
            )
            err = PermanentError("InvalidSpec", f"the object does not match the operator's API ({problems})")
        key = key_of(body)
        seen = (int(body.get("metadata", {}).get("generation", 0)), err.reason)
        log.warning("%s/%s: %s: %s", *key, err.reason, err.message)
        if self._reported.get(key) != seen:
            self._reported[key] = seen
            self.event(body, "Warning", err.reason, err.message)

    def has_pending_retry(self, key: Key) -> bool:
        return key in self._retries

    def _schedule(self, key: Key, delay: float) -> None:
        """Reconcile ``key`` in ``delay`` seconds, unless one is already due sooner."""
        loop = asyncio.get_running_loop()
        old = self._retries.get(key)
        if old is not None and old.when() <= loop.time() + delay:
            return
        if old is not None:
            old.cancel()

        def fire() -> None:
            self._retries.pop(key, None)
            body = self.trainers.get(key)
            if body is not None:
                self.spawn(self.reconcile(body))

        self._retries[key] = loop.call_later(delay, fire)

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run a side task (e.g. a status write triggered by a watch) without blocking the watch."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)

        def done(t: asyncio.Task[None]) -> None:
            self._tasks.discard(t)
            if not t.cancelled() and t.exception() is not None:
                log.error("background task failed: %s", t.exception())

        task.add_done_callback(done)

    def requeue_after(self, key: Key, seconds: float) -> None:
        """Reconcile this Trainer again in ``seconds`` (a backoff, deadline or TTL falls due)."""
        self._schedule(key, seconds)

    def requeue(self, keys: Iterator[Key] | Sequence[Key]) -> None:
        """Reconcile these Trainers soon (e.g. a profile they use changed). A Trainer waiting out
        an error backoff keeps waiting: events must not turn a failing call into a hot loop."""
        for key in keys:
            if key not in self._backoff.failures:
                self._schedule(key, 0)

    async def resync_forever(self) -> None:
        while True:
            await asyncio.sleep(self.config.resync_seconds)
            for body in list(self.trainers.values()):
                await self.reconcile(body)

    async def admission_read(self, read: Callable[[Kube], Awaitable[T]]) -> T:
        """A read of an admission check from the API server, bounded well within the webhook's
        timeoutSeconds (raises TimeoutError past it)."""
        async with asyncio.timeout(ADMISSION_READ_SECONDS):
            return await read(self.admission_kube)

    # -- wiring ---------------------------------------------------------------------------------
    def admit(
        self, registry: kopf.OperatorRegistry, webhook: str, check: admission.Check, mutating: bool = False
    ) -> None:
        """Serve an admission check of Trainers at ``/<webhook>`` (only with --webhook-port)."""
        if self.config.webhook_port:
            register_admission(registry, self.config.controller, webhook, check, mutating)
            self.admission_checks += 1

    def registry_for(self, controller: Controller) -> kopf.OperatorRegistry:
        self._controller = controller
        registry = kopf.OperatorRegistry()

        @kopf.on.login(registry=registry)
        def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
            return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)

        @kopf.on.event(GROUP, VERSION, "trainers", registry=registry)
        async def on_trainer(event: Mapping[str, Any], body: kopf.Body, **_: Any) -> None:
            key = key_of(body)
            if event.get("type") == "DELETED":
                current = self.trainers.get(key)
                if current is not None and current["metadata"].get("uid") != body["metadata"].get("uid"):
                    return  # an older Trainer of the same name; the new one stays
                self.trainers.pop(key, None)
                self._locks.pop(key, None)
                self._reported.pop(key, None)
                self._backoff.reset(key)
                return
            self.trainers[key] = dict(body)
            await self.reconcile(self.trainers[key])

        controller.register(registry, self)
        return registry


def register_admission(
    registry: kopf.OperatorRegistry, controller: str, webhook: str, check: admission.Check, mutating: bool = False
) -> None:
    """Serve ``check`` for Trainers at ``/<webhook>`` (validating, or mutating: its ``spec`` is set)."""
    decorator = kopf.on.mutate if mutating else kopf.on.validate

    @decorator(GROUP, VERSION, "trainers", id=webhook, operations=["CREATE", "UPDATE"], registry=registry)
    async def handler(**kwargs: Any) -> None:
        # kopf passes its admission kwargs by name: body, old, operation, warnings, patch, ...
        body: Mapping[str, Any] = kwargs["body"]
        warnings: list[str] = kwargs["warnings"]
        patch: kopf.Patch = kwargs["patch"]
        operation = str(kwargs.get("operation") or "CREATE")
        started = time.perf_counter()
        outcome = "error"
        try:
            verdict = await check(admission.request_of(body, kwargs.get("old"), operation))
            warnings.extend(verdict.warnings)
            for name, value in verdict.spec.items():
                patch.spec[name] = value
            outcome = "refused" if verdict.problems else ("mutated" if verdict.spec else "allowed")
        finally:
            ADMISSION_REVIEWS.labels(controller, webhook, outcome).inc()
            ADMISSION_DURATION.labels(controller, webhook).observe(time.perf_counter() - started)
        if verdict.problems:
            meta = body.get("metadata") or {}
            log.info(
                "refused %s of Trainer %s/%s: %s",
                operation,
                meta.get("namespace"),
                meta.get("name"),
                "; ".join(verdict.problems),
            )
            raise kopf.AdmissionError("; ".join(verdict.problems), code=admission.REFUSED)


class Health:
    """``/healthz`` (the loop answers), ``/readyz`` (kopf is watching), ``/metrics``."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        self._runner: web.AppRunner | None = None
        self.port = 0

    async def start(self, address: str, port: int) -> None:
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, address, port)
        await site.start()
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1] if sockets else port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _readyz(self, _: web.Request) -> web.Response:
        if not self._runtime.ready.is_set():
            return web.Response(status=503, text="not ready: not yet watching the API server\n")
        waiting = [w for w in (check() for check in self._runtime.readiness) if w]
        if not await self._webhooks_listening():
            waiting.append("the admission webhooks are not listening yet")
        if waiting:
            return web.Response(status=503, text=f"not ready: {'; '.join(waiting)}\n")
        return web.Response(text="ready\n")

    async def _webhooks_listening(self) -> bool:
        """Whether kopf's webhook server accepts connections (when this controller serves any)."""
        config = self._runtime.config
        if not (self._runtime.admission_checks and config.webhook_port):
            return True
        host = "127.0.0.1" if config.webhook_address in ("", "0.0.0.0") else config.webhook_address
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(host, config.webhook_port), timeout=1.0)
        except (OSError, TimeoutError):
            return False
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return True

    async def _metrics(self, _: web.Request) -> web.Response:
        return web.Response(body=generate_latest(), headers={"Content-Type": CONTENT_TYPE_LATEST})


async def serve(config: ControllerConfig, make: Callable[[Runtime], Controller]) -> None:
    kube = Kube.from_environment(config.controller, config.qps, config.burst)
    runtime = Runtime(config, kube)
    controller = make(runtime)
    registry = runtime.registry_for(controller)
    settings = kopf.OperatorSettings()
    kopf_settings.apply(settings, config)
    renewal: list[Coroutine[Any, Any, None]] = []
    if config.webhook_port and config.webhook_tls == "self-signed":
        tls = self_signed(config, kube, runtime.clock)
        try:
            await tls.start()
        except (ApiError, OSError, RuntimeError) as err:
            raise StartupError(
                f"cannot set up the webhooks' self-signed certificate: {err}. The ServiceAccount needs the RBAC of "
                "deploy/components/self-signed-tls (the CA Secret, its own webhook configurations) and "
                f"{Path(config.webhook_cert_file).parent} must be writable"
            ) from None
        renewal.append(tls.maintain_forever())
    missing = missing_files(config.webhook_cert_file, config.webhook_key_file) if runtime.admission_checks else []
    if missing:
        raise StartupError(
            f"the webhooks' certificate is missing ({', '.join(missing)}): mount its Secret there "
            "(deploy/components/cert-manager), or run with --webhook-tls self-signed, or --webhook-port 0"
        )
    if runtime.admission_checks:
        runtime.admission_kube = Kube.from_environment(config.controller, config.qps, config.burst)
        # kopf's HTTPS server for the checks; it reloads the certificate files when they change.
        settings.admission.server = kopf.WebhookServer(
            addr=config.webhook_address,
            port=config.webhook_port,
            certfile=config.webhook_cert_file,
            pkeyfile=config.webhook_key_file,
        )
    health = Health(runtime)
    await health.start(config.metrics_address, config.metrics_port)
    log.info(
        "serving /metrics, /healthz and /readyz",
        extra={"address": config.metrics_address, "port": health.port},
    )
    kopf_ready = asyncio.Event()

    async def mark_ready() -> None:
        await kopf_ready.wait()
        runtime.ready.set()
        UP.labels(config.controller).set(1)
        log.info("watching Trainers", extra={"namespaces": list(config.namespaces) or "all"})

    helpers = [asyncio.create_task(mark_ready()), asyncio.create_task(runtime.resync_forever())]
    helpers += [asyncio.create_task(coro) for coro in renewal]

    @kopf.on.cleanup(registry=registry)
    async def stop_helpers(**_: Any) -> None:
        # kopf waits for every task still running when it stops; ours end with it.
        for task in helpers:
            task.cancel()

    try:
        # kopf handles SIGINT/SIGTERM itself and then runs the cleanup handler above.
        await kopf.operator(
            registry=registry,
            settings=settings,
            clusterwide=not config.namespaces,
            namespaces=list(config.namespaces),
            standalone=not config.peering,
            ready_flag=kopf_ready,
        )
    finally:
        UP.labels(config.controller).set(0)
        for task in helpers:
            task.cancel()
        await health.stop()
        await kube.close()
        if runtime.admission_kube is not kube:
            await runtime.admission_kube.close()


def missing_files(*paths: str) -> list[str]:
    """Those of ``paths`` that are not files (checked once, before serving)."""
    return [path for path in paths if not Path(path).is_file()]


def self_signed(config: ControllerConfig, kube: Kube, clock: Clock) -> SelfSignedTLS:
    """--webhook-tls self-signed: this controller's certificate from the shared CA, and the CA in
    its own webhook configurations (named trainer-operator-<controller>, of either kind)."""
    name = f"trainer-operator-{config.controller}"
    return SelfSignedTLS(
        kube,
        clock,
        config.operator_namespace,
        serving_names(config.webhook_service, config.operator_namespace, config.webhook_address),
        Path(config.webhook_cert_file),
        Path(config.webhook_key_file),
        [("ValidatingWebhookConfiguration", name), ("MutatingWebhookConfiguration", name)],
    )


def main(controller: str, make: Callable[[Runtime], Controller], argv: Sequence[str] | None = None) -> int:
    """Console entry point body shared by the five controllers."""
    config = parse_args(controller, argv)
    jsonlog.setup(controller, config.log_level)
    provider = tracing.setup(
        f"trainer-operator-{controller}", config.pod_name, config.otlp_endpoint, config.trace_sample_ratio
    )
    if provider is not None:
        log.info("exporting spans over OTLP", extra={"endpoint": config.otlp_endpoint or "from OTEL_EXPORTER_OTLP_*"})
    try:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(serve(config, make))
    except StartupError as err:
        log.error("%s", err)
        return 1
    finally:
        if provider is not None:
            provider.shutdown()
    return 0


def run_entrypoint(controller: str, make: Callable[[Runtime], Controller]) -> Callable[[], None]:
    def entry() -> None:
        sys.exit(main(controller, make))

    return entry

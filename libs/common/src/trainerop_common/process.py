"""The process every controller is: flags, logging, tracing, the runtime under kopf, the health
server, and an orderly stop (kopf handles SIGINT/SIGTERM)."""

import asyncio
import contextlib
import logging
import os
import ssl
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import kopf
from kopf._core.engines.peering import Identity
from lightkube import ApiError

from . import jsonlog, kopf_settings, memory, serving_tls, tracing, watch_events
from .config import ControllerConfig, parse_args
from .health import Health
from .kube import Kube
from .metrics import UP
from .names import component
from .runtime import Controller, Runtime, StartupError
from .webhooks import ReviewServer, missing_files, reviews_remember_nothing

log = logging.getLogger("trainerop.process")
# On stop, reconciles and Events in flight get this long to finish (a pod's termination grace is
# 30 s by default); a reconcile cut short is done again by the next start.
STOP_GRACE_SECONDS = 5.0
# kopf returns from its operator after its cleanup handlers, unless a watch request it cancels
# cannot be cancelled (kopf 1.45 raises in that request's cancel callback when the API server was
# unreachable): then the process lives on with no watch and no webhook while /healthz answers.
# This long after kopf's cleanup the process exits, and the kubelet starts it again.
EXIT_AFTER_CLEANUP_SECONDS = 30.0
F = TypeVar("F")
Make = Callable[[Runtime, F], Controller]


async def _webhook_tls(runtime: Runtime) -> None:
    """--webhook-tls self-signed: issue the certificate before serving, keep it (and the CA in the
    webhook configurations) current while running."""
    from .webhook_tls import CHECK_SECONDS, self_signed  # here: cryptography only where it is used

    config = runtime.config
    tls = self_signed(config, runtime.kube, runtime.clock)
    try:
        await tls.start()
    except (ApiError, OSError, RuntimeError) as err:
        raise StartupError(
            f"cannot set up the webhooks' self-signed certificate: {err}. The ServiceAccount needs the RBAC of "
            "deploy/components/self-signed-tls (the CA Secret, its own webhook configurations) and "
            f"{Path(config.webhook.webhook_cert_file).parent} must be writable"
        ) from None
    runtime.every(CHECK_SECONDS, tls.maintain, "keeping the webhooks' certificate current")


def _admission_server(runtime: Runtime, settings: kopf.OperatorSettings) -> None:
    """kopf's HTTPS server for the webhooks; it reloads the certificate files when they change. A
    controller with checks that can refuse does not start without its certificate; one whose
    webhooks only observe serves them once the certificate is mounted."""
    webhook = runtime.config.webhook
    missing = missing_files(webhook.webhook_cert_file, webhook.webhook_key_file)
    if missing and runtime.admission_checks:
        raise StartupError(
            f"the webhooks' certificate is missing ({', '.join(missing)}): mount its Secret there "
            "(deploy/components/cert-manager), or run with --webhook-tls self-signed, or --webhook-port 0"
        )
    config = runtime.config
    reviews_remember_nothing()
    # The checks' own client, used (and closed) only on the admission loop: webhooks.ReviewServer.
    runtime.admission_kube = Kube.from_environment(config.controller, config.qps, config.burst)
    client_ca = webhook.webhook_client_ca_file or None
    settings.admission.server = ReviewServer(
        addr=webhook.webhook_address,
        port=webhook.webhook_port,
        certfile=webhook.webhook_cert_file,
        pkeyfile=webhook.webhook_key_file,
        observers=frozenset(runtime.observers),
        # A loop of its own only for checks: observers run on the controller's loop anyway, and the
        # hand-over there and back cost the audit webhook twice its time under a burst.
        own_loop=bool(runtime.admission_checks),
        wait_for_files=not runtime.admission_checks,
        close=runtime.admission_kube.close,
        # A caller may come without a certificate (its reviews then cause nothing: register_observer);
        # one with a certificate must hold the API server's.
        verify_cafile=client_ca,
        verify_mode=ssl.CERT_OPTIONAL if client_ca else None,
    )


async def _peering_object(kube: Kube, config: ControllerConfig) -> None:
    """The ClusterKopfPeering the replicas coordinate through, created by the first to start: a
    manifest that held it beside its CRD could not be applied in one go on a fresh cluster
    (kubectl and Helm find no kind for it until the CRD is served). Namespaced peering
    (--namespaces) uses KopfPeering objects, which the platform team creates."""
    if not config.peering or config.namespaces:
        return
    name = component(config.controller)
    body = {
        "apiVersion": "kopf.dev/v1",
        "kind": "ClusterKopfPeering",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "trainer-operator"}},
    }
    if await kube.create("ClusterKopfPeering", body):
        log.info("created the peering object", extra={"peering": name})


async def serve(config: ControllerConfig, make: Callable[[Runtime], Controller]) -> None:
    kube = Kube.from_environment(config.controller, config.qps, config.burst)
    runtime = Runtime(config, kube)
    registry = runtime.registry_for(make(runtime))
    settings = kopf.OperatorSettings()
    kopf_settings.apply(settings, config)
    selectors = kopf_settings.filter_on_server(settings, registry)
    if selectors:
        log.info("watching with label selectors", extra={"selectors": selectors})
    log.info("watch events handled on the stream", extra={"resources": watch_events.route(settings, registry)})
    await _peering_object(kube, config)
    if config.webhook.webhook_port and config.webhook.webhook_tls == "self-signed":
        await _webhook_tls(runtime)
    if runtime.serves_webhooks:
        _admission_server(runtime, settings)
    health = Health(runtime)
    tls = serving_tls.from_config(config)
    if tls is not None:
        runtime.every(serving_tls.CHECK_SECONDS, tls.maintain, "keeping the metrics certificate current")
    await health.start(
        config.metrics_address, config.metrics_port, tls.context if tls else None, bool(tls and tls.asks_clients)
    )
    scheme = "https" if tls else "http"
    log.info(
        "serving /metrics, /healthz and /readyz",
        extra={"address": config.metrics_address, "port": health.port, "scheme": scheme},
    )
    cleaned_up = asyncio.Event()
    watchdog = asyncio.create_task(exit_when_stuck(cleaned_up, EXIT_AFTER_CLEANUP_SECONDS))
    try:
        await _operate(runtime, registry, settings, cleaned_up)
    finally:
        cleaned_up.set()
        UP.labels(config.controller).set(0)
        await runtime.tasks.stop(grace=STOP_GRACE_SECONDS)  # before their client closes
        await health.stop()
        await kube.close()
        watchdog.cancel()


async def exit_when_stuck(cleaned_up: asyncio.Event, seconds: float, exit_now: Callable[[int], Any] = os._exit) -> None:
    """Exit the process (code 1) when it is still stopping ``seconds`` after kopf's cleanup."""
    await cleaned_up.wait()
    await asyncio.sleep(seconds)
    log.error("still stopping %.0f s after kopf's cleanup: exiting, so that the kubelet starts it again", seconds)
    sys.stdout.flush()
    sys.stderr.flush()
    exit_now(1)


async def _operate(
    runtime: Runtime, registry: kopf.OperatorRegistry, settings: kopf.OperatorSettings, cleaned_up: asyncio.Event
) -> None:
    """kopf until it stops, with the runtime's jobs beside it; ready once kopf watches;
    ``cleaned_up`` is set when kopf has run its cleanup handlers."""
    config = runtime.config
    kopf_ready = asyncio.Event()

    async def mark_ready() -> None:
        await kopf_ready.wait()
        runtime.ready.set()
        UP.labels(config.controller).set(1)
        log.info("watching Trainers", extra={"namespaces": list(config.namespaces) or "all"})

    helpers = [asyncio.create_task(mark_ready()), *(asyncio.create_task(job()) for job in runtime.jobs)]

    @kopf.on.cleanup(registry=registry)
    async def stop_helpers(**_: Any) -> None:
        # kopf waits for every task still running when it stops; ours end with it.
        cleaned_up.set()
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
            # The pod's name, not kopf's user@host/time/random: a restarted process is the same peer.
            identity=Identity(config.pod_name),
            ready_flag=kopf_ready,
        )
    finally:
        for task in helpers:
            task.cancel()


def main(controller: str, make: Make[F], own: type[F], webhooks: bool, argv: Sequence[str] | None = None) -> int:
    """The body of every controller's console entry point."""
    config, flags = parse_args(controller, own, argv, webhooks=webhooks)
    jsonlog.setup(controller, config.log_level)
    memory.smaller_tls_buffers()
    provider = tracing.setup(component(controller), config.pod_name, config.otlp_endpoint, config.trace_sample_ratio)
    if provider is not None:
        log.info("exporting spans over OTLP", extra={"endpoint": config.otlp_endpoint or "from OTEL_EXPORTER_OTLP_*"})
    try:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(serve(config, lambda runtime: make(runtime, flags)))
    except StartupError as err:
        log.error("%s", err)
        return 1
    finally:
        if provider is not None:
            provider.shutdown()
    return 0


def run_entrypoint(controller: str, make: Make[F], own: type[F], webhooks: bool = False) -> Callable[[], None]:
    """A console entry point: ``make(runtime, flags)`` builds the controller from its ``own`` flags;
    ``webhooks``: it serves admission webhooks (and has their flags)."""

    def entry() -> None:
        sys.exit(main(controller, make, own, webhooks))

    return entry

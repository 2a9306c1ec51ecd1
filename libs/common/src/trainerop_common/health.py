"""``/healthz`` (the event loop answers), ``/readyz`` (watching, webhooks listening),
``/metrics`` and ``/debug/memory`` (what holds the memory, when traced) of a controller, on
--metrics-port; over TLS when a certificate is configured (:mod:`serving_tls`)."""

import asyncio
import contextlib
import ssl

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from .memory import NOT_TRACING, allocation_report
from .runtime import Runtime


class Health:
    """``/healthz`` (the loop answers), ``/readyz`` (kopf is watching), ``/metrics``."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        self._runner: web.AppRunner | None = None
        self._clients_must_prove = False
        self.port = 0

    async def start(self, address: str, port: int, tls: ssl.SSLContext | None = None, clients: bool = False) -> None:
        """Serve on ``address``:``port``, over TLS with ``tls``; ``clients``: ``/metrics`` only to
        clients that presented a certificate the context verified."""
        self._clients_must_prove = tls is not None and clients
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/debug/memory", self._memory)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, address, port, ssl_context=tls)
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
        if not await self._webhooks_listening():
            return web.Response(status=503, text="not ready: the admission webhooks are not listening yet\n")
        return web.Response(text="ready\n")

    async def _webhooks_listening(self) -> bool:
        """Whether kopf's webhook server accepts connections (when this controller serves any)."""
        webhook = self._runtime.config.webhook
        if not (self._runtime.serves_webhooks and webhook.webhook_port):
            return True
        host = "127.0.0.1" if webhook.webhook_address in ("", "0.0.0.0") else webhook.webhook_address
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(host, webhook.webhook_port), timeout=1.0)
        except (OSError, TimeoutError):
            return False
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return True

    def _refused(self, request: web.Request) -> web.Response | None:
        """403 for a caller without a verified client certificate, where one is required."""
        if not self._clients_must_prove or (request.transport and request.transport.get_extra_info("peercert")):
            return None
        text = f"a client certificate of --metrics-client-ca-file's CA is required for {request.path}\n"
        return web.Response(status=403, text=text)

    async def _metrics(self, request: web.Request) -> web.Response:
        if refused := self._refused(request):
            return refused
        return web.Response(body=generate_latest(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _memory(self, request: web.Request) -> web.Response:
        if refused := self._refused(request):
            return refused
        report = allocation_report()  # (a snapshot holds the GIL whatever thread takes it)
        return web.Response(status=404, text=NOT_TRACING) if report is None else web.Response(text=report)

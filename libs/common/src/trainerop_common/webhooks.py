"""Admission webhooks served through kopf's webhook server (docs/admission.md): the controllers'
checks of Trainers, webhooks that only observe (the audit trail of users' requests), and the
server's TLS (files mounted from cert-manager's Secret, or issued by each controller itself from a
CA of its own: :mod:`.webhook_tls`, imported only by a controller run with --webhook-tls
self-signed)."""

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import Any, cast

import aiohttp.web
import kopf
from kopf._cogs.structs import ephemera, reviews
from kopf._core.reactor import inventory

from . import admission
from .api import GROUP, VERSION
from .caller_budget import MAX_REVIEW_BYTES, CallerBudget
from .loops import HOME, LoopThread, on_loop
from .metrics import ADMISSION_DURATION, ADMISSION_REVIEWS, ADMISSION_THROTTLED, UNAUTHENTICATED

log = logging.getLogger("trainerop.webhooks")
CERTIFICATE_WAIT_SECONDS = 30.0
# The AdmissionReview being answered, as the API server sent it: an observing webhook reads what
# kopf does not pass to handlers (the request's uid, the resource's version, the namespace of a
# request for a namespaced collection).
REVIEW: ContextVar[Mapping[str, Any] | None] = ContextVar("trainerop_admission_review", default=None)
Observer = Callable[[Mapping[str, Any]], Awaitable[None]]


def register_admission(
    registry: kopf.OperatorRegistry, controller: str, webhook: str, check: admission.Check, mutating: bool = False
) -> None:
    """Serve ``check`` for Trainers at ``/<webhook>`` (validating, or mutating: its ``spec`` is set)."""
    decorator = kopf.on.mutate if mutating else kopf.on.validate

    @decorator(GROUP, VERSION, "trainers", id=webhook, operations=["CREATE", "UPDATE"], registry=registry)
    async def handler(**kwargs: Any) -> None:
        # kopf passes its admission kwargs by name: body, old, operation, warnings, patch, ...
        body: Mapping[str, Any] = kwargs["body"]
        operation = str(kwargs.get("operation") or "CREATE")
        verdict = await _judged(controller, webhook, check(admission.request_of(body, kwargs.get("old"), operation)))
        kwargs["warnings"].extend(verdict.warnings)
        for name, value in verdict.spec.items():
            kwargs["patch"].spec[name] = value
        _refuse_if(verdict, f"{operation} of Trainer", body)


def register_object_check(
    registry: kopf.OperatorRegistry,
    controller: str,
    webhook: str,
    resources: Sequence[tuple[str, str, str]],
    check: admission.ObjectCheck,
) -> None:
    """Serve ``check`` at ``/<webhook>`` for the creation of objects of other kinds (``resources``:
    (group, version, plural); kopf knows the built-in ones): it sees the plural and the object,
    and only refuses (a review forged by a caller of the port learns a verdict and changes nothing)."""

    def handler_of(plural: str) -> Callable[..., Awaitable[None]]:
        async def handler(**kwargs: Any) -> None:
            body: Mapping[str, Any] = kwargs["body"]
            verdict = await _judged(controller, webhook, check(plural, body))
            _refuse_if(verdict, f"CREATE of {plural}", body)

        return handler

    for group, version, plural in resources:
        kopf.on.validate(group, version, plural, id=webhook, operations=["CREATE"], registry=registry)(
            handler_of(plural)
        )


async def _judged(controller: str, webhook: str, verdict: Awaitable[admission.Verdict]) -> admission.Verdict:
    """The verdict, counted and timed."""
    started = time.perf_counter()
    outcome = "error"
    try:
        judged = await verdict
        outcome = "refused" if judged.problems else ("mutated" if judged.spec else "allowed")
        return judged
    finally:
        ADMISSION_REVIEWS.labels(controller, webhook, outcome).inc()
        ADMISSION_DURATION.labels(controller, webhook).observe(time.perf_counter() - started)


def _refuse_if(verdict: admission.Verdict, what: str, body: Mapping[str, Any]) -> None:
    if verdict.problems:
        meta = body.get("metadata") or {}
        problems = "; ".join(verdict.problems)
        log.info("refused %s %s/%s: %s", what, meta.get("namespace"), meta.get("name"), problems)
        raise kopf.AdmissionError(problems, code=admission.REFUSED)


def missing_files(*paths: str) -> list[str]:
    """Those of ``paths`` that are not files (checked once, before serving)."""
    return [path for path in paths if not Path(path).is_file()]


def register_observer(
    registry: kopf.OperatorRegistry,
    webhook: str,
    resources: Sequence[tuple[str, str | None]],
    observer: Observer,
    authenticated: bool = False,
    others: Sequence[tuple[str, str, str]] = (),
) -> None:
    """Serve ``observer`` at ``/<webhook>`` for the operator's ``resources`` ((plural, subresource:
    None for the object itself, "*" for it and every subresource)) and for ``others`` of other
    groups ((group, version, plural): kopf knows those whose CRD exists when the controller
    starts). It sees the raw review
    (:data:`REVIEW`), may take seconds, and never denies: the server answers allowed whatever it
    does or raises (see :class:`ReviewServer`). With ``authenticated`` (--webhook-client-ca-file),
    only a review from a caller that presented the API server's client certificate is observed:
    anyone else reaching the port could forge one."""

    async def observed(**kwargs: Any) -> None:
        review = REVIEW.get()
        if review is None:
            log.error("webhook %s: no review in context; not served by ReviewServer", webhook)
            return
        if authenticated and not kwargs.get("sslpeer"):
            UNAUTHENTICATED.labels(webhook).inc()
            log.warning(
                "webhook %s: a review from a caller without the API server's client certificate: ignored", webhook
            )
            return
        try:
            await observer(review)
        except Exception:  # never deny, whatever went wrong
            log.exception("webhook %s could not handle a request", webhook)

    for plural, subresource in resources:
        kopf.on.validate(GROUP, VERSION, plural, id=webhook, subresource=subresource, registry=registry)(observed)
    for group, version, plural in others:
        kopf.on.validate(group, version, plural, id=webhook, registry=registry)(observed)


_KOPF_RECALL_MEMO = inventory.ResourceMemories.recall_memo


def reviews_remember_nothing() -> None:
    """kopf gives each reviewed object a memory (its memo for the handlers), kept for every update
    or delete review until kopf's own processing of the object's deletion forgets it. The
    controllers' watches are handled on the stream (:mod:`.watch_events`), not by that processing,
    so nothing forgot them: each Trainer ever updated or deleted, and each profile or AuditLog an
    observer saw, stayed held by every controller whose webhook reviewed it (the audit
    controller's grew by about 600 KiB, traced, a round of 500 Trainers created and deleted). No
    handler here reads kopf's memo, so each review gets a fresh one, as kopf gives a create's
    review."""
    remember: Callable[..., Awaitable[ephemera.AnyMemo]] = _KOPF_RECALL_MEMO

    async def recall_memo(
        self: inventory.ResourceMemories,
        raw_body: Any,
        *,
        memobase: ephemera.AnyMemo | None = None,
        ephemeral: bool = False,
    ) -> ephemera.AnyMemo:
        return await remember(self, raw_body, memobase=memobase, ephemeral=True)

    inventory.ResourceMemories.recall_memo = recall_memo  # type: ignore[method-assign]


# What each caller (by address) may have in flight; the server's one event loop is its only user.
BUDGET = CallerBudget()


class _LargeReviews(kopf.WebhookServer):
    """kopf's server, taking reviews up to 16 MiB, each caller within its budget
    (:mod:`.caller_budget`: beyond it, 429 at once, before the body is read); what
    :class:`ReviewServer` runs on the admission loop (a server of its own: kopf's context manager
    closes only what ran on the home loop)."""

    @staticmethod
    async def _serve(fn: reviews.WebhookFn, request: aiohttp.web.Request) -> aiohttp.web.Response:
        size = request.content_length if request.content_length is not None else MAX_REVIEW_BYTES
        if size > MAX_REVIEW_BYTES:
            raise aiohttp.web.HTTPRequestEntityTooLarge(max_size=MAX_REVIEW_BYTES, actual_size=size)
        caller = request.remote or "unknown"
        if not BUDGET.take(caller, size):
            ADMISSION_THROTTLED.labels(request.match_info.get("id") or "").inc()
            raise aiohttp.web.HTTPTooManyRequests(headers={"Retry-After": "1"})
        try:
            return await kopf.WebhookServer._serve(fn, request.clone(client_max_size=MAX_REVIEW_BYTES))
        finally:
            BUDGET.give_back(caller, size)


class ReviewServer(kopf.WebhookServer):
    """kopf's HTTPS webhook server, served from a thread with an event loop of its own when
    ``own_loop`` (the checks answer there, behind no backlog of reconciles: :mod:`.loops`; a server
    of observers only stays on the controller's loop, where they run anyway), which also hands each raw
    review to the handlers (:data:`REVIEW`), takes reviews up to 16 MiB (kopf's server stops at
    1 MiB), answers "allowed" for the webhooks that only observe (those run on the controller's own
    loop: they act through its state), and, with ``wait_for_files``, waits for its certificate
    files instead of failing (an observing controller works without its webhook until the Secret is
    mounted). ``close`` (the checks' own API client) is awaited on the loop it served from as it
    stops."""

    def __init__(
        self,
        *,
        observers: frozenset[str] = frozenset(),
        own_loop: bool = True,
        wait_for_files: bool = False,
        close: Callable[[], Awaitable[None]] | None = None,
        **kw: Any,
    ) -> None:
        super().__init__(**kw)
        self._server_kw = kw
        self.observers = observers
        self.own_loop = own_loop
        self.wait_for_files = wait_for_files
        self.close = close

    async def __call__(self, fn: reviews.WebhookFn) -> AsyncIterator[reviews.WebhookClientConfig]:
        if self.wait_for_files:
            await self._certificate_files()
        home = asyncio.get_running_loop()
        served = _LargeReviews(**self._server_kw)(self._reviewed(fn, home))
        if not self.own_loop:  # closed by kopf (aclose), closing what it serves
            async with contextlib.aclosing(self._served_here(served)) as here:
                async for config in here:
                    yield config
            return
        configs: asyncio.Queue[reviews.WebhookClientConfig | BaseException] = asyncio.Queue()
        admission_loop = LoopThread("admission")

        def deliver(item: reviews.WebhookClientConfig | BaseException) -> None:
            home.call_soon_threadsafe(configs.put_nowait, item)

        admission_loop.spawn(self._serve_there(served, deliver))
        try:
            while True:
                item = await configs.get()
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            await admission_loop.stop()

    async def _served_here(
        self, served: AsyncIterator[reviews.WebhookClientConfig]
    ) -> AsyncGenerator[reviews.WebhookClientConfig, None]:
        """On the controller's own loop: kopf's server; the checks' client closed as it ends."""
        try:
            async with contextlib.aclosing(cast(AsyncGenerator[reviews.WebhookClientConfig, None], served)) as server:
                async for config in server:
                    yield config
        finally:
            if self.close is not None:
                await self.close()

    async def _serve_there(
        self,
        served: AsyncIterator[reviews.WebhookClientConfig],
        deliver: Callable[[reviews.WebhookClientConfig | BaseException], None],
    ) -> None:
        """On the admission loop: kopf's server, each client configuration (or its failure, e.g.
        the port taken) delivered to the home loop; the checks' client closed as it ends."""
        try:
            async for config in served:
                deliver(config)
        except Exception as err:
            deliver(err)
        finally:
            if self.close is not None:
                await self.close()

    def _reviewed(self, fn: reviews.WebhookFn, home: asyncio.AbstractEventLoop) -> reviews.WebhookFn:
        async def answered(request: reviews.Request, **kw: Any) -> reviews.Response:
            review, loop = REVIEW.set(request), HOME.set(home)
            try:
                return await fn(request, **kw)
            finally:
                REVIEW.reset(review)
                HOME.reset(loop)

        async def reviewed(request: reviews.Request, **kw: Any) -> reviews.Response:
            if kw.get("webhook") not in self.observers:
                return await answered(request, **kw)
            here = asyncio.get_running_loop() is home
            response = await (answered(request, **kw) if here else on_loop(home, answered(request, **kw)))
            answer: dict[str, Any] = dict(response["response"])
            answer["allowed"] = True
            answer.pop("status", None)
            response["response"] = answer  # type: ignore[typeddict-item]
            return response

        return reviewed

    async def _certificate_files(self) -> None:
        said = False
        while missing := missing_files(*(str(f) for f in (self.certfile, self.pkeyfile) if f is not None)):
            if not said:
                log.error("webhooks not served until the certificate is mounted: %s missing", ", ".join(missing))
                said = True
            await asyncio.sleep(CERTIFICATE_WAIT_SECONDS)

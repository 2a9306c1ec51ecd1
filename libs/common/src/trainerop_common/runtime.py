"""The shell every controller runs in: watches Trainers through kopf, reconciles each on a work
queue, applies what a reconcile concludes, and classifies errors.

A controller supplies a :class:`Controller`: its status sections and condition types, a
``reconcile(body) -> Outcome`` for Trainers (decide purely, act through adapters) and extra kopf
registrations. The runtime serialises reconciles per Trainer, applies each :class:`Outcome` the
same way (status by server-side apply with no request when nothing changes, Events, requeue),
classifies errors (permanent: an Event once, no retry; temporary: capped exponential backoff) and
resyncs every Trainer periodically. docs/design/work-queue.md says why this sits on top of kopf.
"""

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

import kopf
from lightkube import ApiError
from opentelemetry import trace
from pydantic import ValidationError

from . import admission
from .api import GROUP, VERSION, kind_info
from .cache import Relists
from .clock import Clock, SystemClock, rfc3339
from .config import ControllerConfig
from .kube import Kube, is_not_found, urgent_requests
from .memory import trim_periodically
from .metrics import EVENTS_POSTED, QUEUE_DEPTH, RECONCILE_DURATION, RECONCILES_IN_FLIGHT, WATCHED
from .names import component
from .objects import managers_only
from .outcome import Outcome, StatusSection, soonest
from .redaction import redact_text
from .status_writer import StatusWriter
from .tracing import reconcile_span
from .watch_events import on_event
from .webhooks import Observer, register_admission, register_object_check, register_observer
from .workqueue import Body, Key, Tasks, Trigger, WorkQueue, key_of, periodic

log = logging.getLogger("trainerop.runtime")

T = TypeVar("T")
ADMISSION_READ_SECONDS = 3.0  # the webhooks' timeoutSeconds is 5

__all__ = ["Body", "Controller", "Key", "Outcome", "PermanentError", "Runtime", "key_of"]


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
    """What the runtime calls. Optional, looked up by name: ``trainer_labels`` (the label selector
    of the Trainers it is sent) and ``trainer_gone(last)`` (told of each Trainer deleted)."""

    @property
    def name(self) -> str: ...

    @property
    def section(self) -> StatusSection:
        """The part of Trainer.status it owns (its own fields and condition types)."""
        ...

    async def reconcile(self, body: Body) -> Outcome: ...

    def register(self, registry: kopf.OperatorRegistry, runtime: "Runtime") -> None: ...


EventPoster = Callable[[Body, str, str, str], None]


class Runtime:
    def __init__(
        self, config: ControllerConfig, kube: Kube, clock: Clock | None = None, post_event: EventPoster | None = None
    ) -> None:
        self.config = config
        self.kube = kube
        self.clock = clock or SystemClock()
        # Events go through the controller's own client (None) unless a poster is given (tests):
        # no reconcile runs in kopf's handler context, where kopf's own poster would work.
        self._post_event = post_event
        # (generation, reason) of the last permanent error reported per object: one Event, not one per resync
        self._reported: dict[Key, tuple[int, str]] = {}
        self.tasks = Tasks()
        self.queue = WorkQueue(self.tasks, self._reconcile_once, limit=config.workers)
        self._controller: Controller | None = None
        self.writer: StatusWriter | None = None  # the controller's, on Trainers (set with the controller)
        self.ready = asyncio.Event()
        self.admission_checks = 0  # checks registered with kopf (served when --webhook-port is set)
        self.observers: set[str] = set()  # webhooks that only observe (never deny)
        # The admission checks' own client: their reads never queue behind reconciles' requests.
        self.admission_kube = kube
        # Jobs started with kopf and stopped with it (resync, retention, certificate upkeep).
        self.jobs: list[Callable[[], Coroutine[Any, Any, None]]] = []
        # Trainers deleted while the watch was away (kopf relists, and reports only what exists).
        self.relists = Relists(self._trainer_keys, lambda: self.queue.objects.keys(), self._vanished)
        QUEUE_DEPTH.labels(config.controller).set_function(lambda: self.queue.depth)
        WATCHED.labels(config.controller, "Trainer").set_function(lambda: len(self.queue.objects))

    @property
    def trainers(self) -> Mapping[Key, Body]:
        """Every Trainer the watch has seen, in its latest state."""
        return self.queue.objects

    # -- events ---------------------------------------------------------------------------------
    def event(self, body: Body, type_: str, reason: str, message: str) -> None:
        """Post a Kubernetes Event about ``body`` (message redacted)."""
        EVENTS_POSTED.labels(self.config.controller, type_, reason).inc()
        if self._post_event is not None:
            self._post_event(body, type_, reason, redact_text(message))
        else:
            self.tasks.spawn(self._post_directly(body, type_, reason, redact_text(message)))

    async def _post_directly(self, body: Body, type_: str, reason: str, message: str) -> None:
        meta = body["metadata"]
        now = rfc3339(self.clock.now())
        source = component(self.config.controller)
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
        """Reconcile the Trainer ``body`` names, on its latest state (after the reconcile in progress,
        if any, which then runs once more)."""
        await self.queue.process(key_of(body))

    async def _reconcile_once(self, body: Body) -> None:
        assert self._controller is not None
        key = key_of(body)
        started = time.perf_counter()
        result = "ok"
        in_flight = RECONCILES_IN_FLIGHT.labels(self.config.controller)
        in_flight.inc()
        span = reconcile_span(self.config.controller, body)
        try:
            with trace.use_span(span, end_on_exit=False):
                outcome = await self._controller.reconcile(body)
                await self.conclude(body, outcome)
            result = self._settle(key, outcome)
        except (PermanentError, ValidationError) as err:
            result = "permanent_error"
            self.queue.backoff.reset(key)
            self._report(body, err)
        except (TimeoutError, ApiError, OSError) as err:
            result = "temporary_error"
            log.warning("reconcile of %s/%s failed, retrying in %.0fs: %s", *key, self.queue.retry(key), err)
        except Exception:
            result = "error"
            log.exception("reconcile of %s/%s crashed, retrying in %.0fs", *key, self.queue.retry(key))
        finally:
            in_flight.dec()
            span.set_attribute("trainer_operator.result", result)
            span.end()
            RECONCILE_DURATION.labels(self.config.controller, "Trainer", result).observe(time.perf_counter() - started)

    def _settle(self, key: Key, outcome: Outcome) -> str:
        """After an outcome is applied: back off when part of it was refused, else start over."""
        if outcome.retry:
            self.queue.retry(key)
            return "refused"
        self.queue.backoff.reset(key)
        return "ok"

    async def conclude(self, body: Body, outcome: Outcome) -> bool:
        """Apply what a reconcile concluded: its Events (what was done is said even if the write
        fails), the status, the Events of a change, the work that waits for the write, the requeue.
        A Trainer gone meanwhile (404) has nothing to write to and nothing more to do. Returns
        whether the status was written."""
        assert self.writer is not None
        for type_, reason, message in outcome.events:
            self.event(body, type_, reason, message)
        written = False
        if outcome.status is not None:
            try:
                with urgent_requests(outcome.urgent):
                    now = rfc3339(self.clock.now())
                    written = await self.writer.write(body, outcome.status, outcome.conditions, now)
            except ApiError as err:
                if not is_not_found(err):
                    raise
                self._gone(body)  # deleted: its DELETED event may never come (a watch's gap)
                return False
        for type_, reason, message in outcome.on_change if written else ():
            self.event(body, type_, reason, message)
        with urgent_requests(outcome.urgent):
            again = await outcome.after() if outcome.after is not None else None
        due = soonest(outcome.requeue_after, again)
        if due is not None:
            self.requeue_after(key_of(body), due)
        return written

    def _gone(self, body: Body) -> None:
        if self.queue.forget(body):
            self._forget(key_of(body), body)

    def _vanished(self, key: Key) -> None:
        """A Trainer deleted in a watch's gap, found by the relist's convergence."""
        last = self.queue.objects.get(key)
        self.queue.drop(key)
        self._forget(key, last)

    def _forget(self, key: Key, last: Body | None) -> None:
        """A Trainer is gone (``last``: its last state seen); a controller with a ``trainer_gone``
        hook is told (the kubeflow controller makes its job's Trainer again)."""
        self._reported.pop(key, None)
        if self.writer is not None:
            self.writer.forget(*key)
        told = getattr(self._controller, "trainer_gone", None)
        if told is not None and last is not None:
            told(last)

    async def _trainer_keys(self) -> set[Key]:
        return {key_of(t) for t in await self.kube.list_all("Trainer", lambda o: {"metadata": o.get("metadata", {})})}

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
        return self.queue.has_timer(key)

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run a side task (e.g. a status write triggered by a watch) without blocking the watch."""
        self.tasks.spawn(coro)

    def requeue_after(self, key: Key, seconds: float) -> None:
        """Reconcile this Trainer again in ``seconds`` (a backoff, deadline or TTL falls due)."""
        self.queue.after(key, seconds)

    def requeue(self, keys: Iterable[Key], within: float = 0) -> None:
        """Reconcile these Trainers soon (e.g. a profile they use changed), at the latest in
        ``within`` seconds (events of a moment coalesce into one reconcile); one waiting out an
        error backoff keeps waiting."""
        self.queue.soon(keys, within)

    def requeue_urgently(self, keys: Iterable[Key]) -> None:
        """Reconcile these Trainers now, ahead of the reconciles waiting for a turn (a pod of theirs
        failed or went); one waiting out an error backoff keeps waiting."""
        self.queue.urgently(keys)

    def trigger(self, job: Callable[[], Awaitable[float | None]], what: str, rest: float = 0.0) -> Trigger:
        """A job over all Trainers run on demand (see :class:`Trigger`)."""
        return Trigger(self.tasks, job, what, rest)

    def every(self, seconds: float, job: Callable[[], Awaitable[Any]], what: str, first: float | None = None) -> None:
        """Run ``job`` every ``seconds`` while the controller runs (the first time after ``first``)."""
        self.jobs.append(lambda: periodic(seconds, job, what, first))

    async def resync(self) -> None:
        """Reconcile every Trainer once, one after another."""
        for key in list(self.queue.objects):
            await self.queue.process(key)

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
        if self.config.webhook.webhook_port:
            register_admission(registry, self.config.controller, webhook, check, mutating)
            self.admission_checks += 1

    def admit_creations(
        self,
        registry: kopf.OperatorRegistry,
        webhook: str,
        resources: Sequence[tuple[str, str, str]],
        check: admission.ObjectCheck,
    ) -> None:
        """Serve a check of the creation of other kinds' objects at ``/<webhook>`` (only with
        --webhook-port; see webhooks.register_object_check)."""
        if self.config.webhook.webhook_port:
            register_object_check(registry, self.config.controller, webhook, resources, check)
            self.admission_checks += 1

    def observe(
        self,
        registry: kopf.OperatorRegistry,
        webhook: str,
        resources: Sequence[tuple[str, str | None]],
        observer: Observer,
        others: Sequence[tuple[str, str, str]] = (),
    ) -> None:
        """Serve a webhook at ``/<webhook>`` that sees every review of ``resources`` (and of
        ``others``, of other groups) and never denies (only with --webhook-port; see
        webhooks.register_observer)."""
        if self.config.webhook.webhook_port:
            authenticated = bool(self.config.webhook.webhook_client_ca_file)
            register_observer(registry, webhook, resources, observer, authenticated, others)
            self.observers.add(webhook)

    @property
    def serves_webhooks(self) -> bool:
        return bool(self.admission_checks or self.observers)

    def registry_for(self, controller: Controller) -> kopf.OperatorRegistry:
        self._controller = controller
        self.writer = StatusWriter(self.kube, kind_info("Trainer"), controller.name, controller.section)
        self.every(self.config.resync_seconds, self.resync, "resync")
        if self.config.trim_memory_seconds > 0:
            self.every(self.config.trim_memory_seconds, trim_periodically, "returning free memory to the system")
        registry = kopf.OperatorRegistry()

        @kopf.on.login(registry=registry)
        def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
            return kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)

        def on_trainer(event_type: str | None, body: dict[str, Any]) -> None:
            self.relists.seen(key_of(body), event_type)
            if event_type == "DELETED":
                self._gone(body)
                return
            # Held until the next event: the body without its managers' field sets (decide from the
            # spec and the status; the audit names the spec's manager)
            self.queue.poke(key_of(self.queue.seen(managers_only(body))))

        # A controller concerned with some Trainers only has the API server send only those.
        on_event(registry, (GROUP, VERSION, "trainers"), on_trainer, getattr(controller, "trainer_labels", None))
        controller.register(registry, self)
        return registry

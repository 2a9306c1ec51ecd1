"""Watch events handled where kopf reads them (docs/design/performance.md, "Events on the stream").

Every controller watches through kopf, and kopf hands each event of each object to a worker task
of that object (a queue, a timed wait, the processing of causes, the handler's call in a context of
its own). The controllers' watch handlers only put the object in a cache and mark work: for them
that machinery is most of an event's cost and holds per-object state. A handler registered with
:func:`on_event` is a kopf ``on.event`` handler as before (kopf starts the watch, lists, resumes,
pauses with peering, applies the label selector); once :func:`route` has chosen its resource, its
events go to it from the stream itself, and kopf sees only the stream's bookmarks.
"""

import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from typing import Any, cast

import kopf
from kopf._cogs.clients import watching  # kopf exports no hook on its watch streams

from .kopf_settings import filter_on_server, resource_name, watch_handlers

# handler(event type, the object): the type is None for an object listed (kopf's convention)
Handler = Callable[[str | None, dict[str, Any]], None]
Routes = dict[tuple[str, str], list[Handler]]
log = logging.getLogger("trainerop.watch")
_HANDLER = "trainerop_handler"  # the attribute naming a kopf handler's function's own handler
_ROUTES = "trainerop_routes"  # the attribute of an operator's settings holding its routes
_kopf_stream = watching.infinite_watch


def on_event(
    registry: kopf.OperatorRegistry,
    resource: tuple[str, ...],
    handler: Handler,
    labels: Mapping[str, Any] | None = None,
) -> None:
    """Call ``handler`` for every watch event of ``resource`` (with ``labels``)."""

    async def through_kopf(event: Mapping[str, Any], body: kopf.Body, **_: Any) -> None:
        handler(event.get("type"), dict(body))

    setattr(through_kopf, _HANDLER, handler)
    kopf.on.event(*resource, labels=labels, registry=registry, id=handler_id(handler))(through_kopf)


def handler_of(fn: Any) -> Handler | None:
    """The handler :func:`on_event` registered as kopf's handler ``fn`` (None: not one of ours)."""
    handler: Handler | None = getattr(fn, _HANDLER, None)
    return handler


def handler_id(handler: Handler) -> str:
    return f"{getattr(handler, '__qualname__', 'handler')}@{id(handler):x}"


def route(settings: kopf.OperatorSettings, registry: kopf.OperatorRegistry) -> list[str]:
    """Have the stream call the handlers of every resource whose handlers are all :func:`on_event`'s
    and filter by no labels or by labels the API server applies (``filter_on_server``, which this
    calls, has it apply them). Returns the resources routed."""
    on_server = filter_on_server(settings, registry)
    kopfs = kopf_processed(registry)
    routes: Routes = {}
    for key, handlers in watch_handlers(registry).items():
        own = [handler_of(h.fn) for h in handlers]
        filtered = key[1] in on_server or not any(h.labels for h in handlers)
        if filtered and all(own) and key not in kopfs:
            routes[key] = [h for h in own if h is not None]
    setattr(settings, _ROUTES, routes)  # an operator's own: kopf passes its settings to each watch
    watching.infinite_watch = _stream
    return sorted(f"{plural}.{group}" if group else plural for group, plural in routes)


def kopf_processed(registry: kopf.OperatorRegistry) -> set[tuple[str, str]]:
    """The resources with handlers only kopf's processing of each event calls: on create, update
    or delete (with their finalizers), daemons and timers, indexes."""
    kinds = (registry._changing, registry._spawning, registry._indexing)  # kopf keeps no public list
    return {
        (h.selector.group or "", resource_name(h.selector))
        for kind in kinds
        for h in kind.get_all_handlers()
        if h.selector is not None
    }


def _stream(*, settings: kopf.OperatorSettings, resource: Any, **kwargs: Any) -> AsyncIterator[Any]:
    stream = _kopf_stream(settings=settings, resource=resource, **kwargs)
    handlers = getattr(settings, _ROUTES, {}).get((resource.group or "", resource.plural))
    # kopf's stream is an async generator (closed here when its watch ends)
    generator = cast(AsyncGenerator[Any, None], stream)
    return stream if handlers is None else _handled(generator, handlers, resource.plural)


async def _handled(stream: AsyncGenerator[Any, None], handlers: list[Handler], resource: str) -> AsyncIterator[Any]:
    """The stream's events handled here; kopf's watcher gets its bookmarks only (the end of a
    list makes it count the resource as listed)."""
    async with contextlib.aclosing(stream):
        async for raw in stream:
            if isinstance(raw, dict) and raw.get("type") != "BOOKMARK":
                deliver(raw, handlers, resource)
            else:
                yield raw


def deliver(raw: Mapping[str, Any], handlers: list[Handler], resource: str = "") -> None:
    """One event to each handler; a handler's error is logged (as kopf does for event handlers)
    and the stream goes on. At DEBUG each event is logged, as kopf's processing did."""
    event_type, obj = raw.get("type"), raw.get("object")
    if not isinstance(obj, dict):
        return
    if log.isEnabledFor(logging.DEBUG):
        log.debug("watch event", extra=_about(obj, resource, event_type or "LISTED"))
    for handler in handlers:
        try:
            handler(event_type, obj)
        except Exception:
            log.exception("watch handler failed", extra=_about(obj, resource, event_type or "LISTED"))


def _about(obj: Mapping[str, Any], resource: str, event: str) -> dict[str, str]:
    meta = obj.get("metadata", {})
    return {"resource": resource, "event": event, "object": f"{meta.get('namespace') or ''}/{meta.get('name')}"}

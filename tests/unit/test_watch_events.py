"""Watch events handled on the stream: which resources are routed there, and what kopf's own
watcher then gets (its real ``watcher``, over a stream standing in for the API server's)."""

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any, cast

import kopf
import pytest
from kopf._cogs.clients import watching
from kopf._cogs.structs.references import Resource
from kopf._core.reactor import queueing

from trainerop_common import watch_events
from trainerop_common.watch_events import Handler

PODS = Resource("", "v1", "pods")
POD_EVENTS: list[Any] = [
    {"type": None, "object": {"metadata": {"uid": "1", "namespace": "ns", "name": "a"}}},
    watching.Bookmark.LISTED,
    {"type": "ADDED", "object": {"metadata": {"uid": "2", "namespace": "ns", "name": "b"}}},
    {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}},
    {"type": "MODIFIED", "object": {"metadata": {"uid": "1", "namespace": "ns", "name": "a"}}},
    {"type": "DELETED", "object": {"metadata": {"uid": "2", "namespace": "ns", "name": "b"}}},
]


def recorder(into: list[tuple[str | None, str]]) -> Handler:
    def handle(event_type: str | None, obj: dict[str, Any]) -> None:
        into.append((event_type, obj["metadata"]["name"]))

    return handle


def plain_kopf_handler(**_: Any) -> None:
    return None


def routed(build: Any) -> list[str]:
    settings, registry = kopf.OperatorSettings(), kopf.OperatorRegistry()
    build(registry)
    return watch_events.route(settings, registry)


def ours_on_labelled_pods(r: kopf.OperatorRegistry) -> None:
    watch_events.on_event(r, ("v1", "pods"), recorder([]), {"a": kopf.PRESENT})


def ours_on_a_custom_kind(r: kopf.OperatorRegistry) -> None:
    watch_events.on_event(r, ("example.org", "v1", "things"), recorder([]))


def two_of_ours_on_pods(r: kopf.OperatorRegistry) -> None:
    for _ in range(2):
        watch_events.on_event(r, ("v1", "pods"), recorder([]))


def ours_and_kopfs_on_pods(r: kopf.OperatorRegistry) -> None:
    watch_events.on_event(r, ("v1", "pods"), recorder([]))
    kopf.on.event("v1", "pods", registry=r)(plain_kopf_handler)


def ours_and_a_kopf_timer_on_pods(r: kopf.OperatorRegistry) -> None:
    watch_events.on_event(r, ("v1", "pods"), recorder([]))
    kopf.timer("v1", "pods", interval=60, registry=r)(plain_kopf_handler)


def ours_and_a_kopf_index_on_pods(r: kopf.OperatorRegistry) -> None:
    watch_events.on_event(r, ("v1", "pods"), recorder([]))
    kopf.index("v1", "pods", registry=r)(plain_kopf_handler)


def ours_and_a_kopf_change_handler_on_pods(r: kopf.OperatorRegistry) -> None:
    watch_events.on_event(r, ("v1", "pods"), recorder([]))
    kopf.on.create("v1", "pods", registry=r)(plain_kopf_handler)


def ours_with_two_label_filters(r: kopf.OperatorRegistry) -> None:
    watch_events.on_event(r, ("v1", "nodes"), recorder([]), {"a": "1"})
    watch_events.on_event(r, ("v1", "nodes"), recorder([]), {"b": "1"})


def ours_with_a_callable_filter(r: kopf.OperatorRegistry) -> None:
    watch_events.on_event(r, ("v1", "pods"), recorder([]), {"a": lambda value, **_: True})


@pytest.mark.parametrize(
    ("build", "resources"),
    [
        # every handler of a resource is ours, with one label filter the API server applies
        (ours_on_labelled_pods, ["pods"]),
        (ours_on_a_custom_kind, ["things.example.org"]),
        (two_of_ours_on_pods, ["pods"]),
        # kopf's own handler among them: kopf keeps the resource
        (ours_and_kopfs_on_pods, []),
        # kopf's timers, indexes and change handlers (with their finalizers) need its processing
        (ours_and_a_kopf_timer_on_pods, []),
        (ours_and_a_kopf_index_on_pods, []),
        (ours_and_a_kopf_change_handler_on_pods, []),
        # two label filters: only kopf filters each handler's events by its own
        (ours_with_two_label_filters, []),
        # a filter the API server cannot apply (a callable)
        (ours_with_a_callable_filter, []),
    ],
)
def test_which_resources_are_handled_on_the_stream(build: Any, resources: list[str]) -> None:
    assert routed(build) == resources


async def fake_stream(**_: Any) -> AsyncIterator[Any]:
    for event in POD_EVENTS:
        yield event


def run_kopf_watcher(settings: kopf.OperatorSettings, resource: Resource) -> list[dict[str, Any]]:
    """kopf's own watcher over ``fake_stream``; what its per-object processing got."""
    processed: list[dict[str, Any]] = []

    async def processor(*, raw_event: dict[str, Any], **_: Any) -> str | None:
        processed.append(raw_event)
        return None

    async def watch() -> None:
        # The stream standing in ends: kopf's watcher then waits for its workers to be done.
        watcher = queueing.watcher(namespace=None, settings=settings, resource=resource, processor=cast(Any, processor))
        await asyncio.wait_for(watcher, timeout=60)

    asyncio.run(watch())
    return processed


def test_a_routed_resource_events_reach_its_handlers_in_order_and_kopf_sees_none(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(watch_events, "_kopf_stream", fake_stream)
    monkeypatch.setattr(watching, "infinite_watch", watch_events._kopf_stream)
    seen: list[tuple[str | None, str]] = []
    failures: list[str] = []

    def failing(event_type: str | None, obj: dict[str, Any]) -> None:
        failures.append(obj["metadata"]["name"])
        raise RuntimeError("a handler's bug")

    settings, registry = kopf.OperatorSettings(), kopf.OperatorRegistry()
    settings.queueing.idle_timeout = 0.01
    watch_events.on_event(registry, ("v1", "pods"), failing)
    watch_events.on_event(registry, ("v1", "pods"), recorder(seen))
    assert watch_events.route(settings, registry) == ["pods"]
    assert run_kopf_watcher(settings, PODS) == []
    assert seen == [(None, "a"), ("ADDED", "b"), ("MODIFIED", "a"), ("DELETED", "b")]
    assert failures == ["a", "b", "a", "b"]  # a failing handler neither stops the stream nor the others


def test_a_resource_not_routed_goes_through_kopf_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watch_events, "_kopf_stream", fake_stream)
    monkeypatch.setattr(watching, "infinite_watch", watch_events._kopf_stream)
    seen: list[tuple[str | None, str]] = []
    settings, registry = kopf.OperatorSettings(), kopf.OperatorRegistry()
    settings.queueing.idle_timeout = 0.01
    watch_events.on_event(registry, ("v1", "pods"), recorder(seen))
    kopf.on.event("v1", "pods", registry=registry)(plain_kopf_handler)
    assert watch_events.route(settings, registry) == []
    processed = run_kopf_watcher(settings, PODS)
    assert [e["type"] for e in processed] == [None, "ADDED", "MODIFIED", "DELETED"]
    assert seen == []  # kopf calls the handlers from those (its processing is not run here)


def test_at_debug_each_event_is_logged_with_its_object(caplog: pytest.LogCaptureFixture) -> None:
    """kopf's processing logged every handled object at DEBUG; the stream does too, so a
    controller run with --log-level DEBUG still says what it saw."""
    seen: list[tuple[str | None, str]] = []
    with caplog.at_level(logging.DEBUG, logger="trainerop.watch"):
        for raw in POD_EVENTS:
            if isinstance(raw, dict) and raw.get("type") != "BOOKMARK":
                watch_events.deliver(raw, [recorder(seen)], "pods")
    logged = [(r.__dict__["event"], r.__dict__["object"]) for r in caplog.records if r.message == "watch event"]
    assert logged == [("LISTED", "ns/a"), ("ADDED", "ns/b"), ("MODIFIED", "ns/a"), ("DELETED", "ns/b")]
    assert len(seen) == 4

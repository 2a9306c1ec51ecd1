#!/usr/bin/env python3
"""CPU per watch event: through kopf's per-object workers, and handled on the stream.

    python bench/watch_path.py --objects 1000 --changes 4

The same pod events (each pod listed, then modified ``--changes`` times, then deleted: what the
trainer controller sees of a ramp) go twice through kopf's own watcher (``queueing.watcher``) in
this process, from a stream standing in for the API server's, into the trainer controller's pod
cache (its projection, ``pod_essentials``):
- kopf: each event processed by kopf (``process_resource_event``: the object's worker, its causes,
  the cache's ``on.event`` handler called in kopf's handler context), as before 2026-12-03;
- stream: the cache's handler called on the stream (``trainerop_common.watch_events``).
Figure (printed, not asserted): CPU seconds of this process (``time.process_time``) per event for
each, and kopf's over the stream's, measured one after the other in the same run. Decoding the
watch lines is outside both (orjson, the same for each).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import functools
import json
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import kopf
from kopf._cogs.clients import watching
from kopf._cogs.structs.references import Resource
from kopf._core.actions import lifecycles
from kopf._core.engines import indexing
from kopf._core.reactor import inventory, processing, queueing

from trainerop_common import kopf_settings, watch_events
from trainerop_common.cache import ObjectCache
from trainerop_trainer.views import pod_essentials

PODS = Resource("", "v1", "pods")


def pod(index: int, change: int) -> dict[str, Any]:
    """A training pod as a kwok node reports it, its ``change``-th state."""
    name = f"t{index // 4}-worker-{index % 4}"
    labels = {"trainer-name": name[:-9], "trainer.operator.kubeflow.org/replica-type": "worker"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "bench",
            "uid": f"uid-{index}",
            "resourceVersion": str(index * 10 + change),
            "labels": labels,
            "ownerReferences": [{"kind": "Trainer", "name": name[:-9], "uid": f"tu-{index // 4}", "controller": True}],
            "managedFields": [{"manager": "kwok", "operation": "Update", "fieldsV1": {"f:status": {}}}],
        },
        "spec": {
            "nodeName": f"node-{index % 100}",
            "containers": [{"name": "trainer", "env": [{"name": f"V{i}", "value": "x" * 40} for i in range(12)]}],
        },
        "status": {
            "phase": "Running" if change else "Pending",
            "conditions": [
                {"type": t, "status": "True", "lastTransitionTime": f"2026-12-03T00:00:{change:02d}Z"}
                for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
            ],
            "containerStatuses": [{"name": "trainer", "state": {"running": {"startedAt": "2026-12-03T00:00:00Z"}}}],
        },
    }


def events(objects: int, changes: int) -> list[Any]:
    listed: list[Any] = [{"type": None, "object": pod(i, 0)} for i in range(objects)]
    modified = [{"type": "MODIFIED", "object": pod(i, c)} for c in range(1, changes + 1) for i in range(objects)]
    deleted = [{"type": "DELETED", "object": pod(i, changes)} for i in range(objects)]
    return [*listed, watching.Bookmark.LISTED, *modified, *deleted]


async def through_the_watcher(
    settings: kopf.OperatorSettings, registry: kopf.OperatorRegistry, feed: list[Any]
) -> None:
    async def stream(**_: Any) -> AsyncIterator[Any]:
        for event in feed:
            yield event

    watch_events._kopf_stream = stream  # the API server's stream stands in here
    watching.infinite_watch = watch_events._stream
    processor = functools.partial(
        processing.process_resource_event,
        lifecycle=lifecycles.get_default_lifecycle(),
        registry=registry,
        settings=settings,
        indexers=indexing.OperatorIndexers(),
        memories=inventory.ResourceMemories(),
        memobase=cast(Any, kopf.Memo()),
        event_queue=asyncio.Queue(),
        resource=PODS,
    )
    await queueing.watcher(namespace=None, settings=settings, resource=PODS, processor=processor)


def cpu_per_event(routed: bool, feed: list[Any]) -> tuple[float, int]:
    """CPU seconds per event, and how many objects the cache held after the list."""
    settings, registry = kopf.OperatorSettings(), kopf.OperatorRegistry()
    settings.queueing.idle_timeout = 0.05
    held = 0

    def count(key: Any, body: dict[str, Any], deleted: bool) -> None:
        nonlocal held
        held = max(held, len(cache.items))

    cache = ObjectCache(
        lambda keep: asyncio.sleep(0, []), "", "v1", "pods", {"trainer-name": kopf.PRESENT}, keep=pod_essentials
    )
    cache.register(registry, count)
    if routed:
        watch_events.route(settings, registry)
    else:  # as the controllers ran before: the API server filters by labels, kopf handles each event
        kopf_settings.filter_on_server(settings, registry)
    fresh = copy.deepcopy(feed)  # each event its own objects, as decoded from its line
    count_events = sum(1 for e in fresh if isinstance(e, dict))
    started = time.process_time()
    asyncio.run(through_the_watcher(settings, registry, fresh))
    return (time.process_time() - started) / count_events, held


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--objects", type=int, default=1000, help="pods (default 1000)")
    parser.add_argument("--changes", type=int, default=4, help="modifications of each pod (default 4)")
    args = parser.parse_args(argv)
    feed = events(args.objects, args.changes)
    print(f"{len(feed) - 1} events of {args.objects} pods: kopf's path, then the stream's", file=sys.stderr)
    kopf_cpu, kopf_held = cpu_per_event(False, feed)
    stream_cpu, stream_held = cpu_per_event(True, feed)
    assert kopf_held == stream_held == args.objects, "both paths must fill the cache"
    result = {
        "events": len(feed) - 1,
        "kopf_us_per_event": round(kopf_cpu * 1e6, 1),
        "stream_us_per_event": round(stream_cpu * 1e6, 1),
        "kopf_over_stream": round(kopf_cpu / stream_cpu, 2),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

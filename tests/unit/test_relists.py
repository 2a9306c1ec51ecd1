"""After kopf relists a resource (its watch expired, 410 Gone), what was deleted in the gap is never
reported: caches and the runtime's Trainers converge with a list of their own (issue 20)."""

import asyncio
from typing import Any

import pytest

from trainerop_common import cache
from trainerop_common.cache import Key, ObjectCache, Relists


def obj(name: str) -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": name, "uid": f"u-{name}"}}


async def test_what_is_known_but_not_listed_is_gone_unless_an_event_touched_it_meanwhile() -> None:
    known = {("ns", "a"), ("ns", "b"), ("ns", "c")}
    gone: list[Key] = []
    relists: Relists

    async def list_keys() -> set[Key]:
        relists.seen(("ns", "c"), "ADDED")  # created again while the list was read: left to its events
        return {("ns", "a")}

    relists = Relists(list_keys, lambda: known, gone.append)
    assert await relists.converge() == [("ns", "b")]
    assert gone == [("ns", "b")]


async def test_a_relist_after_watch_events_starts_a_convergence_kopfs_first_list_does_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cache, "RELIST_SETTLE_SECONDS", 0.01)
    lists: list[int] = []

    async def list_keys() -> set[Key]:
        lists.append(1)
        return set()

    relists = Relists(list_keys, lambda: (), lambda _: None)
    for name in "abc":  # kopf's first list: objects without an event type
        relists.seen(("ns", name), None)
    await asyncio.sleep(0.05)
    assert lists == []
    relists.seen(("ns", "a"), "MODIFIED")
    for name in "ab":  # listed again: the watch expired
        relists.seen(("ns", name), None)
    for _ in range(50):
        if lists:
            break
        await asyncio.sleep(0.01)
    assert lists == [1]


async def test_a_cached_object_deleted_in_a_watch_gap_is_dropped_and_reported_as_deleted() -> None:
    listed = [obj("a"), obj("b")]

    async def lister(keep: Any) -> list[dict[str, Any]]:
        return [keep(dict(o)) for o in listed]

    pods = ObjectCache(lister, "", "v1", "pods")
    await pods.ensure_listed()
    changes: list[tuple[Key, bool]] = []
    pods._on_change = lambda key, body, deleted: changes.append((key, deleted))
    listed.pop()  # b deleted while the watch was away
    assert await pods.relists.converge() == [("ns", "b")]
    assert sorted(pods.items) == [("ns", "a")]
    assert changes == [(("ns", "b"), True)]

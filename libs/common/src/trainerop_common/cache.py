"""An in-memory cache of one kind, fed by a kopf watch and listed once on first use so that
a reconcile never decides on a cache that has not seen the cluster yet."""

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

import kopf

from .api import GROUP, VERSION, kind_info

Key = tuple[str, str]


class ObjectCache:
    def __init__(self, lister: Callable[[str], Any], kind: str) -> None:
        self._lister = lister
        self._info = kind_info(kind)
        self.items: dict[Key, dict[str, Any]] = {}
        self._listed = False
        self._lock = asyncio.Lock()

    @staticmethod
    def key(obj: Mapping[str, Any]) -> Key:
        meta = obj.get("metadata", {})
        return (str(meta.get("namespace", "")), str(meta.get("name", "")))

    def register(
        self, registry: kopf.OperatorRegistry, on_change: Callable[[Key, dict[str, Any] | None], None] | None = None
    ) -> None:
        @kopf.on.event(GROUP, VERSION, self._info.plural, registry=registry)
        async def watch(event: Mapping[str, Any], body: kopf.Body, **_: Any) -> None:
            key = self.key(body)
            if event.get("type") == "DELETED":
                self.items.pop(key, None)
                new = None
            else:
                new = self.items[key] = dict(body)
            if on_change is not None:
                on_change(key, new)

    async def ensure_listed(self) -> None:
        if self._listed:
            return
        async with self._lock:
            if self._listed:
                return
            for obj in await self._lister(self._info.kind):
                self.items.setdefault(self.key(obj), obj)
            self._listed = True

    async def values(self) -> list[dict[str, Any]]:
        await self.ensure_listed()
        return list(self.items.values())

    async def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        await self.ensure_listed()
        return self.items.get((namespace, name))

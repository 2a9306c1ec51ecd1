"""An in-memory cache of one kind, fed by a kopf watch and listed once on first use so that
a reconcile never decides on a cache that has not seen the cluster yet."""

import asyncio
import logging
from collections.abc import Awaitable, Callable, Hashable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import kopf

from .api import kind_info
from .loops import at_home
from .objects import Keep, metadata_only, slim
from .watch_events import on_event

if TYPE_CHECKING:
    from .kube import Kube

Key = tuple[str, str]
T = TypeVar("T")
# kopf lists a resource again when its watch expired (410 Gone: etcd compacted the version it
# resumed from, the API server restarted): it reports what exists, never what was deleted in the
# gap. Once that relist has been quiet this long, the cache lists for itself and drops the rest.
RELIST_SETTLE_SECONDS = 2.0
# Events without a type this long after the first ones are a relist, not kopf's initial list.
INITIAL_LIST_SECONDS = 30.0
RELIST_RETRY_SECONDS = 10.0
log = logging.getLogger("trainerop.cache")


class Relists:
    """Convergence after a relist: which known objects are gone. ``list_keys`` reads what exists
    now; ``known`` is what the holder has; ``gone(key)`` is told of each that no longer exists.
    An object an event touched while the list was read is left to the events."""

    def __init__(
        self,
        list_keys: Callable[[], Awaitable[set[Key]]],
        known: Callable[[], Iterable[Key]],
        gone: Callable[[Key], None],
    ) -> None:
        self._list_keys, self._known, self._gone = list_keys, known, gone
        self._first: float | None = None  # loop time of the first untyped event
        self._typed = False  # a watch event (not a listed object) was seen
        self._touched: set[Key] | None = None  # keys events touched while a convergence lists
        self._timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[list[Key]]] = set()

    def seen(self, key: Key, event_type: str | None) -> None:
        """An event of ``key`` (``event_type`` None: a listed object)."""
        if self._touched is not None:
            self._touched.add(key)
        loop = asyncio.get_running_loop()
        if event_type is not None:
            self._typed = True
            return
        if self._first is None:
            self._first = loop.time()
        if self._typed or loop.time() - self._first > INITIAL_LIST_SECONDS:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = loop.call_later(RELIST_SETTLE_SECONDS, self._start)

    def _start(self) -> None:
        self._timer = None
        task = asyncio.get_running_loop().create_task(self._converge_or_retry())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _converge_or_retry(self) -> list[Key]:
        try:
            return await self.converge()
        except Exception as err:  # the API server away: try again after a while
            log.warning("listing after a relist failed, trying again in %.0fs: %s", RELIST_RETRY_SECONDS, err)
            self._timer = asyncio.get_running_loop().call_later(RELIST_RETRY_SECONDS, self._start)
            return []

    async def converge(self) -> list[Key]:
        """List, and tell ``gone`` of every known object that is not there (nor touched meanwhile)."""
        self._touched = set()
        try:
            present = await self._list_keys()
            missing = [k for k in list(self._known()) if k not in present and k not in self._touched]
        finally:
            self._touched = None
        for key in missing:
            self._gone(key)
        return missing


class ObjectCache:
    """Objects of one resource (optionally only those with ``labels``), keyed by namespace/name,
    optionally also grouped by ``index(obj)`` so a reconcile need not scan every object. Each is
    held as ``keep(obj)`` (default :func:`slim`): a cache of thousands of pods holds only the fields
    its controller reads."""

    def __init__(
        self,
        lister: Callable[[Keep], Awaitable[list[dict[str, Any]]]],
        group: str,
        version: str,
        plural: str,
        labels: Mapping[str, Any] | None = None,
        index: Callable[[Mapping[str, Any]], Hashable] | None = None,
        keep: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> None:
        self._lister = lister
        self._index = index
        self._keep = keep or slim  # what of each object is held: only what the decisions read
        self._groups: dict[Hashable, dict[Key, dict[str, Any]]] = {}
        self._resource = (group, version, plural)
        self._labels = labels
        self.items: dict[Key, dict[str, Any]] = {}
        self._listed = False
        self._lock = asyncio.Lock()
        self._gone: set[tuple[Key, str]] = set()  # deleted by the watch before the first list ended
        self._on_change: Callable[[Key, dict[str, Any], bool], None] | None = None
        self.relists = Relists(self._list_keys, lambda: self.items.keys(), self._vanished)

    async def _list_keys(self) -> set[Key]:
        return {self.key(o) for o in await self._lister(metadata_only)}

    def _vanished(self, key: Key) -> None:
        """Gone in a watch's gap (see :class:`Relists`): dropped as if its deletion had been seen."""
        last = self.items.get(key)
        if last is None:
            return
        self._drop(key)
        if self._on_change is not None:
            self._on_change(key, last, True)

    @classmethod
    def for_kind(
        cls,
        kube: "Kube",
        kind: str,
        index: Callable[[Mapping[str, Any]], Hashable] | None = None,
        keep: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> "ObjectCache":
        """A cache of one of the operator's own kinds (or of Kubeflow's jobs)."""
        info = kind_info(kind)
        return cls(
            lambda projection: kube.list_all(kind, projection),
            info.group,
            info.version,
            info.plural,
            index=index,
            keep=keep,
        )

    @staticmethod
    def key(obj: Mapping[str, Any]) -> Key:
        meta = obj.get("metadata", {})
        return (str(meta.get("namespace", "")), str(meta.get("name", "")))

    def register(
        self, registry: kopf.OperatorRegistry, on_change: Callable[[Key, dict[str, Any], bool], None] | None = None
    ) -> None:
        """Keep the cache current from a watch; ``on_change(key, body, deleted)`` after each event
        (for a deletion, ``body`` is the object's last state)."""
        group, version, plural = self._resource
        resource = (group, version, plural) if group else (version, plural)
        self._on_change = on_change

        def watch(event_type: str | None, body: dict[str, Any]) -> None:
            key = self.key(body)
            deleted = event_type == "DELETED"
            self.relists.seen(key, event_type)
            if deleted:
                current = self.items.get(key)
                if current is None or current["metadata"].get("uid") == body["metadata"].get("uid"):
                    self._drop(key)
                if not self._listed:
                    self._gone.add((key, body["metadata"].get("uid", "")))
            else:
                self._put(key, body)
            if on_change is not None:
                on_change(key, body, deleted)

        on_event(registry, resource, watch, self._labels)

    async def ensure_listed(self) -> None:
        """The first read lists (on the controller's own loop, also when an admission check on
        the admission loop reads first: the lister's client belongs there)."""
        if not self._listed:
            await at_home(self._list)

    async def _list(self) -> None:
        async with self._lock:
            if self._listed:
                return
            for obj in await self._lister(self._keep):  # projected as listed
                # Skip what the watch saw deleted while the list was in flight (no resurrection).
                if (self.key(obj), obj["metadata"].get("uid", "")) not in self._gone and self.key(
                    obj
                ) not in self.items:
                    self._put(self.key(obj), obj, kept=True)
            self._gone.clear()
            self._listed = True

    def _put(self, key: Key, obj: dict[str, Any], kept: bool = False) -> None:
        self._drop(key)
        obj = obj if kept else self._keep(obj)
        self.items[key] = obj
        if self._index is not None:
            self._groups.setdefault(self._index(obj), {})[key] = obj

    def _drop(self, key: Key) -> None:
        old = self.items.pop(key, None)
        if old is not None and self._index is not None:
            group = self._groups.get(self._index(old), {})
            group.pop(key, None)
            if not group:
                self._groups.pop(self._index(old), None)

    def hold(self, key: Key, kept: dict[str, Any]) -> None:
        """Hold ``kept``, a smaller form its controller made of what is held for ``key``, in its
        place. A later event of it, or a relist, holds it afresh (through ``keep``)."""
        if key in self.items:
            self._put(key, kept, kept=True)

    def forget(self, key: Key) -> None:
        """Stop holding ``key`` (it stays on the server): what its controller will not read again.
        A later event of it, or a relist, holds it again."""
        self._drop(key)

    async def grouped(self, value: Hashable) -> list[dict[str, Any]]:
        """The objects whose ``index`` is ``value``."""
        await self.ensure_listed()
        return list(self._groups.get(value, {}).values())

    async def values(self) -> list[dict[str, Any]]:
        await self.ensure_listed()
        return list(self.items.values())

    async def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        await self.ensure_listed()
        return self.items.get((namespace, name))


class Derived(Generic[T]):
    """``derive(obj)`` of a cache's objects, computed again only for the objects that changed.
    A cache puts a new dict for every change it sees, so the very same dict means the same state:
    a controller that reads every object on every pass (the quota plan) parses only what moved.
    A round (``over``, or calls then ``round_done``) keeps exactly the objects it was given."""

    def __init__(self, derive: Callable[[dict[str, Any]], T]) -> None:
        self._derive = derive
        self._last: dict[int, tuple[dict[str, Any], T]] = {}  # id -> (the object itself, its value)
        self._this: dict[int, tuple[dict[str, Any], T]] = {}

    def __call__(self, obj: dict[str, Any]) -> T:
        hit = self._last.get(id(obj))
        value = hit[1] if hit is not None and hit[0] is obj else self._derive(obj)
        self._this[id(obj)] = (obj, value)
        return value

    def round_done(self) -> None:
        """Forget the objects this round was not given (deleted, or replaced by a newer state)."""
        self._last, self._this = self._this, {}

    def over(self, objs: Iterable[dict[str, Any]]) -> list[T]:
        out = [self(o) for o in objs]
        self.round_done()
        return out

"""Server-side-apply writer for one controller's own part of an object's status.

Each controller owns some top-level fields of ``status`` (e.g. ``status.profile``) and a set of
condition types. It writes them with server-side apply under its own field manager and without
``force``, so the API server rejects a write to a field another controller owns (docs/design/status-protocol.md).
:meth:`StatusWriter.plan` is pure: it returns ``None`` when the live object already says what
the controller wants, and then no request is made at all.
"""

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from .api import API_VERSION, KindInfo
from .conditions import Desired, merge, parse
from .metrics import STATUS_WRITES
from .names import field_manager
from .outcome import StatusSection


class StatusApplier(Protocol):
    """The one API call the writer needs (implemented by :class:`trainerop_common.kube.Kube`)."""

    async def apply_status(
        self, info: KindInfo, namespace: str | None, name: str, body: dict[str, Any], field_manager: str
    ) -> str | None:
        """Apply ``body`` to the status subresource; returns the new resourceVersion."""
        ...


def resource_version(obj: Mapping[str, Any]) -> int | None:
    """The resourceVersion as a number (etcd revisions are), None if it is not one."""
    value = obj.get("metadata", {}).get("resourceVersion")
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def object_key(obj: Mapping[str, Any]) -> tuple[str | None, str]:
    """(namespace, name) of an object's body; the namespace is None for a cluster-scoped one."""
    meta = obj.get("metadata", {})
    return meta.get("namespace"), meta.get("name", "")


@dataclass(frozen=True)
class StatusPatch:
    """An apply request body for the status subresource."""

    namespace: str | None
    name: str
    body: dict[str, Any]


class StatusWriter:
    def __init__(
        self,
        applier: StatusApplier,
        info: KindInfo,
        controller: str,
        section: StatusSection,
    ) -> None:
        self._applier = applier
        self._info = info
        self.controller = controller
        self.field_manager = field_manager(controller)
        self._fields = section.fields
        self._types = frozenset(section.conditions)
        # resourceVersion our last write produced, per object, and when (time.monotonic()): a
        # watch event older than that predates our write and would make us apply the same status
        # again.
        self._written: dict[tuple[str | None, str], tuple[int, float]] = {}

    def plan(
        self,
        obj: Mapping[str, Any],
        owned: Mapping[str, Any],
        conditions: Iterable[Desired],
        now: str,
    ) -> StatusPatch | None:
        """The apply request that makes ``obj`` say what we want, or None if it already does.

        ``owned`` maps each owned status field to its wanted value; an owned field left out of it
        is wanted absent (server-side apply removes fields a manager stops sending).
        """
        meta = obj.get("metadata", {})
        if self.is_stale(obj):
            return None
        status = obj.get("status") or {}
        generation = int(meta.get("generation") or 0)
        desired = list(conditions)
        unknown = {d.type for d in desired} - self._types
        if unknown:
            raise ValueError(f"{self.field_manager} does not own condition types {sorted(unknown)}")
        foreign = set(owned) - set(self._fields)
        if foreign:
            raise ValueError(f"{self.field_manager} does not own status fields {sorted(foreign)}")
        live_conditions = parse(status.get("conditions"))
        new_conditions = [c.to_k8s() for c in merge(live_conditions, desired, generation, now)]
        ours_live = sorted((c.to_k8s() for c in live_conditions if c.type in self._types), key=lambda c: str(c["type"]))
        same_conditions = ours_live == sorted(new_conditions, key=lambda c: str(c["type"]))
        same_fields = all(status.get(f) == owned.get(f) for f in self._fields)
        if same_conditions and same_fields:
            return None
        new_status: dict[str, Any] = {f: owned[f] for f in self._fields if owned.get(f) is not None}
        if new_conditions:
            new_status["conditions"] = new_conditions
        body = {
            "apiVersion": API_VERSION,
            "kind": self._info.kind,
            "metadata": {"name": meta["name"], **({"namespace": meta["namespace"]} if "namespace" in meta else {})},
            "status": new_status,
        }
        return StatusPatch(meta.get("namespace"), meta["name"], body)

    def is_stale(self, obj: Mapping[str, Any]) -> bool:
        """True when ``obj`` is older than the version our own last write produced."""
        version, written = resource_version(obj), self._written.get(object_key(obj))
        return version is not None and written is not None and version < written[0]

    def since_written(self, namespace: str | None, name: str) -> float | None:
        """Seconds since our last write to the object (None: none by this process)."""
        written = self._written.get((namespace, name))
        return time.monotonic() - written[1] if written is not None else None

    def forget(self, namespace: str | None, name: str) -> None:
        """The object is gone: what our last write to it produced no longer matters."""
        self._written.pop((namespace, name), None)

    def forget_object(self, obj: Mapping[str, Any]) -> None:
        """:meth:`forget` the object a body names (a deleted one's last body), namespaced or not."""
        self._written.pop(object_key(obj), None)

    def skipped(self, count: int = 1) -> None:
        """Count writes a caller knew to be unneeded without planning them (as :meth:`write` counts
        those it plans and finds unneeded)."""
        STATUS_WRITES.labels(self.controller, self._info.kind, "skipped").inc(count)

    async def write(
        self,
        obj: Mapping[str, Any],
        owned: Mapping[str, Any],
        conditions: Iterable[Desired],
        now: str,
    ) -> bool:
        """Apply the plan; returns whether a request was made."""
        patch = self.plan(obj, owned, conditions, now)
        if patch is None:
            self.skipped()
            return False
        STATUS_WRITES.labels(self.controller, self._info.kind, "written").inc()
        version = await self._applier.apply_status(
            self._info, patch.namespace, patch.name, patch.body, self.field_manager
        )
        if version is not None and version.isdigit():
            self._written[(patch.namespace, patch.name)] = (int(version), time.monotonic())
        return True

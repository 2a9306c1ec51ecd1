"""One place that configures kopf the same way for all five controllers (docs/design/work-queue.md)."""

import hashlib
import json
import logging
import types
from collections.abc import Iterable, Mapping
from typing import Any

import kopf
import kopf._cogs.clients.api as kopf_api
import orjson

from .api import GROUP
from .config import ControllerConfig
from .kube import LIST_PAGE
from .names import component


def finalizer(controller: str) -> str:
    return f"{GROUP}/{controller}-finalizer"


def annotation_prefix(controller: str) -> str:
    return f"{controller}.{GROUP}"


class NoDiffBase(kopf.DiffBaseStorage):
    """No diff base: the controllers are level-triggered (on.event handlers only), so no handler
    ever reads a diff between handled states, yet kopf builds one for every watch event by
    deep-copying the whole object (about an eighth of the trainer controller's CPU at 1000
    Trainers). Nothing is built, nothing stored, nothing fetched."""

    def build(self, *, body: Any, extra_fields: Iterable[Any] | None = None) -> Any:
        return kopf.BodyEssence()

    def fetch(self, *, body: Any) -> None:
        return None

    def store(self, *, body: Any, patch: Any, essence: Any) -> None:
        return None


class FastJson(types.ModuleType):
    """The standard ``json`` module with orjson's ``loads``: kopf decodes every line of every watch
    stream with ``json.loads`` (a tenth of the trainer controller's CPU at 1000 Trainers, a sixth
    of the quota controller's, which sees every pod). orjson parses the same JSON into the same
    values in half the time (a 5 KB Trainer event: 35 against 74 µs here)."""

    def __init__(self) -> None:
        super().__init__("json")
        self.__dict__.update({k: v for k, v in vars(json).items() if not k.startswith("__")})
        self.loads = orjson.loads


def decode_watch_streams_fast() -> None:
    """kopf's watch streams decoded by orjson (see :class:`FastJson`); kopf reads the name ``json``
    of its API module when it decodes a line, so the module it finds there is replaced."""
    if not isinstance(getattr(kopf_api, "json", None), FastJson):
        setattr(kopf_api, "json", FastJson())  # noqa: B010 (kopf exports no name for it)


def peering_priority(pod_name: str) -> int:
    """A replica's peering priority, from its pod's name: stable across restarts of its process, so
    a replica killed and restarted in its pod works again at once (its own record, under the same
    identity, is not another peer's), and distinct between pods (equal priorities make kopf pause
    every replica; two names share one with a chance of one in a million)."""
    digest = hashlib.sha256(pod_name.encode()).digest()
    return int.from_bytes(digest[:8], "big") % 1_000_000 + 1


def apply(settings: kopf.OperatorSettings, config: ControllerConfig) -> None:
    decode_watch_streams_fast()
    c = config.controller
    settings.persistence.finalizer = finalizer(c)
    # Progress annotations are per controller so the five never overwrite each other's; the
    # controllers are level-triggered (on.event), so normally nothing is stored.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=annotation_prefix(c))
    settings.persistence.diffbase_storage = NoDiffBase()
    settings.posting.level = logging.WARNING
    settings.posting.reporting_component = component(c)
    settings.posting.reporting_instance = config.pod_name
    settings.posting.event_name_prefix = f"{component(c)}-"
    settings.peering.name = component(c)
    settings.peering.clusterwide = not config.namespaces
    settings.peering.mandatory = config.peering
    settings.peering.standalone = not config.peering
    settings.peering.priority = config.peering_priority or peering_priority(config.pod_name)
    settings.peering.lifetime = config.peering_lifetime
    # CRDs are installed by deploy/, not discovered at run time: no cluster-wide CRD watch.
    settings.scanning.disabled = True
    # kopf keeps an object's worker alive for idle_timeout after its last event and counts it
    # against worker_limit, so a limit serialises bursts of new objects: none. --workers bounds
    # the reconciles running (WorkQueue), which kopf's workers no longer carry.
    settings.queueing.worker_limit = None
    settings.queueing.idle_timeout = 1.0
    settings.networking.request_timeout = 60
    settings.networking.connect_timeout = 10
    settings.watching.chunk_size = LIST_PAGE  # kopf's first list of each kind, a page at a time
    settings.watching.server_timeout = 270
    settings.watching.client_timeout = 300


def label_selector(labels: Mapping[str, Any] | None) -> str | None:
    """A handler's label filter as a Kubernetes label selector; None where it cannot be one (no
    filter, or a callable)."""
    if not labels:
        return None
    terms = []
    for key, value in sorted(labels.items()):
        if value is kopf.PRESENT:
            terms.append(key)
        elif value is kopf.ABSENT:
            terms.append(f"!{key}")
        elif isinstance(value, str):
            terms.append(f"{key}={value}")
        else:
            return None
    return ",".join(terms)


def resource_name(selector: Any) -> str:
    return str(selector.plural or selector.kind or selector.any_name or selector)


def watch_handlers(registry: kopf.OperatorRegistry) -> dict[tuple[str, str], list[Any]]:
    """The watch handlers registered, by resource (its group, "" for the core API, and plural)."""
    by_resource: dict[tuple[str, str], list[Any]] = {}
    for handler in registry._watching.get_all_handlers():  # kopf keeps no public list of them
        if handler.selector is not None:
            key = (handler.selector.group or "", resource_name(handler.selector))
            by_resource.setdefault(key, []).append(handler)
    return by_resource


def filter_on_server(settings: kopf.OperatorSettings, registry: kopf.OperatorRegistry) -> dict[str, str]:
    """Have the API server send only what a watch's handlers would keep: a resource whose every
    handler filters by the same labels is watched with that label selector, so the events a
    controller would drop (the checkpoint controller's watch of its storage pods among every pod of
    the cluster) are neither sent nor decoded. Returns the selectors set, by resource."""
    chosen = {}
    for (_, name), handlers in watch_handlers(registry).items():
        selectors = {label_selector(h.labels) for h in handlers}
        only = selectors.pop() if len(selectors) == 1 else None
        if only is not None:
            for h in handlers:
                settings.watching.label_selectors[h.selector] = only
            chosen[name] = only
    return chosen

"""Proactive mode's I/O (docs/quota.md "Proactive mode", --enable-proactive-scheduling): every
--proactive-interval-seconds each watched node's exporters are read (the Prometheus exposition
format: NVIDIA's DCGM exporter, the node exporter), the node is judged (proactive_nodes), and a
node predicted to degrade is tainted, with Events on it and on each run with a pod there; the
plan then treats it as reclaimed (the runs save a checkpoint, then move). Once it reads cool
again the taint goes. After a restart a node that carries the taint is taken as predicted, so
it is cleared only by cool readings."""

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any

import aiohttp
from lightkube import ApiError

from trainerop_common.cache import ObjectCache
from trainerop_common.parallel import settled
from trainerop_common.runtime import Body, Runtime

from .config import QuotaConfig
from .metrics import PROACTIVE_PREDICTED, PROACTIVE_PREDICTIONS, PROACTIVE_SCRAPE_FAILURES
from .node_readings import scraped
from .proactive import PREDICTION_ANNOTATION, NodeState, is_ours
from .proactive_nodes import Watched, node_message, observe, taints_after

log = logging.getLogger("trainerop.quota.proactive")
SCRAPE_TIMEOUT_SECONDS = 5.0


def address_of(node: Body) -> str:
    """The node's InternalIP (else its first address, else its name)."""
    addresses = (node.get("status") or {}).get("addresses") or []
    internal = [a["address"] for a in addresses if a.get("type") == "InternalIP"]
    return str((internal or [a["address"] for a in addresses if a.get("address")] or [node["metadata"]["name"]])[0])


def selected(node: Body, selector: Mapping[str, str]) -> bool:
    labels = node["metadata"].get("labels") or {}
    return all(labels.get(k) == v for k, v in selector.items())


def restored(node: Body) -> Watched:
    """A node first seen: predicted already when it carries this controller's taint."""
    if not any(is_ours(t) for t in (node.get("spec") or {}).get("taints") or ()):
        return Watched()
    why = (node["metadata"].get("annotations") or {}).get(PREDICTION_ANNOTATION, "predicted before a restart")
    return Watched(state=NodeState(predicted=True, reason=why))


class ProactiveWatch:
    def __init__(self, runtime: Runtime, config: QuotaConfig, nodes: ObjectCache) -> None:
        self.rt, self.nodes = runtime, nodes
        self.templates = config.proactive_exporter_urls
        self.selector = dict(pair.split("=", 1) for pair in config.proactive_node_labels)
        self.watched: dict[str, Watched] = {}

    async def round(self) -> None:
        """One scrape of every watched node, and what follows from it."""
        nodes = [n for n in await self.nodes.values() if selected(n, self.selector)]
        timeout = aiohttp.ClientTimeout(total=SCRAPE_TIMEOUT_SECONDS)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            samples = await settled(self.scrape(session, n) for n in nodes)
        at = time.time()
        for node, found in zip(nodes, samples, strict=True):
            name = node["metadata"]["name"]
            if isinstance(found, Exception) or found is None:
                PROACTIVE_SCRAPE_FAILURES.inc()
                log.warning("node %s: its exporters could not be read: %s", name, found)
                continue
            before = self.watched.get(name) or restored(node)
            self.watched[name] = after = observe(before, at, found)
            if await self.taint(node, after.state):
                self.announce(node, after.state)
        present = {n["metadata"]["name"] for n in nodes}
        self.watched = {k: v for k, v in self.watched.items() if k in present}
        PROACTIVE_PREDICTED.set(sum(w.state.predicted for w in self.watched.values()))

    async def scrape(self, session: aiohttp.ClientSession, node: Body) -> dict[str, float] | None:
        """The node's exporters' samples, merged (None: none of its exporters answered)."""
        urls = [t.format(node=node["metadata"]["name"], address=address_of(node)) for t in self.templates]
        texts = await asyncio.gather(*(self._get(session, url) for url in urls), return_exceptions=True)
        read = [t for t in texts if isinstance(t, str)]
        merged: dict[str, float] = {}
        for text in read:
            merged |= scraped(text)
        return merged if read else None

    @staticmethod
    async def _get(session: aiohttp.ClientSession, url: str) -> str:
        async with session.get(url) as response:
            response.raise_for_status()
            return await response.text()

    async def taint(self, node: Body, state: NodeState) -> bool:
        """The node's taint as its state says (a conditional patch on what was read: a conflict,
        or any failure, is tried again next round, which compares again); whether it changed."""
        name = node["metadata"]["name"]
        taints = taints_after((node.get("spec") or {}).get("taints") or [], state.predicted)
        if taints is None:
            return False
        meta: dict[str, Any] = {"resourceVersion": node["metadata"].get("resourceVersion")}
        meta["annotations"] = {PREDICTION_ANNOTATION: state.reason[:1024] if state.predicted else None}
        try:
            await self.rt.kube.merge_patch("Node", None, name, {"metadata": meta, "spec": {"taints": taints}})
        except ApiError as err:
            log.warning("node %s: taint not changed (%s); tried again next round", name, err)
            return False
        return True

    def announce(self, node: Body, state: NodeState) -> None:
        """The Event on the node (each run on it hears from the plan's reclaim, with the same
        prediction); the prediction's signals counted."""
        kind, reason = ("Warning", "NodePredicted") if state.predicted else ("Normal", "NodeCleared")
        self.rt.event(node, kind, reason, node_message(node["metadata"]["name"], state))
        for heat in state.heats if state.predicted else ():
            PROACTIVE_PREDICTIONS.labels(heat.signal).inc()

"""Proactive mode's I/O (docs/quota.md "Proactive mode", --enable-proactive-scheduling): every
--proactive-interval-seconds each watched node's exporters are read (the Prometheus exposition
format: NVIDIA's DCGM exporter, the node exporter; or the same metrics from a Prometheus server's
query API, --proactive-prometheus-url), the node is judged (proactive_nodes), and a
node predicted to degrade is tainted, with Events on it and on each run with a pod there; the
plan then treats it as reclaimed (the runs save a checkpoint, then move). Once it reads cool
again the taint goes. After a restart a node that carries the taint is taken as predicted, so
it is cleared only by cool readings."""

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

import aiohttp
from lightkube import ApiError

from trainerop_common.cache import ObjectCache
from trainerop_common.parallel import settled
from trainerop_common.runtime import Body, Runtime

from .config import QuotaConfig
from .metrics import PROACTIVE_PREDICTED, PROACTIVE_PREDICTIONS, PROACTIVE_SCRAPE_FAILURES
from .node_queries import by_node, queries, vector
from .node_readings import scraped
from .proactive import PREDICTION_ANNOTATION, NodeState, is_ours
from .proactive_nodes import Watched, node_message, observe, taints_after

log = logging.getLogger("trainerop.quota.proactive")
SCRAPE_TIMEOUT_SECONDS = 5.0
Samples = dict[str, float] | None | Exception  # a node's samples; None or an error: none read


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
        self.prometheus = config.proactive_prometheus_url.rstrip("/")
        self.node_label = config.proactive_prometheus_node_label
        self.source = f"Prometheus at {self.prometheus}" if self.prometheus else "its exporters"
        self.selector = dict(pair.split("=", 1) for pair in config.proactive_node_labels)
        self.watched: dict[str, Watched] = {}

    async def round(self) -> None:
        """One scrape of every watched node, and what follows from it."""
        nodes = [n for n in await self.nodes.values() if selected(n, self.selector)]
        timeout = aiohttp.ClientTimeout(total=SCRAPE_TIMEOUT_SECONDS)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            samples = await self.read(session, nodes)
        at = time.time()
        for node, found in zip(nodes, samples, strict=True):
            name = node["metadata"]["name"]
            if isinstance(found, Exception) or found is None:
                PROACTIVE_SCRAPE_FAILURES.inc()
                log.warning("node %s: no readings from %s: %s", name, self.source, found or "none of its series")
                continue
            before = self.watched.get(name) or restored(node)
            self.watched[name] = after = observe(before, at, found)
            if await self.taint(node, after.state):
                self.announce(node, after.state)
        present = {n["metadata"]["name"] for n in nodes}
        self.watched = {k: v for k, v in self.watched.items() if k in present}
        PROACTIVE_PREDICTED.set(sum(w.state.predicted for w in self.watched.values()))

    async def read(self, session: aiohttp.ClientSession, nodes: Sequence[Body]) -> Sequence[Samples]:
        """Each node's samples: from the Prometheus server (one query per metric for all nodes),
        else from each node's exporters."""
        if not self.prometheus:
            return await settled(self.scrape(session, n) for n in nodes)
        try:
            found = await self.query(session)
        except (aiohttp.ClientError, TimeoutError, ValueError) as err:
            return [err for _ in nodes]
        return [found.get(n["metadata"]["name"]) for n in nodes]

    async def query(self, session: aiohttp.ClientSession) -> dict[str, dict[str, float]]:
        """Every node's samples from the Prometheus server's query API (node_queries)."""
        asked = queries(self.node_label)
        answers = await asyncio.gather(*(self._answer(session, promql) for promql in asked.values()))
        return by_node({family: vector(a, self.node_label) for family, a in zip(asked, answers, strict=True)})

    async def _answer(self, session: aiohttp.ClientSession, promql: str) -> Any:
        async with session.get(f"{self.prometheus}/api/v1/query", params={"query": promql}) as response:
            if response.status >= 500:
                response.raise_for_status()
            return await response.json(content_type=None)  # a refused query's JSON says why

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

"""Admission webhooks under a burst of creates (issue 19's target: no refusal caused by the
webhooks' own timeouts or rate limits; the latency they add, reported).

Method: suspended Trainers (nothing to schedule: the burst loads admission, not the pods) are
created at a fixed rate, each create timed by the client, first with every webhook of the
operator registered, then, in a fresh namespace, with them removed (the baseline); the webhooks'
added latency is the difference of the two distributions. The API server's own metrics say what
each webhook took (apiserver_admission_webhook_admission_duration_seconds: the mean, and the
bucket the 99th percentile falls in) and why anything was refused
(apiserver_admission_webhook_rejection_count by error_type: calling_webhook_error is a timeout, a
refused connection or an error of the call; no_error is a webhook's own verdict)."""

from __future__ import annotations

import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from lightkube import ApiError, Client
from prometheus_client.parser import text_string_to_metric_families

from bench.measure import spread
from bench.setup import gone, scratch_namespace
from bench.throughput import TRAINER, bench_trainer
from testbed import localdev
from tests.harness import Cluster

DURATION = "apiserver_admission_webhook_admission_duration_seconds"
REJECTIONS = "apiserver_admission_webhook_rejection_count"
Histograms = dict[str, dict[str, float]]  # webhook -> {"count", "sum", "le=<bound>": cumulative}


def webhook_metrics(c: Cluster) -> tuple[Histograms, Counter[str]]:
    """The API server's webhook histograms (by webhook name) and rejections (by error_type)."""
    hist: Histograms = {}
    rejected: Counter[str] = Counter()
    for family in text_string_to_metric_families(c.kubectl("get", "--raw", "/metrics")):
        for s in family.samples:
            if s.name.startswith(DURATION):
                h = hist.setdefault(s.labels["name"], {})
                part = s.name.removeprefix(DURATION).lstrip("_")
                key = f"le={s.labels['le']}" if part == "bucket" else part
                h[key] = h.get(key, 0.0) + s.value
            elif s.name.startswith(REJECTIONS) and not s.name.endswith("_created"):
                rejected[s.labels.get("error_type", "")] += int(s.value)
    return hist, rejected


def webhook_figures(before: Histograms, after: Histograms) -> dict[str, dict[str, Any]]:
    """Per webhook between two snapshots: calls, mean seconds, and the upper bound of the bucket
    that holds the 99th percentile."""
    out = {}
    for name, h in after.items():
        b = before.get(name, {})
        count = h.get("count", 0) - b.get("count", 0)
        if not count:
            continue
        bounds = sorted((float(k[3:]), v - b.get(k, 0)) for k, v in h.items() if k.startswith("le="))
        p99 = next((bound for bound, cumulative in bounds if cumulative >= 0.99 * count), float("inf"))
        out[name] = {
            "calls": int(count),
            "mean_s": round((h["sum"] - b.get("sum", 0)) / count, 4),
            "p99_at_most_s": p99,
        }
    return out


def paced_creates(client: Client, bodies: list[Any], rate: float) -> list[tuple[float, str | None]]:
    """Each body created at its slot (``rate`` a second from now), timed: (seconds, error)."""
    t0 = time.monotonic()

    def one(item: tuple[int, Any]) -> tuple[float, str | None]:
        i, body = item
        time.sleep(max(0.0, t0 + i / rate - time.monotonic()))
        start = time.monotonic()
        try:
            client.create(body)
        except ApiError as err:
            return time.monotonic() - start, f"{err.status.code} {err.status.message}"
        return time.monotonic() - start, None

    with ThreadPoolExecutor(64) as pool:  # enough that a slow create never delays the next slot
        return list(pool.map(one, enumerate(bodies)))


def burst(c: Cluster, client: Client, prefix: str, rate: float, seconds: float) -> dict[str, Any]:
    """One burst in a namespace of its own, gone before this returns."""
    count = round(rate * seconds)
    with scratch_namespace(c, prefix) as ns:
        bodies = [bench_trainer(f"w{i:05d}", 1, ns) for i in range(count)]
        for b in bodies:
            b["spec"]["runPolicy"]["suspend"] = True
        hist_before, rejected_before = webhook_metrics(c)
        results = paced_creates(client, [TRAINER.from_dict(b) for b in bodies], rate)
        hist_after, rejected_after = webhook_metrics(c)
    gone(c, ns)
    errors = Counter(err for _, err in results if err)
    return {
        "creates": count,
        "rate_per_second": rate,
        "create_seconds": spread([t for t, _ in results]),
        "refused": sum(errors.values()),
        "refusals": dict(errors.most_common(5)),
        "rejections_by_error_type": dict(rejected_after - rejected_before),
        "webhooks": webhook_figures(hist_before, hist_after),
    }


def unregistered() -> list[tuple[str, str]]:
    """Remove the operator's webhook configurations; what was removed (kind, name)."""
    removed = []
    for controller in localdev.WEBHOOK_PORTS:
        for config in localdev.local_webhook(controller):
            kind, name = config["kind"].lower(), config["metadata"]["name"]
            localdev.kubectl("delete", kind, name, "--ignore-not-found")
            removed.append((kind, name))
    return removed


def webhook_burst(c: Cluster, client: Client, rate: float = 50, seconds: float = 20) -> dict[str, Any]:
    """The burst with the operator's webhooks, then without them (the baseline): the added
    latency is the difference of the two distributions."""
    print(f"== webhooks: {rate:g} Trainer creates a second for {seconds:g} s, with the webhooks", file=sys.stderr)
    with_hooks = burst(c, client, "bench-hooks", rate, seconds)
    print("== webhooks: the same burst without them (baseline)", file=sys.stderr)
    unregistered()
    try:
        without = burst(c, client, "bench-nohooks", rate, seconds)
    finally:
        localdev.register_webhooks()
    added = {q: round(with_hooks["create_seconds"][q] - without["create_seconds"][q], 3) for q in ("p50", "p99")}
    return {"with_webhooks": with_hooks, "without_webhooks": without, "added_seconds": added}

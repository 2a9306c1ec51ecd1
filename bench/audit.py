#!/usr/bin/env python3
"""What the audit webhook costs a user's request, and whether every request gets its record (prints figures).

    python bench/audit.py --updates 100

A Trainer is updated N times (a merge patch of spec.epochs, as the cluster admin over HTTPS, no
kubectl start-up in the figure) with the audit webhook registered, then N times with it
unregistered; p50/p95 of the request latency each way, the records the N updates left, and the
webhook's outcomes from its metrics. Uses the cluster in $KUBECONFIG, else brings the local cluster
up and takes it down again.
"""

from __future__ import annotations

import argparse
import http.client
import json
import ssl
import sys
import time
import urllib.parse
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.setup import operator_running, percentile, scratch_namespace
from testbed import cluster as cluster_tool
from testbed import localdev
from tests.harness import Cluster

API = "trainer.operator.kubeflow.org/v1alpha1"


def client(c: Cluster) -> http.client.HTTPSConnection:
    """One kept-alive HTTPS connection to the API server as the cluster admin (client certificate)."""
    config = yaml.safe_load(Path(c.kubeconfig).read_text())
    server = urllib.parse.urlparse(config["clusters"][0]["cluster"]["server"])
    pki = cluster_tool.RUN_DIR / "pki"
    context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    return http.client.HTTPSConnection(server.hostname or "127.0.0.1", server.port, context=context)


def updates(conn: http.client.HTTPSConnection, namespace: str, first: int, count: int) -> list[float]:
    path = f"/apis/{API}/namespaces/{namespace}/trainers/audited"
    seconds = []
    for epochs in range(first, first + count):
        body = json.dumps({"spec": {"epochs": epochs}})
        t0 = time.perf_counter()
        conn.request("PATCH", path, body=body, headers={"Content-Type": "application/merge-patch+json"})
        response = conn.getresponse()
        response.read()
        seconds.append(time.perf_counter() - t0)
        if response.status != 200:
            raise SystemExit(f"PATCH {path} answered {response.status}")
    return seconds


def run(c: Cluster, namespace: str, count: int) -> None:
    trainer = {
        "apiVersion": API,
        "kind": "Trainer",
        "metadata": {"name": "audited"},
        "spec": {"epochs": 1, "image": "busybox"},
    }
    c.apply(trainer, namespace)
    outcomes = {
        o: c.metric("audit", "audit_webhook_requests_total", {"operation": "UPDATE", "outcome": o})
        for o in ("recorded", "retrying", "repeated", "failed")
    }
    conn = client(c)
    try:
        updates(conn, namespace, 100, 5)  # warm up connections and caches
        with_hook = updates(conn, namespace, 1000, count)

        def updated() -> int:
            items = json.loads(c.kubectl("get", "auditlogs", "-n", namespace, "-o", "json"))["items"]
            return sum(1 for r in items if r["spec"]["action"] == "Updated")

        deadline, records = time.monotonic() + 30, updated()
        while records < count + 5 and time.monotonic() < deadline:  # a write still being retried
            time.sleep(0.5)
            records = updated()
        c.kubectl("delete", "validatingwebhookconfiguration", "trainer-operator-audit")
        try:
            without = updates(conn, namespace, 5000, count)
        finally:
            for config in localdev.local_webhook("audit"):
                c.apply(config)
    finally:
        conn.close()
    after = {
        o: c.metric("audit", "audit_webhook_requests_total", {"operation": "UPDATE", "outcome": o}) - v
        for o, v in outcomes.items()
    }
    print(f"updates {count}")
    print(
        f"update_p50_ms_with_webhook {1000 * percentile(with_hook, 50):.1f} p95 {1000 * percentile(with_hook, 95):.1f}"
    )
    print(
        f"update_p50_ms_without_webhook {1000 * percentile(without, 50):.1f} p95 {1000 * percentile(without, 95):.1f}"
    )
    print(f"records_of_updates {records} (of {count + 5} updates with the webhook registered)")
    print("webhook_outcomes " + " ".join(f"{k}={v:.0f}" for k, v in after.items()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--updates", type=int, default=100)
    args = parser.parse_args()
    with operator_running() as c, scratch_namespace(c) as namespace:
        run(c, namespace, args.updates)
    return 0


if __name__ == "__main__":
    sys.exit(main())

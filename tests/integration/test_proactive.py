"""Proactive mode (docs/quota.md#proactive-mode) against the real API server and controllers, with
a local exporter that speaks the DCGM exporter's exposition format (the GPUs are what is missing
here, not the protocol) and plays recorded traces: a thermal ramp on the node under a run makes the
quota controller taint it and say why; the run saves at the step the checkpoint controller asks,
then moves off; once the node reads cool again the taint goes. The same readings also come through
a real Prometheus server's query API (--proactive-prometheus-url)."""

import contextlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from testbed import cluster as cluster_tool
from testbed import localdev, prometheus
from tests.harness import REPO, Cluster, eventually
from tests.integration.test_checkpoints import as_pod
from tests.integration.test_deploy import controller_env, with_component
from tests.integration.test_heartbeats import beat_as
from tests.integration.test_save_request import one_gpu_node_run, running, save_request

G = "trainer.operator.kubeflow.org"
GPU = "nvidia.com/gpu"
CLIQUE = "nvidia.com/gpu.clique"
WATCHED = "clique-3"  # kwok-gpu-12 to 15: the nodes this test's exporter serves
RBAC = REPO / "deploy" / "components" / "proactive" / "rbac.yaml"


def dcgm_text(node: str, temperature: float) -> str:
    """A DCGM exporter's answer for a node of 8 GPUs, the hottest at ``temperature``."""
    lines = ["# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).", "# TYPE DCGM_FI_DEV_GPU_TEMP gauge"]
    for gpu in range(8):
        labels = f'gpu="{gpu}",UUID="GPU-{node}-{gpu}",device="nvidia{gpu}",modelName="A100",Hostname="{node}"'
        lines.append(f"DCGM_FI_DEV_GPU_TEMP{{{labels}}} {temperature - gpu}")
    lines += [
        "# HELP DCGM_FI_DEV_XID_ERRORS Value of the last XID error encountered.",
        "# TYPE DCGM_FI_DEV_XID_ERRORS gauge",
    ]
    lines += [f'DCGM_FI_DEV_XID_ERRORS{{gpu="{gpu}",Hostname="{node}"}} 0' for gpu in range(8)]
    return "\n".join(lines) + "\n"


class Exporter:
    """Serves /metrics/<node> for the watched nodes, each scrape the next value of the node's trace
    (the last one repeats)."""

    def __init__(self) -> None:
        self.traces: dict[str, list[float]] = {f"kwok-gpu-{i}": [60.0] for i in range(12, 16)}
        self.lock = threading.Lock()
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                node = self.path.removeprefix("/metrics/")
                with exporter.lock:
                    trace = exporter.traces.get(node)
                    value = None if trace is None else (trace.pop(0) if len(trace) > 1 else trace[0])
                if value is None:
                    self.send_error(404)
                    return
                body = dcgm_text(node, value).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def play(self, node: str, trace: list[float]) -> None:
        with self.lock:
            self.traces[node] = list(trace)


@contextlib.contextmanager
def proactive_quota(cluster: Cluster, served: Exporter, source: dict[str, str]) -> Iterator[Exporter]:
    """The quota controller in proactive mode, reading every second from ``source`` (its env)."""
    cluster.kubectl("apply", "-f", str(RBAC))
    env = {
        "TRAINEROP_ENABLE_PROACTIVE_SCHEDULING": "true",
        "TRAINEROP_PROACTIVE_INTERVAL_SECONDS": "1",
        "TRAINEROP_PROACTIVE_NODE_LABELS": f"{CLIQUE}={WATCHED}",
        **source,
    }
    localdev.restart("quota", env)
    try:
        yield served
    finally:
        localdev.restart("quota")
        cluster.kubectl("delete", "-f", str(RBAC), "--ignore-not-found")
        for node in served.traces:  # a test that failed half-way leaves no node tainted
            if taint_of(cluster, node) is not None:
                cluster.kubectl("taint", "node", node, f"{G}/reclaim=predicted:NoSchedule-")
        served.server.shutdown()


@pytest.fixture
def exporter(cluster: Cluster) -> Iterator[Exporter]:
    """The exporter, and the quota controller in proactive mode reading it every second."""
    served = Exporter()
    urls = f"http://127.0.0.1:{served.port}/metrics/{{node}}"
    with proactive_quota(cluster, served, {"TRAINEROP_PROACTIVE_EXPORTER_URLS": urls}):
        yield served


@pytest.fixture
def through_prometheus(cluster: Cluster) -> Iterator[Exporter]:
    """The exporter scraped every second by a real Prometheus server (each node's target labelled
    `node`, as a ServiceMonitor's relabelling does), and the quota controller in proactive mode
    reading that server's query API every second."""
    served = Exporter()
    targets = [(f"127.0.0.1:{served.port}", f"/metrics/{node}", {"node": node}) for node in served.traces]
    url = prometheus.start(cluster_tool.RUN_DIR, targets)
    try:
        with proactive_quota(cluster, served, {"TRAINEROP_PROACTIVE_PROMETHEUS_URL": url}):
            yield served
    finally:
        prometheus.stop(cluster_tool.RUN_DIR)


def node_of(cluster: Cluster, namespace: str, pod: str) -> str:
    return str(cluster.get("pod", pod, namespace)["spec"].get("nodeName") or "")


def elsewhere(cluster: Cluster, namespace: str, hot: str) -> str | None:
    """The run's pod's node, once it is another than ``hot``."""
    now = node_of(cluster, namespace, "warm-worker-0")
    return now if now and now != hot else None


def taint_of(cluster: Cluster, node: str) -> dict[str, Any] | None:
    taints = cluster.get("node", node).get("spec", {}).get("taints") or []
    return next((t for t in taints if t["key"] == f"{G}/reclaim"), None)


def events_about(cluster: Cluster, namespace: str, name: str) -> dict[str, str]:
    items = json.loads(cluster.kubectl("get", "events", "-n", namespace, "-o", "json"))["items"]
    return {e["reason"]: e["message"] for e in items if e["involvedObject"]["name"] == name}


def test_a_node_predicted_hot_is_tainted_its_run_saves_and_moves_and_the_taint_goes_once_cool(
    cluster: Cluster, namespace: str, bucket: str, exporter: Exporter
) -> None:
    trainer = running(cluster, namespace, one_gpu_node_run("warm", bucket, {CLIQUE: WATCHED}))
    hot = eventually(lambda: node_of(cluster, namespace, "warm-worker-0"), what="the pod on a node")
    beat = beat_as(cluster, namespace, "warm-worker-0")
    beat.send(1, step=10)
    beat.send(1, step=20)

    exporter.play(hot, [60.0 + 4 * i for i in range(12)] + [104.0])  # a thermal ramp, 4 °C a scrape
    taint = eventually(lambda: taint_of(cluster, hot), timeout=60, what="the node to be tainted")
    assert (taint["value"], taint["effect"]) == ("predicted", "NoSchedule")
    prediction = cluster.get("node", hot)["metadata"]["annotations"][f"{G}/prediction"]
    assert prediction.startswith("temperature")
    said = eventually(lambda: events_about(cluster, "default", hot).get("NodePredicted"), what="the node's Event")
    assert f"node {hot} is predicted to degrade: temperature" in said
    assert "NodePredicted" in eventually(lambda: events_about(cluster, namespace, "warm") or None, what="run Event")
    assert cluster.metric("quota", "quota_proactive_predictions_total", {"signal": "temperature"}) >= 1

    # The run saves first: the quota holds the move, the checkpoint controller asks the rank.
    asked = eventually(lambda: save_request(cluster, namespace, "warm", "Requested"), what="a save request")
    assert (asked["reason"], asked["step"]) == ("NodePredicted", 40)
    renegotiation = cluster.get("trainer", "warm", namespace)["status"]["quota"]["renegotiation"]
    assert renegotiation["reason"] == "NodePredicted"
    assert f"node {hot} is predicted to degrade (temperature" in renegotiation["message"]
    beat.send(1, step=30)
    assert beat.save_requested(40)
    as_pod(cluster, namespace, trainer).save(b"state at step 40", step=40, epoch=1)
    eventually(lambda: save_request(cluster, namespace, "warm", "Committed"), what="the save committed")
    moved = eventually(lambda: elsewhere(cluster, namespace, hot), what="the run to move off")
    assert cluster.get("node", moved)["metadata"]["labels"][CLIQUE] == WATCHED

    exporter.play(hot, [60.0])  # cool again: cleared after five cool evaluations
    eventually(lambda: taint_of(cluster, hot) is None, timeout=60, what="the taint to go")
    assert "reads cool again" in eventually(
        lambda: events_about(cluster, "default", hot).get("NodeCleared"), what="the node's Event"
    )
    assert f"{G}/prediction" not in (cluster.get("node", hot)["metadata"].get("annotations") or {})


def test_a_prometheus_servers_query_api_is_read_instead_of_each_nodes_exporters(
    cluster: Cluster, through_prometheus: Exporter
) -> None:
    hot = "kwok-gpu-13"
    through_prometheus.play(hot, [60.0 + 4 * i for i in range(12)] + [104.0])  # a thermal ramp, 4 °C a scrape
    taint = eventually(lambda: taint_of(cluster, hot), timeout=90, what="the node to be tainted")
    assert (taint["value"], taint["effect"]) == ("predicted", "NoSchedule")
    assert cluster.get("node", hot)["metadata"]["annotations"][f"{G}/prediction"].startswith("temperature")
    assert all(taint_of(cluster, f"kwok-gpu-{i}") is None for i in (12, 14, 15))  # they read 60 °C
    through_prometheus.play(hot, [60.0])
    eventually(lambda: taint_of(cluster, hot) is None, timeout=90, what="the taint to go")


def test_the_proactive_component_turns_it_on_for_the_quota_controller(cluster: Cluster, tmp_path: Path) -> None:
    """deploy/components/proactive on the dev overlay: the flag and the right to patch nodes (and
    nothing more), accepted by the API server."""
    overlay, objects = with_component(cluster, tmp_path, "dev", "proactive")
    assert controller_env(objects, "quota")["TRAINEROP_ENABLE_PROACTIVE_SCHEDULING"] == "true"
    (role,) = [o for o in objects if o["kind"] == "ClusterRole" and o["metadata"]["name"].endswith("proactive")]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["patch"]}]
    (binding,) = [
        o for o in objects if o["kind"] == "ClusterRoleBinding" and o["metadata"]["name"].endswith("proactive")
    ]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "trainer-operator-quota", "namespace": "trainer-operator-system"}
    ]
    cluster.kubectl("apply", "--server-side", "--dry-run=server", "--force-conflicts", "-k", str(overlay))

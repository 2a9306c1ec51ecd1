"""The quota controller with the example placement plugin as a real process beside it
(docs/placement-plugins.md): the run goes where the plugin says, status says so; with the plugin
down, the built-in placement and a Warning Event."""

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testbed import images, localdev
from tests.harness import REPO, Cluster, eventually
from trainerop_common.api import API_VERSION

from .test_deploy import by_kind, controller_env, with_component
from .test_quota import GPU, admitted_on, domain_free, events, placed_on, run

CARBON = "example.com/carbon-intensity"
GREEN_NODE = "kwok-gpu-14"  # on-demand, in nvl-7


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def plugin(cluster: Cluster) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """The example plugin on a free port, every on-demand node labelled 800 gCO2/kWh but one at 20,
    and the quota controller asking it; all undone afterwards."""
    port = free_port()
    command = [sys.executable, str(REPO / "examples/placement/carbon_plugin.py"), "--listen", f"127.0.0.1:{port}"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    nodes = [n for n in cluster.names("nodes") if n.startswith("kwok-gpu-") and int(n.rsplit("-", 1)[1]) % 2 == 0]
    try:
        eventually(lambda: listening(port) or None, timeout=30, what="the plugin to listen")
        for node in nodes:
            cluster.kubectl("label", "node", node, f"{CARBON}={20 if node == GREEN_NODE else 800}", "--overwrite")
        localdev.restart("quota", {"TRAINEROP_PLACEMENT_PLUGIN_ADDRESS": f"127.0.0.1:{port}"})
        yield process, port
    finally:
        process.kill()
        process.wait()
        for node in nodes:
            cluster.kubectl("label", "node", node, f"{CARBON}-")
        localdev.restart("quota")


def test_a_run_goes_where_the_plugin_says(
    cluster: Cluster, namespace: str, policy: Any, plugin: tuple[subprocess.Popen[bytes], int]
) -> None:
    process, port = plugin
    policy(budgets={"spot": {GPU: 64}, "onDemand": {GPU: 64}}, preference="OnDemandOnly")
    domain_free(cluster, "nvl-7")
    cluster.apply(run("green", workers=1, gpus=8), namespace)
    q = eventually(lambda: admitted_on(cluster, namespace, "green", "on-demand"), what="the admission")
    assert q["contribution"]["grant"]["placement"] == {"worker": [GREEN_NODE]}
    assert q["placementScore"]["plugin"] == {
        "suggested": 1,
        "followed": 1,
        "reason": f"lowest {CARBON} first: 1 of 1 replicas placed",
    }
    (pod,) = eventually(lambda: placed_on(cluster, namespace, "green", "on-demand", 1), what="the pod on its node")
    assert pod["spec"]["nodeName"] == GREEN_NODE

    process.kill()  # the sidecar is gone: the next run is placed by the controller alone
    process.wait()
    cluster.apply(run("fallback", workers=1, gpus=8), namespace)
    q = eventually(lambda: admitted_on(cluster, namespace, "fallback", "on-demand"), what="the built-in admission")
    failed = q["placementScore"]["plugin"]["failed"]  # UNAVAILABLE, or DEADLINE_EXCEEDED while reconnecting
    assert failed.startswith(f"the placement plugin at 127.0.0.1:{port} answered ")
    warned = [e for e in events(cluster, namespace) if e["reason"] == "PlacementPluginFailed"]
    assert [e["type"] for e in warned] == ["Warning"]
    assert warned[0]["message"].endswith("the built-in placement is used")


def test_a_profile_that_skips_the_plugin_is_placed_without_asking(
    cluster: Cluster, namespace: str, policy: Any, plugin: tuple[subprocess.Popen[bytes], int]
) -> None:
    """A TrainingProfile's placementPlugin: Skip — its runs are placed by the controller alone
    while the plugin is up (the profile controller passes the choice on in status.profile)."""
    policy(budgets={"spot": {GPU: 64}, "onDemand": {GPU: 64}}, preference="OnDemandOnly")
    profile = {"apiVersion": API_VERSION, "kind": "TrainingProfile", "metadata": {"name": "no-plugin"}}
    cluster.apply(profile | {"spec": {"placementPlugin": "Skip"}}, namespace)
    cluster.apply(run("skipped", workers=1, gpus=8, profile="no-plugin"), namespace)
    q = eventually(lambda: admitted_on(cluster, namespace, "skipped", "on-demand"), what="the admission")
    assert "plugin" not in (q.get("placementScore") or {})
    assert cluster.get("trainer", "skipped", namespace)["status"]["profile"]["placementPlugin"] == "Skip"


def test_the_placement_plugin_component_runs_the_example_beside_the_quota_controller(
    cluster: Cluster, tmp_path: Path
) -> None:
    """deploy/components/placement-plugin on the dev overlay: the quota controller asks the sidecar
    at the address the sidecar listens on, and the sidecar is the example image the test bed builds;
    accepted by the API server."""
    overlay, objects = with_component(cluster, tmp_path, "dev", "placement-plugin")
    address = controller_env(objects, "quota")["TRAINEROP_PLACEMENT_PLUGIN_ADDRESS"]
    deployment = by_kind(objects, "Deployment")["trainer-operator-quota"]
    (sidecar,) = [c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "placement-plugin"]
    assert sidecar["args"][sidecar["args"].index("--listen") + 1] == address
    assert f"docker.io/library/{sidecar['image']}" == images.IMAGES["placement-example"].ref
    cluster.kubectl("apply", "--server-side", "--dry-run=server", "--force-conflicts", "-k", str(overlay))

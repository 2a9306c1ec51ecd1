"""Helpers the integration tests share: kubectl against the test cluster, bounded polling."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from tests import api_reads
from trainerop_common.contracts import RUNNER_SERVICE_ACCOUNT

T = TypeVar("T")
REPO = Path(__file__).resolve().parent.parent


class NotYetError(Exception):
    """Raised by a check given to `eventually` to say why it is not there yet: the reason is what a
    timeout reports."""


class KubectlError(Exception):
    def __init__(self, args: tuple[str, ...], stderr: str) -> None:
        super().__init__(f"kubectl {' '.join(args)}: {stderr}")
        self.stderr = stderr


@dataclass(frozen=True)
class Cluster:
    kubeconfig: Path
    kubectl_bin: Path
    metrics_ports: dict[str, int]
    sa_kubeconfigs: dict[str, Path]

    def kubectl(self, *args: str, stdin: str | None = None, as_controller: str | None = None) -> str:
        config = self.sa_kubeconfigs[as_controller] if as_controller else self.kubeconfig
        result = subprocess.run(
            [str(self.kubectl_bin), f"--kubeconfig={config}", *args], input=stdin, capture_output=True, text=True
        )
        if result.returncode != 0:
            raise KubectlError(args, result.stderr.strip())
        return result.stdout

    def get(self, kind: str, name: str, namespace: str | None = None, managed_fields: bool = False) -> dict[str, Any]:
        """What `kubectl get KIND NAME -o json` prints (read without a kubectl process: tests/api_reads.py)."""
        ns = ["-n", namespace] if namespace else []
        flags = ["--show-managed-fields"] if managed_fields else []
        if (read := api_reads.reader(self.kubeconfig)) is not None:
            try:
                return read.get(kind, name, namespace, managed_fields)
            except api_reads.ReadError as err:
                raise KubectlError(("get", kind, name, *ns, "-o", "json", *flags), str(err)) from err
        out: dict[str, Any] = json.loads(self.kubectl("get", kind, name, *ns, "-o", "json", *flags))
        return out

    def names(self, kind: str, namespace: str | None = None) -> set[str]:
        """Names of the objects of ``kind`` that exist now (exact names, never a substring match)."""
        ns = ["-n", namespace] if namespace else []
        if (read := api_reads.reader(self.kubeconfig)) is not None:
            try:
                return read.names(kind, namespace)
            except api_reads.ReadError as err:
                raise KubectlError(("get", kind, *ns, "-o", "name"), str(err)) from err
        return {line.rpartition("/")[2] for line in self.kubectl("get", kind, *ns, "-o", "name").split()}

    def apply(self, manifest: dict[str, Any] | str, namespace: str | None = None) -> None:
        text = manifest if isinstance(manifest, str) else json.dumps(manifest)
        ns = ["-n", namespace] if namespace else []
        self.kubectl("apply", *ns, "-f", "-", stdin=text)

    def pod_token(self, namespace: str, pod: str, account: str = RUNNER_SERVICE_ACCOUNT) -> str:
        """A token of ``account`` bound to ``pod``, as the kubelet mounts one into it (the API
        server then knows the pod: authentication.kubernetes.io/pod-name)."""
        uid = self.get("pod", pod, namespace)["metadata"]["uid"]
        bound = ("--bound-object-kind", "Pod", "--bound-object-name", pod, "--bound-object-uid", uid)
        return self.kubectl("create", "token", account, "-n", namespace, *bound).strip()

    def metric(self, controller: str, name: str, labels: dict[str, str], timeout: float = 5) -> float:
        """Current value of one sample on a controller's /metrics (0 when absent)."""
        return read_metric(self.metrics_ports[controller], name, labels, timeout)


def metric_families(port: int, timeout: float = 5, host: str = "127.0.0.1") -> list[Metric]:
    """What the /metrics endpoint at ``host``:``port`` exposes, parsed by prometheus_client's own parser."""
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=timeout) as response:
        return list(text_string_to_metric_families(response.read().decode()))


def exposed_names(families: list[Metric]) -> set[str]:
    """The metrics' names as they are registered (a counter's with its _total)."""
    return {f.name + "_total" if f.type == "counter" else f.name for f in families}


def read_metric(port: int, name: str, labels: dict[str, str], timeout: float = 5, host: str = "127.0.0.1") -> float:
    """Current value of one sample on the /metrics endpoint at ``host``:``port`` (0 when absent)."""
    for family in metric_families(port, timeout, host):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    return 0.0


def table(text: str) -> list[dict[str, str]]:
    """Rows of `kubectl get` output keyed by column header (empty cells are "")."""
    lines = text.splitlines()
    header = lines[0]
    starts = [i for i, ch in enumerate(header) if ch != " " and (i == 0 or header[i - 1] == " ")]
    bounds = list(zip(starts, [*starts[1:], None], strict=True))
    names = [header[a:b].strip() for a, b in bounds]
    return [{n: line[a:b].strip() for n, (a, b) in zip(names, bounds, strict=True)} for line in lines[1:]]


def eventually(check: Callable[[], T | None], timeout: float = 60, what: str = "condition") -> T:
    """Poll ``check`` until it returns something truthy; fail with the last value after ``timeout``.

    A bound on waiting for the cluster to converge, not an assertion about speed.
    """
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            value = check()
        except (KubectlError, KeyError, IndexError, NotYetError) as err:
            last = err
        else:
            if value:
                return value
            last = value
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last: {last!r}")


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    """The condition of that type, or {} (falsy) when the object has none yet."""
    for cond in obj.get("status", {}).get("conditions", []):
        if cond["type"] == type_:
            return dict(cond)
    return {}


def dry_run_pod(cluster: Cluster, name: str, namespace: str, spec: dict[str, Any]) -> tuple[int, str]:
    """A pod of ``spec`` created with --dry-run=server: the API server's admission (PodSecurity
    included) judges it; (exit code, everything kubectl printed)."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace}, "spec": spec}
    result = subprocess.run(
        [str(cluster.kubectl_bin), f"--kubeconfig={cluster.kubeconfig}", "create", "--dry-run=server", "-f", "-"],
        input=json.dumps(pod),
        capture_output=True,
        text=True,
    )
    return result.returncode, result.stdout + result.stderr

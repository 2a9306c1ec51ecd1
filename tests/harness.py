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

T = TypeVar("T")
REPO = Path(__file__).resolve().parent.parent


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
        ns = ["-n", namespace] if namespace else []
        flags = ["--show-managed-fields"] if managed_fields else []
        out: dict[str, Any] = json.loads(self.kubectl("get", kind, name, *ns, "-o", "json", *flags))
        return out

    def names(self, kind: str, namespace: str | None = None) -> set[str]:
        """Names of the objects of ``kind`` that exist now (exact names, never a substring match)."""
        ns = ["-n", namespace] if namespace else []
        return {line.rpartition("/")[2] for line in self.kubectl("get", kind, *ns, "-o", "name").split()}

    def apply(self, manifest: dict[str, Any] | str, namespace: str | None = None) -> None:
        text = manifest if isinstance(manifest, str) else json.dumps(manifest)
        ns = ["-n", namespace] if namespace else []
        self.kubectl("apply", *ns, "-f", "-", stdin=text)

    def metric(self, controller: str, name: str, labels: dict[str, str], timeout: float = 5) -> float:
        """Current value of one sample on a controller's /metrics (0 when absent)."""
        return read_metric(self.metrics_ports[controller], name, labels, timeout)


def read_metric(port: int, name: str, labels: dict[str, str], timeout: float = 5) -> float:
    """Current value of one sample on the /metrics endpoint at ``port`` (0 when absent)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as response:
        text = response.read().decode()
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if not labels and line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
        if line.startswith(name + "{"):
            label_text = line[len(name) + 1 : line.index("}")]
            if ",".join(sorted(label_text.split(","))) == want:
                return float(line.rsplit(" ", 1)[1])
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
        except (KubectlError, KeyError, IndexError) as err:
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


def trainer_manifest(name: str, **spec: Any) -> dict[str, Any]:
    """A Trainer of one epoch of busybox, with ``spec`` fields added or replaced."""
    return {
        "apiVersion": "trainer.operator.kubeflow.org/v1alpha1",
        "kind": "Trainer",
        "metadata": {"name": name},
        "spec": {"epochs": 1, "image": "busybox:1.36", **spec},
    }


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

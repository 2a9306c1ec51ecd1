"""The real node's containerd, as the node (which runs it) and the images (pulled by it) reach
it: the node's state directory, containerd's socket and registry hosts in it, and `ctr` on that
socket."""

from __future__ import annotations

import subprocess
from pathlib import Path

from testbed import cluster


def node_dir() -> Path:
    """The real node's state: containerd's root, state and socket, the kubelet's, logs and pids."""
    path = cluster.RUN_DIR / "node"
    for sub in ("logs", "pids"):
        (path / sub).mkdir(parents=True, exist_ok=True)
    return path


def image_store() -> Path:
    """containerd's root — its images, content and snapshots — kept across clusters in the cache
    (``cluster down`` removes the run directory): a fresh node pulled the PyTorch and TensorFlow
    images' 5 GB again every session. Pods' containers in it are removed by ``node up`` and ``down``;
    a pull by name still takes a new build of the same tag (only missing layers are fetched)."""
    return cluster.CACHE_ROOT / "node-containerd"


def socket(run: Path) -> Path:
    return run / "containerd" / "containerd.sock"


def hosts_dir(run: Path) -> Path:
    """containerd's registry hosts configuration (``config_path``: testbed/registry.py writes it)."""
    return run / "certs.d"


def serving(run: Path) -> bool:
    """containerd answers on its socket."""
    return (
        socket(run).exists()
        and subprocess.run(["ctr", "--address", str(socket(run)), "version"], capture_output=True).returncode == 0
    )


def ctr_argv(run: Path, *args: str) -> list[str]:
    return ["ctr", "--address", str(socket(run)), "-n", "k8s.io", *args]


def ctr(run: Path, *args: str) -> str:
    result = subprocess.run(ctr_argv(run, *args), capture_output=True, text=True)
    if result.returncode != 0:
        raise cluster.ClusterError(f"ctr {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout

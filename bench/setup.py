"""What every benchmark needs: a cluster (the one in $KUBECONFIG, else the local one, started and
stopped here) with the operator installed and its controllers running."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from testbed import cluster as cluster_tool
from testbed import localdev
from tests.harness import Cluster, eventually

FAILED_RUN_LOGS = cluster_tool.RUN_DIR.parent / "failed-run-logs"


def keep_logs() -> None:
    """The logs of every process of a run that failed (the cluster's and the controllers'), copied
    out of the run directory that taking the cluster down removes."""
    shutil.rmtree(FAILED_RUN_LOGS, ignore_errors=True)
    for logs in (cluster_tool.RUN_DIR / "logs", localdev.state_dir() / "logs"):
        if logs.is_dir():
            shutil.copytree(logs, FAILED_RUN_LOGS / logs.parent.name, dirs_exist_ok=True)
    print(f"the run failed: its logs are in {FAILED_RUN_LOGS}", file=sys.stderr, flush=True)


@contextmanager
def operator_running(extra_env: dict[str, str] | None = None) -> Iterator[Cluster]:
    started = False
    if not os.environ.get("KUBECONFIG"):
        t0 = time.monotonic()
        if cluster_tool.main(["up"]) != 0:
            raise SystemExit("the local cluster did not come up")
        print(f"cluster_up_seconds {time.monotonic() - t0:.1f}")
        os.environ["KUBECONFIG"] = str(cluster_tool.RUN_DIR / "admin.kubeconfig")
        started = True
    t0 = time.monotonic()
    localdev.install()
    ports = localdev.start(extra_env=extra_env)
    print(f"operator_install_and_start_seconds {time.monotonic() - t0:.1f}")
    state = localdev.state_dir()
    try:
        yield Cluster(
            kubeconfig=localdev.admin_kubeconfig(),
            kubectl_bin=cluster_tool.bin_dir() / "kubectl",
            metrics_ports=ports,
            sa_kubeconfigs={name: state / f"{name}.kubeconfig" for name in localdev.CONTROLLERS},
        )
    except BaseException:
        if started:  # the cluster goes with its logs: keep them to find out why
            keep_logs()
        raise
    finally:
        localdev.stop()
        if started:
            cluster_tool.main(["down"])
            os.environ.pop("KUBECONFIG", None)


@contextmanager
def scratch_namespace(c: Cluster, prefix: str = "bench", delete: bool = True) -> Iterator[str]:
    """A namespace for one measurement, deleted afterwards (``delete=False``: left for the cluster's
    own teardown, when deleting thousands of pods would load the next measurement)."""
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    c.kubectl("create", "namespace", name)
    tolerations = [f"{k}={v}" for k, v in cluster_tool.DEFAULT_TOLERATIONS.items()]
    c.kubectl("annotate", "namespace", name, *tolerations)
    c.apply({"apiVersion": "v1", "kind": "List", "items": cluster_tool.checkpoint_volume(name)})
    try:
        yield name
    finally:
        if delete:
            c.kubectl("delete", "namespace", name, "--wait=false")
            c.kubectl("delete", "persistentvolume", f"{name}-pvc-backups", "--wait=false")


def gone(c: Cluster, namespace: str) -> None:
    """Wait for a namespace's deletion before the next measurement: each phase starts on a cluster
    that has settled, without the objects of the one before."""
    eventually(lambda: namespace not in c.names("namespaces"), timeout=1800, what=f"namespace {namespace} to go")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def run_with_trainers(
    doc: str | None, run: Callable[[Cluster, str, int], None], default: int, nodes_per_trainer: int = 0
) -> int:
    """The main of a benchmark that takes ``--trainers N`` and runs in a scratch namespace.
    ``nodes_per_trainer``: the fake GPU nodes one Trainer's pods fill, so that a local cluster
    started here fits all N at once (all-or-nothing admission holds the runs that do not fit)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0] if doc else None)
    parser.add_argument("--trainers", type=int, default=default)
    args = parser.parse_args()
    cluster_tool.FAKE_NODES = max(cluster_tool.FAKE_NODES, nodes_per_trainer * args.trainers)
    with operator_running() as c, scratch_namespace(c) as namespace:
        run(c, namespace, args.trainers)
    return 0

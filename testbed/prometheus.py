#!/usr/bin/env python3
"""A Prometheus server for the integration tests: built from its Go module, run as a local process.

    python -m testbed.prometheus build   # build it once into the cache; print its path

The server (`github.com/prometheus/prometheus/cmd/prometheus`) is installed with `go install`
from the module the Go proxy serves, once per version, into
~/.cache/trainer-operator/prometheus-<version> (its web UI's assets are not built in: the tests
use its HTTP API only). :func:`start` runs it with a configuration that scrapes the given targets
every second, each with its own metrics path and labels (as a ServiceMonitor's relabelling would
give them), and a data directory of the run's.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from testbed import cluster, gomodule

VERSION = "v0.316.0"  # the module version of Prometheus 3.16
MODULE = "github.com/prometheus/prometheus"
BINARY = "prometheus"
PORT = cluster.PORT_BASE + 45
URL = f"http://127.0.0.1:{PORT}"


def binary() -> Path:
    """The Prometheus server, installed once into the cache (a few minutes on 2 cores the first
    time). Built without the service discoveries of clouds and platforms (Prometheus's own
    ``remove_all_sd`` tag): the tests' targets are static, and the discoveries' SDKs were most of
    the build."""
    target = cluster.CACHE_ROOT / f"prometheus-{VERSION}-static-sd"
    return gomodule.installed(
        f"Prometheus {VERSION}",
        "python -m testbed.prometheus build",
        f"{MODULE}/cmd/prometheus@{VERSION}",
        target,
        BINARY,
        tags="remove_all_sd",
    )


def configuration(targets: Sequence[tuple[str, str, Mapping[str, str]]]) -> dict[str, Any]:
    """Scrape every second each (address, metrics path, labels) target."""
    static = [
        {"targets": [address], "labels": {"__metrics_path__": path, **labels}} for address, path, labels in targets
    ]
    return {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [{"job_name": "exporters", "static_configs": static}],
    }


def start(run: Path, targets: Sequence[tuple[str, str, Mapping[str, str]]]) -> str:
    """The server scraping ``targets``, with fresh data; its URL."""
    built = binary()
    home = run / "prometheus"
    shutil.rmtree(home, ignore_errors=True)
    (home / "data").mkdir(parents=True)
    config = home / "prometheus.yml"
    config.write_text(yaml.safe_dump(configuration(targets)))
    argv = [
        str(built),
        f"--config.file={config}",
        f"--storage.tsdb.path={home / 'data'}",
        f"--web.listen-address=127.0.0.1:{PORT}",
    ]
    cluster.start(run, cluster.Component("prometheus", argv, lambda: cluster.http_ok(f"{URL}/-/ready"), timeout=60))
    return URL


def stop(run: Path) -> None:
    cluster.stop_processes(run, ["prometheus"])


def main(argv: list[str] | None = None) -> int:
    description = __doc__.splitlines()[0] if __doc__ else ""
    return gomodule.main(argv, description, "the Prometheus server", binary, lambda: [])


if __name__ == "__main__":
    sys.exit(main())

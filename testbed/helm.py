#!/usr/bin/env python3
"""Helm, built from its Go module: the release's chart (hack/release.py) is tested by installing,
upgrading and uninstalling it on a bare cluster (tests/quickstart/test_helm.py).

    python -m testbed.helm build   # build it once into the cache; print its path
"""

from __future__ import annotations

import sys
from pathlib import Path

from testbed import cluster, gomodule

VERSION = "v4.3.2"
MODULE = "helm.sh/helm/v4"


def binary() -> Path:
    """helm, installed once into the cache (a few minutes on 2 cores the first time)."""
    return gomodule.installed(
        f"Helm {VERSION}",
        "python -m testbed.helm build",
        f"{MODULE}/cmd/helm@{VERSION}",
        cluster.CACHE_ROOT / f"helm-{VERSION}",
        "helm",
    )


def main(argv: list[str] | None = None) -> int:
    description = __doc__.splitlines()[0] if __doc__ else ""
    return gomodule.main(argv, description, "Helm", binary, lambda: [])


if __name__ == "__main__":
    sys.exit(main())

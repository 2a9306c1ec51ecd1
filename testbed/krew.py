#!/usr/bin/env python3
"""krew, the kubectl plugin manager, built from its Go module: the release's `kubectl trainer`
is tested by installing it with krew from the release's archive and manifest.

    python -m testbed.krew build   # build it once into the cache; print its path
"""

from __future__ import annotations

import sys
from pathlib import Path

from testbed import cluster, gomodule

VERSION = "v0.4.3"  # the only version the Go module proxy serves here
MODULE = "sigs.k8s.io/krew"


def binary() -> Path:
    """krew, installed once into the cache (about a minute on 2 cores the first time)."""
    return gomodule.installed(
        f"krew {VERSION}",
        "python -m testbed.krew build",
        f"{MODULE}/cmd/krew@{VERSION}",
        cluster.CACHE_ROOT / f"krew-{VERSION}",
        "krew",
    )


def main(argv: list[str] | None = None) -> int:
    description = __doc__.splitlines()[0] if __doc__ else ""
    return gomodule.main(argv, description, "krew", binary, lambda: [])


if __name__ == "__main__":
    sys.exit(main())

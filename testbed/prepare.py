#!/usr/bin/env python3
"""Build everything the test tiers need into the cache, in the order the tiers need it, and say
how long each build took:

    python -m testbed.prepare            # all of it (a cold machine: about 35 minutes on 2 cores)
    python -m testbed.prepare --list     # the steps, and whether each is in the cache already

Every step is also built on first use by whatever needs it (the cluster, a test's fixture, the
node), under a lock (cluster.build_lock): CI runs this in the background while lint, type and
unit run, and a test that needs a build still under way waits for it instead of building it
twice. A warm cache makes every step a quick check.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from testbed import (
    certmanager,
    cluster,
    cosign,
    helm,
    images,
    kind,
    krew,
    kubescore,
    kueue,
    netpol,
    node,
    prometheus,
    registry,
    versions,
)


@dataclass(frozen=True)
class Step:
    name: str
    needed_by: str
    build: Callable[[], object]


def _image(name: str) -> Callable[[], object]:
    return lambda: images.build(name)


def _kubernetes(version: str) -> Callable[[], object]:
    return lambda: versions.build(version)


# The lint tier uses the first two (kubectl renders the overlays kube-score checks); the
# integration tests use the first and the next five in about this order (test files run
# alphabetically); the e2e tests use the next ones; the versions tier the last two (after the
# integration tier; it builds them itself when they are not ready yet, under the same lock).
STEPS = (
    Step("kubernetes", "every cluster (Kubernetes, etcd, kwok, SeaweedFS); lint's kubectl", cluster.ensure_binaries),
    Step("kube-score", "lint: python -m testbed.kubescore check", kubescore.binary),
    Step("cert-manager", "integration test_cert_manager", certmanager.binary),
    Step("registry", "integration test_image_verification, test_signing; the real node", registry.binary),
    Step("cosign", "integration test_image_verification, test_signing; e2e", cosign.binary),
    Step("kueue", "integration test_kueue", kueue.binary),
    Step("krew", "integration test_release", krew.binary),
    Step("prometheus", "integration test_proactive", prometheus.binary),
    Step("coredns", "e2e: the real node", node.coredns_binary),
    Step("kube-proxy", "e2e: the real node", node.kube_proxy_binary),
    *(Step(f"image {name}", "e2e", _image(name)) for name in images.IMAGES),
    Step("kube-router", "attack: test_network (NetworkPolicies enforced on the real node)", netpol.binary),
    Step("helm", "quickstart: test_helm", helm.binary),
    *(Step(f"kubernetes {v}", "versions: the smoke subset on this minor", _kubernetes(v)) for v in versions.VERSIONS),
    Step("kind", "quickstart: test_kind (kind, kubeadm, the node image; needs podman)", kind.build),
)


def run(steps: tuple[Step, ...], durations: Path | None = None) -> int:
    """Build each step; a table of how long each took (also written to ``durations``). The first
    failure ends it (exit 1)."""
    took: list[tuple[str, float]] = []
    status = 0
    for step in steps:
        cluster.say(f"prepare: {step.name} (for {step.needed_by})")
        started = time.monotonic()
        try:
            step.build()
        except (cluster.ClusterError, subprocess.CalledProcessError, OSError) as err:
            print(f"error: prepare: {step.name} failed: {err}", file=sys.stderr)
            status = 1
            break
        finally:
            took.append((step.name, time.monotonic() - started))
    report = "\n".join(
        ["builds (python -m testbed.prepare), in order, and how long each took:"]
        + [f"  {seconds:8.1f} s  {name}" for name, seconds in took]
        + [f"  {sum(s for _, s in took):8.1f} s  in all"]
    )
    print(report)
    if durations:
        durations.write_text(report + "\n")
    return status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--list", action="store_true", help="list the steps and what needs each")
    parser.add_argument("--durations", type=Path, help="also write the table of durations here")
    args = parser.parse_args(argv)
    if args.list:
        for step in STEPS:
            print(f"{step.name:28} {step.needed_by}")
        return 0
    return run(STEPS, args.durations)


if __name__ == "__main__":
    sys.exit(main())

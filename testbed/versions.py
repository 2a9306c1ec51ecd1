#!/usr/bin/env python3
"""The oldest and the newest Kubernetes minor the operator supports, each tested with the
integration tier's smoke subset (the tests marked `smoke`) on a local cluster of that version.

    python -m testbed.versions build             # both versions' control planes and kubectl (cached)
    python -m testbed.versions smoke [ARGS...]   # the smoke subset on each (ARGS go to pytest)

Each version is built from the Go module proxy by hack/build-k8s.sh (TRAINER_OPERATOR_K8S_VERSION,
the modules in hack/k8s-versions); etcd and kwok are the test bed's own. The clusters are the
integration tier's (testbed.cluster), one at a time.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys

from testbed import cluster

OLDEST = "v1.30.14"  # the admission policies (v1) and webhook match conditions the operator installs are GA in 1.30
NEWEST = "v1.37.2"
# The oldest minor the operator supports is the oldest tested (the Helm chart's kubeVersion, the demo's check).
MINIMUM_MINOR = (int(OLDEST[1:].split(".")[0]), int(OLDEST.split(".")[1]))
MINIMUM = f"{MINIMUM_MINOR[0]}.{MINIMUM_MINOR[1]}"
VERSIONS = (OLDEST, NEWEST)
VERSION_VARIABLE = "TRAINER_OPERATOR_K8S_VERSION"


def selected() -> str:
    """The Kubernetes version the test bed's clusters run: TRAINER_OPERATOR_K8S_VERSION, or the
    test bed's own (hack/lib/common.sh, K8S_DEFAULT_VERSION)."""
    common = (cluster.REPO / "hack" / "lib" / "common.sh").read_text()
    default = re.search(r"^K8S_DEFAULT_VERSION=(\S+)$", common, re.MULTILINE)
    if not default:
        raise cluster.ClusterError("hack/lib/common.sh names no K8S_DEFAULT_VERSION")
    return os.environ.get(VERSION_VARIABLE) or default.group(1)


def environment(version: str) -> dict[str, str]:
    """The environment in which the test bed's clusters run ``version``."""
    return {**os.environ, VERSION_VARIABLE: version, "TRAINER_OPERATOR_BIN": ""}


def build(version: str) -> None:
    """``version``'s binaries, once (hack/build-k8s.sh prints its progress)."""
    subprocess.run([str(cluster.BUILD_SCRIPT)], env=environment(version), check=True)


def smoke(version: str, pytest_args: list[str]) -> int:
    """The smoke subset on a cluster of ``version``: pytest's exit status."""
    cluster.say(f"the integration tier's smoke subset on Kubernetes {version}")
    build(version)
    argv = [sys.executable, "-m", "pytest", "tests/integration", "-m", "smoke", "-n", "0", "-p", "no:cacheprovider"]
    return subprocess.run([*argv, *pytest_args], cwd=cluster.REPO, env=environment(version)).returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("command", choices=["build", "smoke"])
    parser.add_argument("pytest_args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    failed = []
    for version in VERSIONS:
        if args.command == "build":
            build(version)
        elif smoke(version, args.pytest_args) != 0:
            failed.append(version)
    if failed:
        cluster.say(f"the smoke subset failed on Kubernetes {', '.join(failed)}: see the tests' messages above")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

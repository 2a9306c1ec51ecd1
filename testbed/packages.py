"""The Debian packages the real node and its images need on this machine: containerd, runc and
the CNI plugins run the node's pods, busybox-static is its busybox image, buildah and debootstrap
build the images, iptables and ipset hold the NetworkPolicies testbed/netpol.py enforces. Apart
from those, KIND_PACKAGES: podman runs kind's node (testbed/kind.py), which CI tests. The
standard library only, so set-up asks it before anything else is installed:

    python3 -m testbed.packages            # every package, on one line
    python3 -m testbed.packages --missing  # those this machine lacks (`testbed.node up` refuses to start without them)

hack/demo.sh installs what is missing; .ci/run keeps a copy of the list (a unit test holds the two equal).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

# What each package provides that the node or an image build runs -> the package.
PACKAGES = {
    "containerd": "containerd",
    "runc": "runc",
    "buildah": "buildah",
    "busybox": "busybox-static",
    "/usr/lib/cni/bridge": "containernetworking-plugins",
    "debootstrap": "debootstrap",  # the Debian base of the controllers' and the example's images
    "/usr/sbin/iptables-save": "iptables",  # kube-proxy's Services, kube-router's NetworkPolicies
    "/usr/sbin/ipset": "ipset",  # kube-router's sets of pods and address blocks
}
KIND_PACKAGES = {"podman": "podman"}  # kind's provider here (no Docker engine)


def missing() -> list[str]:
    """The packages whose command (or file) this machine lacks."""
    return sorted({pkg for tool, pkg in PACKAGES.items() if not (Path(tool).exists() or shutil.which(tool))})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--missing", action="store_true", help="only the packages this machine lacks")
    args = parser.parse_args(argv)
    print(" ".join(missing() if args.missing else sorted(set(PACKAGES.values()))))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""cert-manager for the integration tests: its controllers and CA injector as one local binary.

    python -m testbed.certmanager build   # build it once into the cache; print its path
    python -m testbed.certmanager crds    # print the paths of its cert-manager.io CRD YAMLs

testbed/cert-manager/main.go runs cert-manager's controllers for Issuers, ClusterIssuers,
Certificates and the SelfSigned and CA signers, and its CA injector, out of cluster against a
kubeconfig (`cert-manager-local --kubeconfig FILE`); it is built from the
github.com/cert-manager/cert-manager Go module (the proxy serves it; its cmd/ modules are not
there), once per version and source, into ~/.cache/trainer-operator/cert-manager-<version>-<hash>.
The CRDs come from the same module's download directory and must be applied (and established)
before the binary starts.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

from testbed import cluster, gomodule

VERSION = "v1.21.2"
MODULE = "github.com/cert-manager/cert-manager"
SOURCE = Path(__file__).resolve().parent / "cert-manager"
SOURCE_FILES = ("go.mod", "go.sum", "main.go")
BINARY = "cert-manager-local"
# The cert-manager.io CRDs the controllers watch (the acme.cert-manager.io ones are not needed).
CRDS = ("certificates", "certificaterequests", "issuers", "clusterissuers")


def go() -> str:
    return gomodule.go(f"cert-manager {VERSION}", "python -m testbed.certmanager build")


def source_hash() -> str:
    """A short hash of testbed/cert-manager's go.mod, go.sum and main.go: a new one builds anew."""
    digest = hashlib.sha256()
    for name in SOURCE_FILES:
        digest.update(name.encode() + b"\0" + (SOURCE / name).read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def binary() -> Path:
    """cert-manager-local, built once into the cache (several minutes on 2 cores the first time)."""
    target = cluster.CACHE_ROOT / f"cert-manager-{VERSION}-{source_hash()}"
    return cluster.built_once(target / BINARY, lambda: _build(target))


def _build(target: Path) -> None:
    built = target / BINARY
    if f"{MODULE} {VERSION}" not in (SOURCE / "go.mod").read_text():
        raise cluster.ClusterError(f"{SOURCE / 'go.mod'} does not require {MODULE} {VERSION} (VERSION here)")
    go_command = go()
    cluster.say(f"building cert-manager {VERSION} from its Go module (once; several minutes)")
    started = time.monotonic()
    target.mkdir(parents=True, exist_ok=True)
    partial = target / f".{BINARY}.{os.getpid()}.tmp"  # renamed when complete
    ldflags = f"-s -w -X {MODULE}/pkg/util.AppVersion={VERSION}"  # its User-Agent's version
    result = subprocess.run(
        [go_command, "build", "-trimpath", "-ldflags", ldflags, "-o", str(partial), "."],
        cwd=SOURCE,
        env=gomodule.go_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    if result.returncode != 0:
        partial.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            target.rmdir()  # if empty
        tail = "\n".join(result.stdout.strip().splitlines()[-30:])
        raise cluster.ClusterError(
            f"building cert-manager {VERSION} failed (go build in {SOURCE}, exit {result.returncode}):\n{tail}\n"
            "Check that the Go module proxy is reachable (GOPROXY) and that testbed/cert-manager builds "
            "(cd testbed/cert-manager && go build .), then run `python -m testbed.certmanager build` again."
        )
    partial.rename(built)
    elapsed = int(time.monotonic() - started)
    cluster.say(f"built {built} in {elapsed // 60}m{elapsed % 60:02d}s")


def module_dir() -> Path:
    """The cert-manager module's directory in the Go module cache (downloaded if missing)."""
    return gomodule.module_dir(go(), MODULE, VERSION, cwd=SOURCE)


def crd_files() -> list[Path]:
    """The cert-manager.io CRD YAMLs (Certificates, CertificateRequests, Issuers, ClusterIssuers)."""
    crds = module_dir() / "deploy" / "crds"
    files = [crds / f"cert-manager.io_{name}.yaml" for name in CRDS]
    missing = [str(file) for file in files if not file.exists()]
    if missing:
        raise cluster.ClusterError(f"cert-manager {VERSION} has no {', '.join(missing)}")
    return files


HEALTH_PORT = cluster.PORT_BASE + 38
PROCESS = "cert-manager"


def start(kubeconfig: Path, run: Path) -> None:
    """Apply the CRDs (established first) and run cert-manager against ``kubeconfig`` as a local
    process of the run directory ``run`` (stop it with :func:`stop`)."""

    def kubectl(*args: str) -> None:
        done = subprocess.run(
            [str(cluster.bin_dir() / "kubectl"), f"--kubeconfig={kubeconfig}", *args], text=True, capture_output=True
        )
        if done.returncode != 0:
            raise cluster.ClusterError(f"kubectl {' '.join(args)} failed: {done.stderr.strip()}")

    for crd in crd_files():
        kubectl("apply", "--server-side", "-f", str(crd))
    kubectl("wait", "--for=condition=Established", "--timeout=60s", *[f"crd/{c}.cert-manager.io" for c in CRDS])
    component = cluster.Component(
        PROCESS,
        [str(binary()), f"--kubeconfig={kubeconfig}", f"--health-address=127.0.0.1:{HEALTH_PORT}"],
        lambda: cluster.http_ok(f"http://127.0.0.1:{HEALTH_PORT}/readyz"),
        timeout=90,
    )
    cluster.start(run, component)


def stop(run: Path) -> None:
    cluster.stop_processes(run, [PROCESS])


def main(argv: list[str] | None = None) -> int:
    description = __doc__.splitlines()[0] if __doc__ else ""
    return gomodule.main(argv, description, "cert-manager-local", binary, crd_files)


if __name__ == "__main__":
    sys.exit(main())

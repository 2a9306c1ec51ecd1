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

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from testbed import cluster

VERSION = "v1.21.2"
MODULE = "github.com/cert-manager/cert-manager"
SOURCE = Path(__file__).resolve().parent / "cert-manager"
SOURCE_FILES = ("go.mod", "go.sum", "main.go")
BINARY = "cert-manager-local"
# The cert-manager.io CRDs the controllers watch (the acme.cert-manager.io ones are not needed).
CRDS = ("certificates", "certificaterequests", "issuers", "clusterissuers")


def go() -> str:
    """The go command: on PATH, else the official tarball's place."""
    found = shutil.which("go") or ("/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else None)
    if not found:
        raise cluster.ClusterError(
            f"cert-manager {VERSION} is built from its Go module and Go is not installed: install Go 1.26 or newer "
            "(https://go.dev/dl/, into /usr/local/go or on PATH) and run `python -m testbed.certmanager build` again"
        )
    return found


def go_env() -> dict[str, str]:
    return {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=mod -buildvcs=false", "CGO_ENABLED": "0"}


def source_hash() -> str:
    """A short hash of testbed/cert-manager's go.mod, go.sum and main.go: a new one builds anew."""
    digest = hashlib.sha256()
    for name in SOURCE_FILES:
        digest.update(name.encode() + b"\0" + (SOURCE / name).read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def binary() -> Path:
    """cert-manager-local, built once into the cache (several minutes on 2 cores the first time)."""
    target = cluster.CACHE_ROOT / f"cert-manager-{VERSION}-{source_hash()}"
    built = target / BINARY
    if built.exists():
        return built
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
        env=go_env(),
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
    return built


def module_dir() -> Path:
    """The cert-manager module's directory in the Go module cache (downloaded if missing)."""
    result = subprocess.run(
        [go(), "mod", "download", "-json", f"{MODULE}@{VERSION}"],
        cwd=SOURCE,
        env=go_env(),
        capture_output=True,
        text=True,
    )
    info = json.loads(result.stdout or "{}")
    if result.returncode != 0 or not info.get("Dir"):
        raise cluster.ClusterError(
            f"go mod download {MODULE}@{VERSION} failed: {info.get('Error') or result.stderr.strip()}"
        )
    return Path(info["Dir"])


def crd_files() -> list[Path]:
    """The cert-manager.io CRD YAMLs (Certificates, CertificateRequests, Issuers, ClusterIssuers)."""
    crds = module_dir() / "deploy" / "crds"
    files = [crds / f"cert-manager.io_{name}.yaml" for name in CRDS]
    missing = [str(file) for file in files if not file.exists()]
    if missing:
        raise cluster.ClusterError(f"cert-manager {VERSION} has no {', '.join(missing)}")
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("build", help="build cert-manager-local once into the cache; print its path")
    commands.add_parser("crds", help="print the paths of the cert-manager.io CRD YAMLs")
    args = parser.parse_args(argv)
    try:
        with contextlib.redirect_stdout(sys.stderr):  # progress to stderr; only the paths to stdout
            paths = [binary()] if args.command == "build" else crd_files()
    except (cluster.ClusterError, subprocess.CalledProcessError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    for path in paths:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""cosign, built from its Go module, signing images of the local registry with a key pair
(docs/design/trusted-artifacts.md, decision 2).

    python -m testbed.cosign build    # build it once into the cache; print its path

There is no transparency log here (no Rekor, no Fulcio, no internet): signatures are made with a
key pair from ``cosign generate-key-pair`` and without a tlog upload, and stored the way cosign
v2 stores them, which v2 and v3 both verify: the tag ``sha256-<hex>.sig`` of the image's
repository (trainerop_common.signatures reads it). Keyless signing needs Fulcio and Rekor: not
attempted. The registry is trusted through the test bed's CA (``--registry-cacert``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from testbed import cluster, gomodule

VERSION = "v2.6.4"
MODULE = "github.com/sigstore/cosign/v2"
BINARY = "cosign"


def binary() -> Path:
    """cosign, installed once into the cache (several minutes on 2 cores the first time)."""
    return gomodule.installed(
        f"cosign {VERSION}",
        "python -m testbed.cosign build",
        f"{MODULE}/cmd/cosign@{VERSION}",
        cluster.CACHE_ROOT / f"cosign-{VERSION}",
        BINARY,
    )


@dataclass(frozen=True)
class KeyPair:
    private: Path  # cosign.key: encrypted with the password
    public: Path  # cosign.pub: PEM, what a policy names
    password: str


def cosign(*args: str, password: str = "", check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run cosign offline (no tlog, no TUF), trusting the registry through the test bed's CA."""
    env = {**os.environ, "COSIGN_PASSWORD": password, "TUF_ROOT": str(cluster.RUN_DIR / "cosign-tuf")}
    result = subprocess.run([str(binary()), *args], env=env, capture_output=True, text=True)
    if check and result.returncode != 0:
        raise cluster.ClusterError(f"cosign {args[0]} failed: {result.stderr.strip()[-2000:]}")
    return result


def key_pair(into: Path, name: str, password: str) -> KeyPair:
    """A key pair made by cosign itself (ECDSA P-256; the private key encrypted with ``password``)."""
    into.mkdir(parents=True, exist_ok=True)
    prefix = into / name
    cosign("generate-key-pair", "--output-key-prefix", str(prefix), password=password)
    return KeyPair(prefix.with_suffix(".key"), prefix.with_suffix(".pub"), password)


def registry_ca() -> str:
    return str(cluster.RUN_DIR / "pki" / "ca.crt")


def sign(keys: KeyPair, image: str) -> None:
    """Sign ``image`` (``<registry>/<repository>@sha256:…``: by digest, as cosign advises) and store
    the signature in its repository, with no transparency-log upload."""
    cosign(
        "sign",
        "--key",
        str(keys.private),
        "--tlog-upload=false",
        "--yes",
        "--registry-cacert",
        registry_ca(),
        image,
        password=keys.password,
    )


def verify(public: Path, image: str) -> subprocess.CompletedProcess[str]:
    """``cosign verify`` of ``image`` against ``public``, offline; the result as it is (0: verified)."""
    args = ["verify", "--key", str(public), "--insecure-ignore-tlog=true", "--registry-cacert", registry_ca(), image]
    return cosign(*args, check=False)


def main(argv: list[str] | None = None) -> int:
    description = __doc__.splitlines()[0] if __doc__ else ""
    return gomodule.main(argv, description, "cosign", binary, lambda: [])


if __name__ == "__main__":
    sys.exit(main())

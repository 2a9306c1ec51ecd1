#!/usr/bin/env python3
"""The local cluster's container registry: the CNCF distribution registry, built from its Go
module, serving TLS with the test bed's CA (docs/design/trusted-artifacts.md, decision 1).

    python -m testbed.registry build    # build it once into the cache; print its path

Images built here are pushed to it (testbed/images.py) and the real node's containerd pulls them
from it, as a cluster's nodes pull through a mirror: the node's hosts configuration (:func:`hosts`)
makes this registry the mirror of docker.io and registry.k8s.io, so pods keep naming images as
users write them (``trainer-operator-jax-example:dev``, ``docker.io/library/x@sha256:…``) and
every pull is a real one, by name or by digest, over TLS. A mirrored image lives at
``<address>/<upstream registry>/<repository>`` (containerd's ``override_path``).

It listens on the services address (cluster.services_address: this machine and the real node's
pods reach it alike) and keeps its storage in ~/.cache/trainer-operator/registry, which outlives
clusters, so a push sends only the layers that changed. Delete that folder to reclaim the space of
old builds.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from testbed import cluster, gomodule

VERSION = "v3.1.1"
MODULE = "github.com/distribution/distribution/v3"
BINARY = "registry"
PORT = cluster.PORT_BASE + 50
MIRRORED = ("docker.io", "registry.k8s.io")  # the upstream registries it stands in for
# Kept in the cache (a push then sends only the layers that changed); a second test worker's
# cluster (cluster.WORKER) keeps its registry's in its own run directory.
STORAGE = cluster.RUN_DIR / "registry-storage" if cluster.WORKER else cluster.CACHE_ROOT / "registry"


def address() -> str:
    return f"{cluster.services_address()}:{PORT}"


def binary() -> Path:
    """The registry, installed once into the cache (a few minutes on 2 cores the first time)."""
    return gomodule.installed(
        f"the distribution registry {VERSION}",
        "python -m testbed.registry build",
        f"{MODULE}/cmd/registry@{VERSION}",
        cluster.CACHE_ROOT / f"distribution-{VERSION}",
        BINARY,
    )


def mirror_path(ref: str) -> str:
    """Where the mirror holds ``ref`` (``docker.io/library/x:tag`` -> ``<address>/docker.io/library/x:tag``)."""
    upstream = ref.split("/", 1)[0]
    if upstream not in MIRRORED:
        raise cluster.ClusterError(f"{ref}: the local registry mirrors only {', '.join(MIRRORED)}")
    return f"{address()}/{ref}"


def config(run: Path) -> Path:
    """The registry's configuration, with a serving certificate of the test bed's CA."""
    pki = run / "pki"
    if not (pki / "registry.crt").exists():
        names = sorted({cluster.services_address(), "127.0.0.1", "localhost"})
        cluster.issue_certificate(pki, "registry", "trainer-operator-local-registry", None, names)
    settings = {
        "version": 0.1,
        "log": {"level": "warn", "accesslog": {"disabled": True}},
        "storage": {"filesystem": {"rootdirectory": str(STORAGE)}, "delete": {"enabled": True}},
        "http": {
            "addr": address(),
            "tls": {"certificate": str(pki / "registry.crt"), "key": str(pki / "registry.key")},
        },
    }
    path = run / "registry.yml"
    path.write_text(yaml.safe_dump(settings))
    return path


def start(run: Path) -> None:
    """Run the registry (a cluster component: its pid and log under ``run``)."""
    STORAGE.mkdir(parents=True, exist_ok=True)
    component = cluster.Component(
        "registry",
        [str(binary()), "serve", str(config(run))],
        lambda: cluster.http_ok(f"https://{address()}/v2/", ca=run / "pki" / "ca.crt"),
        timeout=60,
    )
    cluster.start(run, component, env={"PATH": "/usr/bin:/bin", "OTEL_TRACES_EXPORTER": "none"})


def hosts(run: Path, into: Path) -> Path:
    """containerd's hosts directory (``config_path``): this registry as the mirror of each of
    MIRRORED, trusted through the test bed's CA; returns ``into``."""
    ca = run / "pki" / "ca.crt"
    for upstream in MIRRORED:
        server = "https://registry-1.docker.io" if upstream == "docker.io" else f"https://{upstream}"
        host = f"https://{address()}/v2/{upstream}"
        (into / upstream).mkdir(parents=True, exist_ok=True)
        (into / upstream / "hosts.toml").write_text(
            f'server = "{server}"\n\n'
            f'[host."{host}"]\n'
            '  capabilities = ["pull", "resolve"]\n'
            f'  ca = "{ca}"\n'
            "  override_path = true\n"
        )
    return into


def main(argv: list[str] | None = None) -> int:
    description = __doc__.splitlines()[0] if __doc__ else ""
    return gomodule.main(argv, description, "the distribution registry", binary, lambda: [])


if __name__ == "__main__":
    sys.exit(main())

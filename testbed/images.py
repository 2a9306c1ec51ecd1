#!/usr/bin/env python3
"""Container images built on this machine without a Docker engine, and pushed to the local
cluster's registry (testbed/registry.py), from which the real node's containerd pulls them.

    python -m testbed.images build controllers jax-example   # build (cached layers: warm builds are quick)
    python -m testbed.images load controllers jax-example    # build if needed, push, and have real-0 pull it
    python -m testbed.images list

The images' Dockerfiles are the ones users build with Docker (deploy/Dockerfile,
examples/jax/Dockerfile, FROM python:3.11-slim-bookworm). Here buildah (Debian package, overlay
storage, chroot isolation) builds them on a base made with debootstrap from the Debian mirror apt
uses (--build-arg BASE): minbase with python3, python3-venv and ca-certificates. pip inside the
build uses the host's network and, when the host's pip has one (PIP_CERT, pip's global.cert), its
CA bundle. buildah's storage and the base's rootfs live in ~/.cache/trainer-operator/images and
outlive the cluster, so only the first build is cold; so does the registry's storage, so a push
sends only the layers that changed.

The pause and busybox images the node itself needs are built by testbed/node.py with the same
helpers (build_image, publish). Images reach the node's containerd through the registry and
testbed/containerd.py, which the node uses too: this module does not import the node.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from testbed import cluster, containerd, registry

REPO = Path(__file__).resolve().parent.parent
IMAGES_DIR = cluster.CACHE_ROOT / "images"
SUITE = "bookworm"
BASE_IMAGE = f"localhost/trainer-operator/python-base:{SUITE}"
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates")
DEFAULT_MIRROR = "http://deb.debian.org/debian"


@dataclass(frozen=True)
class Image:
    ref: str  # what pods name (containerd normalizes short names to docker.io/library/...)
    dockerfile: str  # relative to the repository; the context is the repository's root


IMAGES = {
    "controllers": Image("docker.io/library/trainer-operator:dev", "deploy/Dockerfile"),
    "jax-example": Image("docker.io/library/trainer-operator-jax-example:dev", "examples/jax/Dockerfile"),
    "pytorch-example": Image("docker.io/library/trainer-operator-pytorch-example:dev", "examples/pytorch/Dockerfile"),
    "tensorflow-example": Image(
        "docker.io/library/trainer-operator-tensorflow-example:dev", "examples/tensorflow/Dockerfile"
    ),
    "xgboost-example": Image("docker.io/library/trainer-operator-xgboost-example:dev", "examples/xgboost/Dockerfile"),
    "placement-example": Image(
        "docker.io/library/trainer-operator-placement-example:dev", "examples/placement/Dockerfile"
    ),
}


def storage() -> list[str]:
    return [
        "--storage-driver",
        "overlay",
        "--root",
        str(IMAGES_DIR / "buildah-overlay" / "root"),
        "--runroot",
        str(IMAGES_DIR / "buildah-overlay" / "run"),
    ]


def buildah(*args: str, quiet: bool = True) -> str:
    """Run buildah on the cache's storage; its output streams to the terminal unless quiet."""
    argv = ["buildah", *storage(), *args]
    result = subprocess.run(argv, stdout=subprocess.PIPE if quiet else None, stderr=subprocess.PIPE, text=True)
    if result.returncode != 0:
        raise cluster.ClusterError(f"buildah {' '.join(args[:2])} failed: {result.stderr.strip()[-3000:]}")
    return result.stdout or ""


def image_id(ref: str) -> str | None:
    result = subprocess.run(
        ["buildah", *storage(), "inspect", "--type", "image", "--format", "{{.FromImageID}}", ref],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        return None
    return result.stdout.strip() or None


def build_image(name: str, context: Path, containerfile: str) -> str:
    """A small FROM-scratch image from ``context`` (its rootfs/ and the given Containerfile); its image ID."""
    (context / "Containerfile").write_text(containerfile)
    buildah("bud", "-q", "--layers", "--isolation", "chroot", "-t", name, str(context))
    return built_id(name)


def built_id(ref: str) -> str:
    found = image_id(ref)
    if found is None:
        raise cluster.ClusterError(f"no image {ref}: build it first")
    return found


def push(run: Path, ref: str) -> str:
    """Push ``ref`` to the local registry, where the node's containerd finds it as its mirror
    (testbed/registry.py); returns the manifest's digest."""
    certs = run / "registry-ca"  # buildah trusts every *.crt of its cert dir: the CA alone
    certs.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(cluster.RUN_DIR / "pki" / "ca.crt", certs / "ca.crt")
    digest_file = run / "registry-ca" / "digest"
    # Layers go uncompressed: the registry is on this machine, and gzip of the PyTorch image's 5 GB
    # (and containerd's gunzip on the pull) took minutes of one core.
    target = f"docker://{registry.mirror_path(ref)}"
    buildah("push", "--disable-compression", "--cert-dir", str(certs), "--digestfile", str(digest_file), ref, target)
    return digest_file.read_text().strip()


def publish(run: Path, ref: str, built: str) -> None:
    """``ref`` as built pushed to the registry and pulled by the node's containerd through it (by
    name, as the kubelet would; a pod naming it then finds this build), unless the node holds this
    build already."""
    stamp = containerd.image_store() / "published" / f"{ref.rsplit('/', 1)[-1].replace(':', '-')}.id"
    if stamp.exists() and stamp.read_text() == built and ref in containerd.ctr(run, "images", "ls", "-q").split():
        return
    t0 = time.monotonic()
    digest = push(run, ref)
    containerd.ctr(run, "images", "pull", "--hosts-dir", str(containerd.hosts_dir(run)), ref)
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text(built)
    took = time.monotonic() - t0
    cluster.say(f"image {ref} ({digest[:19]}) pushed to the registry and pulled by the node in {took:.1f}s")


def base() -> str:
    """The Debian base with Python (debootstrap, once): the BASE of every Dockerfile here."""
    if image_id(BASE_IMAGE) is None:
        with cluster.build_lock(IMAGES_DIR / "base"):
            if image_id(BASE_IMAGE) is None:
                _debootstrap_base()
    return BASE_IMAGE


def _debootstrap_base() -> None:
    if shutil.which("debootstrap") is None:
        raise cluster.ClusterError("debootstrap is missing: apt-get install -y debootstrap")
    context = IMAGES_DIR / "base"
    shutil.rmtree(context, ignore_errors=True)
    context.mkdir(parents=True)
    t0 = time.monotonic()
    cluster.say(f"debootstrap: Debian {SUITE} minbase with {', '.join(BASE_PACKAGES)} (about a minute, once)")
    subprocess.run(
        [
            "debootstrap",
            "--variant=minbase",
            f"--include={','.join(BASE_PACKAGES)}",
            SUITE,
            str(context / "rootfs"),
            debian_mirror(),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for entry in (context / "rootfs" / cache).glob("*"):
            if entry.is_file():
                entry.unlink()
    (context / "Containerfile").write_text('FROM scratch\nCOPY rootfs/ /\nCMD ["python3"]\n')
    buildah("bud", "-q", "--isolation", "chroot", "-t", BASE_IMAGE, str(context))
    shutil.rmtree(context, ignore_errors=True)
    cluster.say(f"base image {BASE_IMAGE} in {time.monotonic() - t0:.0f}s")


def debian_mirror(apt: Path = Path("/etc/apt")) -> str:
    """$TRAINER_OPERATOR_DEBIAN_MIRROR, else the mirror apt uses for SUITE (deb822 .sources or
    one-line .list entries; other suites, security and files apt ignores do not count), else
    deb.debian.org."""
    override = os.environ.get("TRAINER_OPERATOR_DEBIAN_MIRROR")
    if override:
        return override
    sources = [apt / "sources.list", *sorted((apt / "sources.list.d").glob("*.list"))]
    for source in [s for s in sources if s.is_file()]:
        for line in source.read_text().splitlines():
            words = line.split()
            uris = [w for w in words if w.startswith(("http://", "https://"))]
            if words[:1] == ["deb"] and SUITE in words and uris and "security" not in uris[0]:
                return uris[0]
    for source in sorted((apt / "sources.list.d").glob("*.sources")):
        for stanza in source.read_text().split("\n\n"):
            fields = dict(line.split(":", 1) for line in stanza.splitlines() if ":" in line and not line[0].isspace())
            uris, suites = fields.get("URIs", "").split(), fields.get("Suites", "").split()
            if SUITE in suites and uris and "security" not in uris[0]:
                return uris[0]
    return DEFAULT_MIRROR


def pip_cert() -> str | None:
    """The CA bundle the host's pip trusts, when it is told one (a proxy's)."""
    cert = os.environ.get("PIP_CERT")
    if not cert:
        result = subprocess.run(
            [sys.executable, "-m", "pip", "config", "get", "global.cert"], capture_output=True, text=True
        )
        cert = result.stdout.strip() if result.returncode == 0 else None
    return cert if cert and Path(cert).is_file() else None


def build(name: str) -> str:
    """Build one of IMAGES from its Dockerfile (buildah's layer cache makes a warm build quick);
    its image ID."""
    image = IMAGES[name]
    t0 = time.monotonic()
    args = ["bud", "--layers", "--isolation", "chroot", "--build-arg", f"BASE={base()}"]
    cert = pip_cert()
    if cert:
        args += ["--volume", f"{cert}:/etc/pip-ca.pem:ro", "--build-arg", "PIP_CERT=/etc/pip-ca.pem"]
    cluster.say(f"building {image.ref} from {image.dockerfile}")
    with cluster.build_lock(IMAGES_DIR / f"image-{name}"):  # one build at a time; a second is then all cache hits
        buildah(*args, "-f", str(REPO / image.dockerfile), "-t", image.ref, str(REPO), quiet=False)
    cluster.say(f"image {image.ref} built in {time.monotonic() - t0:.1f}s")
    return built_id(image.ref)


SEAWEEDFS_REPOSITORY = "docker.io/chrislusf/seaweedfs"  # SeaweedFS's own image's name


def seaweedfs(run: Path) -> str:
    """SeaweedFS's image as its project names it (SEAWEEDFS_REPOSITORY:<weed's version>), made from
    the weed the test bed builds, its program at the same path (/usr/bin/weed), pushed and pulled by
    the node: a cluster that pulls from Docker Hub runs upstream's build of the same version."""
    weed = cluster.bin_dir("--print-s3-bin-dir") / "weed"
    said = subprocess.run([str(weed), "version"], check=True, capture_output=True, text=True).stdout.split()
    ref = f"{SEAWEEDFS_REPOSITORY}:{said[said.index('version') + 2]}"  # "version 30GB 4.53 linux amd64"
    context = run / "build" / "seaweedfs"
    shutil.rmtree(context, ignore_errors=True)
    (context / "rootfs" / "usr" / "bin").mkdir(parents=True)
    (context / "rootfs" / "tmp").mkdir()
    (context / "rootfs" / "tmp").chmod(0o1777)
    shutil.copy2(weed, context / "rootfs" / "usr" / "bin" / "weed")
    publish(run, ref, build_image(ref, context, 'FROM scratch\nCOPY rootfs/ /\nENTRYPOINT ["/usr/bin/weed"]\n'))
    return ref


def load(name: str, run: Path) -> None:
    """Build ``name`` if needed, push it to the registry and have the node pull it."""
    publish(run, IMAGES[name].ref, build(name))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for command in ("build", "load"):
        p = sub.add_parser(command)
        p.add_argument("names", nargs="+", choices=sorted(IMAGES))
    sub.add_parser("list")
    args = parser.parse_args(argv)
    try:
        if args.command == "list":
            for name, image in IMAGES.items():
                print(f"{name:12} {image.ref:55} {image.dockerfile}  {image_id(image.ref) or '(not built)'}")
        elif args.command == "build":
            for name in args.names:
                build(name)
        else:
            for name in args.names:
                load(name, containerd.node_dir())
    except cluster.ClusterError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Image references as a container runtime reads them (pure): ``jax:dev`` is
``docker.io/library/jax:dev``, a first component with a dot, a colon or ``localhost`` is a
registry, a reference without tag or digest means ``:latest``; and where a registry's content is
read from when the cluster pulls through a mirror (``--registry-mirrors``). A registry's name is
a host: written in any case, or with HTTPS's own port 443, it is the same registry, and so the
same name for the policies' globs."""

import re
from collections.abc import Mapping
from dataclasses import dataclass

DOCKER_HUB = "docker.io"
DOCKER_HUB_ALIASES = ("index.docker.io", "registry-1.docker.io")
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
# The distribution spec's repository path and tag grammars.
PATH_COMPONENT = r"[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*"
REPOSITORY = re.compile(rf"^{PATH_COMPONENT}(?:/{PATH_COMPONENT})*$")
TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$")


class ReferenceError(ValueError):
    """A reference no runtime would pull; the message says what is wrong."""


@dataclass(frozen=True)
class Reference:
    registry: str  # docker.io, registry.k8s.io, host:port
    repository: str  # library/jax, team/model
    tag: str | None  # None with a digest and no tag
    digest: str | None

    @property
    def name(self) -> str:
        """The normalized name without tag or digest (what policies' globs match)."""
        return f"{self.registry}/{self.repository}"

    def pinned(self, digest: str) -> str:
        """The reference a pod pulls so that what was verified is what runs."""
        return f"{self.name}@{digest}"


def parse(ref: str) -> Reference:
    rest, _, digest = ref.partition("@")
    if digest and not DIGEST.match(digest):
        raise ReferenceError(f"{ref!r}: a digest is sha256: and 64 lowercase hex digits")
    first, slash, remainder = rest.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        registry, path = first, remainder
    else:
        registry, path = DOCKER_HUB, rest
    registry = registry.lower().removesuffix(":443")
    registry = DOCKER_HUB if registry in DOCKER_HUB_ALIASES else registry
    last = path.rsplit("/", 1)[-1]
    tag = last.partition(":")[2] if ":" in last else None
    repository = path[: len(path) - len(tag) - 1] if tag is not None else path
    if registry == DOCKER_HUB and "/" not in repository:
        repository = f"library/{repository}"
    if not REPOSITORY.match(repository):
        raise ReferenceError(f"{ref!r}: {repository!r} is not a repository name (lowercase path components)")
    if tag is not None and not TAG.match(tag):
        raise ReferenceError(f"{ref!r}: {tag!r} is not a tag")
    return Reference(registry, repository, tag if tag is not None or digest else "latest", digest or None)


def parse_mirrors(text: str) -> dict[str, str]:
    """``docker.io=10.0.0.5:5000/docker.io,quay.io=mirror.local`` -> registry -> where its
    repositories are read (a host, and a path prefix when the mirror keeps upstreams apart)."""
    out: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        upstream, sep, mirror = item.partition("=")
        if not sep or not upstream.strip() or not mirror.strip():
            raise ValueError(f"registry mirror {item!r}: write <registry>=<host[:port][/path]>")
        out[upstream.strip()] = mirror.strip().rstrip("/")
    return out


@dataclass(frozen=True)
class Location:
    """Where the registry API of a reference's repository is: https://<host>/v2/<repository>/..."""

    host: str
    repository: str


def location(ref: Reference, mirrors: Mapping[str, str]) -> Location:
    mirror = mirrors.get(ref.registry)
    if mirror is None:
        host = "registry-1.docker.io" if ref.registry == DOCKER_HUB else ref.registry
        return Location(host, ref.repository)
    host, _, prefix = mirror.partition("/")
    return Location(host, f"{prefix}/{ref.repository}" if prefix else ref.repository)

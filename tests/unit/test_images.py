"""testbed/images.py: which Debian mirror debootstrap uses for the images' base."""

from pathlib import Path

import pytest

from testbed import images

DEBIAN = (
    "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\n\n"
    "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n"
)
FILES = {
    "sources.list.d/a-docker.sources": "URIs: https://download.docker.com/linux/debian\nSuites: stable\n",
    "sources.list.d/debian.sources": DEBIAN,
    "sources.list.d/old.sources.disabled": "URIs: http://ignored.example/debian\nSuites: bookworm\n",
    "sources.list.d/ubuntu.sources": "URIs: http://archive.ubuntu.com/ubuntu\nSuites: noble noble-updates\n",
    "sources.list": "deb cdrom:[Debian]/ bookworm main\ndeb http://one-line.example/debian bookworm main\n",
}


def apt_dir(root: Path, *names: str) -> Path:
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(FILES[name])
    return root


@pytest.mark.parametrize(
    ("files", "mirror"),
    [
        (["sources.list.d/a-docker.sources", "sources.list.d/debian.sources"], "http://mirror.example/debian"),
        (["sources.list.d/old.sources.disabled", "sources.list.d/debian.sources"], "http://mirror.example/debian"),
        (["sources.list", "sources.list.d/debian.sources"], "http://one-line.example/debian"),
        (["sources.list.d/ubuntu.sources"], images.DEFAULT_MIRROR),  # another distribution
        ([], images.DEFAULT_MIRROR),
    ],
)
def test_the_mirror_apt_uses_for_the_suite_is_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, files: list[str], mirror: str
) -> None:
    monkeypatch.delenv("TRAINER_OPERATOR_DEBIAN_MIRROR", raising=False)
    assert images.debian_mirror(apt_dir(tmp_path, *files)) == mirror


def test_a_mirror_given_in_the_environment_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINER_OPERATOR_DEBIAN_MIRROR", "http://local.example/debian")
    assert images.debian_mirror(apt_dir(tmp_path, "sources.list.d/debian.sources")) == "http://local.example/debian"


def test_every_file_an_image_copies_gets_past_the_dockerignore() -> None:
    """The build context is the repository with .dockerignore's allow-list: a COPY of a path it
    does not allow fails the build (examples/pytorch's did once)."""
    ignore = (images.REPO / ".dockerignore").read_text().splitlines()
    allowed = [line[1:].rstrip("/") + "/" for line in ignore if line[:1] == "!"]
    for image in images.IMAGES.values():
        lines = (images.REPO / image.dockerfile).read_text().splitlines()
        copies = [line.split()[1:-1] for line in lines if line.startswith("COPY ")]
        sources = [src for words in copies for src in words if not src.startswith("--")]
        assert sources, image.dockerfile
        blocked = [src for src in sources if not any(f"{src}/".startswith(prefix) for prefix in allowed)]
        assert blocked == [], f"{image.dockerfile} copies {blocked}, which .dockerignore leaves out"

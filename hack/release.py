#!/usr/bin/env python3
"""A release of Trainer Operator from its version: what a platform team installs, named by the
version and nothing else.

    python hack/release.py set-version 0.2.0          # every package's version, before the tag
    python hack/release.py build --registry ghcr.io/acme --download-url URL [--push] [--tag v0.2.0]

`build` writes dist/<version>/:
- trainer-operator-<version>.yaml (deploy/overlays/dev: every controller, self-signed webhook
  certificates, nothing else needed) and trainer-operator-<overlay>-<version>.yaml for minimal,
  cert-manager and production, each rendered by kustomize with one `images:` entry, so every
  place the operator's image is named (the Deployments, and the ConfigMaps that name it for the
  pods the controllers create, deploy/base/image-fields.yaml) says <registry>/trainer-operator:<version>;
- trainer-operator-<version>.tgz: the Helm chart of the first manifest (the same objects, the
  image a value): `helm install trainer-operator trainer-operator-<version>.tgz`;
- quickstart-trainer.yaml: README.md's first Trainer (examples/quickstart/trainer.yaml);
- wheels/: a wheel of every Python package (pip wheel), so `pip install --find-links wheels
  trainerop-client` needs nothing that is not on PyPI or here; constraints.txt: every third-party
  dependency at the version CI tested (`pip install -c constraints.txt ...`);
- kubectl-trainer-<version>.tar.gz and trainer.yaml: `kubectl trainer` for krew (a launcher that
  installs the client's wheels into a virtualenv of its own on first use; Python 3.11 or newer)
  and its krew manifest, whose download address is --download-url (where the release's files
  will be): `kubectl krew install --manifest=trainer.yaml`;
- SHA256SUMS of all of it.
It refuses to start unless every package carries the version, CHANGELOG.md has its entry, and
(with --tag) the tag names the version. --push builds the images (the operator's, which is also
the model initializer's, and the examples') with buildah as the test bed does and pushes each to
<registry>/<name>:<version> (log in first: `buildah login <registry>`).
"""

from __future__ import annotations

import argparse
import hashlib
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a script: the test bed's kubectl and image builds
    sys.path.insert(0, str(REPO))

from testbed import cluster, images  # noqa: E402
from testbed import versions as kubernetes_versions  # noqa: E402

# The overlays a release publishes; the first is trainer-operator-<version>.yaml.
OVERLAYS = ("dev", "minimal", "cert-manager", "production")
QUICKSTART_TRAINER = REPO / "examples" / "quickstart" / "trainer.yaml"  # README.md's first Trainer
IMAGE = "trainer-operator"
PLUGIN = "trainer"  # kubectl trainer  # the name the manifests give the operator's image (deploy/controllers/*)
VERSION = re.compile(r"^\d+\.\d+\.\d+(?:(?:a|b|rc)\d+)?$")  # what both pip and a tag accept
PROJECT_VERSION = re.compile(r'^version = "[^"]*"$', re.MULTILINE)


class ReleaseError(Exception):
    pass


def packages() -> list[Path]:
    """Every Python package of the repository (a folder of libs/ or controllers/ with a pyproject)."""
    return sorted(p.parent for p in [*REPO.glob("libs/*/pyproject.toml"), *REPO.glob("controllers/*/pyproject.toml")])


def pyprojects() -> list[Path]:
    """Every pyproject.toml whose version is the release's: the packages' and the workspace's."""
    return [REPO / "pyproject.toml", *(folder / "pyproject.toml" for folder in packages())]


def with_version(pyproject: str, version: str) -> str:
    """``pyproject`` (its text) with [project]'s version set to ``version``."""
    if len(PROJECT_VERSION.findall(pyproject)) != 1:
        raise ReleaseError('a pyproject.toml without exactly one `version = "..."` line')
    return PROJECT_VERSION.sub(f'version = "{version}"', pyproject)


def changelog_entry(changelog: str, version: str) -> str:
    """The text under CHANGELOG.md's heading `## <version>` (up to the next such heading)."""
    match = re.search(rf"^## {re.escape(version)}(?=[ \t]|$).*?$(.*?)(?=^## |\Z)", changelog, re.MULTILINE | re.DOTALL)
    return match.group(1).strip() if match else ""


def problems(version: str, versions: dict[str, str], changelog: str, tag: str | None) -> list[str]:
    """Why ``version`` cannot be released from this checkout (empty: it can)."""
    found = []
    if not VERSION.match(version):
        found.append(f"{version!r} is not a version like 0.2.0 or 0.2.0rc1")
    found += [f"{name} is at {v}: run `python hack/release.py set-version {version}`" for name, v in
              sorted(versions.items()) if v != version]  # fmt: skip
    if not changelog_entry(changelog, version):
        found.append(f"CHANGELOG.md has no entry `## {version}`: write what changed")
    if tag is not None and tag.removeprefix("v") != version:
        found.append(f"the tag {tag} does not name version {version}")
    return found


def manifest_name(overlay: str, version: str) -> str:
    return (
        f"trainer-operator-{version}.yaml" if overlay == OVERLAYS[0] else f"trainer-operator-{overlay}-{version}.yaml"
    )


def kustomization(overlay: str, image: str) -> str:
    """A kustomization two levels under deploy/ that is ``overlay`` with the operator's ``image``."""
    name, _, tag = image.rpartition(":")
    return (
        f"resources:\n- ../../overlays/{overlay}\n"
        f"images:\n- name: {IMAGE}\n  newName: {name}\n  newTag: {tag}\n"
    )  # fmt: skip


def render(overlay: str, image: str, kubectl: str | None = None) -> str:
    """``kubectl kustomize`` of ``overlay`` with ``image`` (from a folder under deploy/, as
    kustomize reads bases only below its root), with ``kubectl`` or else the test bed's."""
    with tempfile.TemporaryDirectory(dir=REPO / "deploy", prefix=".release-") as scratch:
        folder = Path(scratch) / overlay
        folder.mkdir()
        (folder / "kustomization.yaml").write_text(kustomization(overlay, image))
        return run([kubectl or str(cluster.bin_dir() / "kubectl"), "kustomize", str(folder)])


def run(argv: list[str]) -> str:
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode != 0:
        raise ReleaseError(f"{' '.join(argv[:3])} … failed:\n{result.stderr.strip()[-2000:]}")
    return result.stdout


def build_wheels(target: Path) -> list[Path]:
    """A wheel of every package into ``target``; setuptools' build/ folders removed before (a stale
    one would put deleted modules into the wheel) and after."""
    target.mkdir(parents=True, exist_ok=True)
    for folder in packages():
        shutil.rmtree(folder / "build", ignore_errors=True)
    try:
        run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(target), *map(str, packages())])
    finally:
        for folder in packages():
            shutil.rmtree(folder / "build", ignore_errors=True)
    return sorted(target.glob("*.whl"))


def push_images(registry: str, version: str) -> list[str]:
    """Every image of testbed/images.py built and pushed as <registry>/<its name>:<version>."""
    pushed = []
    for name, image in images.IMAGES.items():
        built = images.build(name)
        target = f"{registry}/{image.ref.rsplit('/', 1)[-1].split(':')[0]}:{version}"
        cluster.say(f"pushing {name} as {target}")
        images.buildah("push", built, f"docker://{target}", quiet=False)
        pushed.append(target)
    return pushed


def plugin_archive(wheels: Path, out: Path, version: str) -> Path:
    """kubectl-trainer-<version>.tar.gz: the launcher hack/kubectl-trainer.sh as `kubectl-trainer`
    (it makes a virtualenv of its own on first use: the client's dependencies have C extensions,
    so no single file can carry them), the client's and the SDK's wheels, and the LICENSE."""
    archive = out / f"kubectl-{PLUGIN}-{version}.tar.gz"
    launcher = (REPO / "hack" / "kubectl-trainer.sh").read_text().replace("@VERSION@", version)
    with tempfile.TemporaryDirectory() as scratch:
        executable = Path(scratch) / f"kubectl-{PLUGIN}"
        executable.write_text(launcher)
        executable.chmod(0o755)
        with tarfile.open(archive, "w:gz") as tar:
            tar.add(executable, arcname=executable.name)
            for wheel in [*wheels.glob("trainerop_client-*.whl"), *wheels.glob("trainerop_sdk-*.whl")]:
                tar.add(wheel, arcname=f"wheels/{wheel.name}")
            tar.add(REPO / "LICENSE", arcname="LICENSE")
    return archive


def krew_manifest(version: str, uri: str, sha256: str) -> dict[str, object]:
    """The krew manifest of ``kubectl trainer`` (krew's Plugin v1alpha2) for the archive at ``uri``."""
    platform = {
        "selector": {"matchExpressions": [{"key": "os", "operator": "In", "values": ["linux", "darwin"]}]},
        "uri": uri,
        "sha256": sha256,
        "bin": f"kubectl-{PLUGIN}",
        "files": [{"from": name, "to": "."} for name in (f"kubectl-{PLUGIN}", "wheels", "LICENSE")],
    }
    return {
        "apiVersion": "krew.googlecontainertools.github.com/v1alpha2",
        "kind": "Plugin",
        "metadata": {"name": PLUGIN},
        "spec": {
            "version": f"v{version}",
            "shortDescription": "Submit, follow and inspect Trainer Operator runs",
            "description": "Submits Trainers (an image, or a Python function), follows them with a progress bar, "
            "reads every rank's logs, checkpoints and audit trail (docs/data-scientists.md).",
            "caveats": "kubectl trainer runs with the python3 on your PATH: Python 3.11 or newer.",
            "platforms": [platform],
        },
    }


CHART_VALUES = """\
# The operator's image: every controller's, and that of the pods they start with the operator's
# code (the model initializer, the checkpoint storage pods). Nothing else is a value: the objects
# are deploy/overlays/dev's as rendered; change them there, or with Kustomize.
image:
  repository: {repository}
  tag: "{tag}"
"""
CHART_IMAGE = "{{ .Values.image.repository }}:{{ .Values.image.tag }}"
CHART_NOTES = """\
Trainer Operator {{ .Chart.AppVersion }} runs in the namespace trainer-operator-system.
  kubectl wait --for=condition=Available deployment --all -n trainer-operator-system --timeout=5m
A first Trainer: README.md, Quickstart. Uninstall: helm uninstall {{ .Release.Name }}
(its CRDs, and with them every Trainer, go too).
"""


def chart(rendered: str, image: str, version: str) -> dict[str, str]:
    """The Helm chart of ``rendered`` (a release manifest naming ``image``), file by path: the same
    objects, their image from the values; the CRDs among the templates, so that an upgrade
    changes them and an uninstall removes them (Helm leaves those of crds/ alone)."""
    repository, _, tag = image.rpartition(":")
    escaped = rendered.replace("{{", '{{ "{{" }}')  # text Helm would take for an action
    chart_yaml = {
        "apiVersion": "v2",
        "name": "trainer-operator",
        "description": "A Kubernetes-native control plane for distributed ML training",
        "type": "application",
        "version": version,
        "appVersion": version,
        "kubeVersion": f">={kubernetes_versions.MINIMUM}.0-0",
    }
    return {
        "Chart.yaml": yaml.safe_dump(chart_yaml, sort_keys=False),
        "values.yaml": CHART_VALUES.format(repository=repository, tag=tag),
        "templates/trainer-operator.yaml": escaped.replace(image, CHART_IMAGE),
        "templates/NOTES.txt": CHART_NOTES,
    }


def chart_archive(files: dict[str, str], out: Path, version: str) -> Path:
    """trainer-operator-<version>.tgz, as `helm package` makes it: the files under trainer-operator/."""
    archive = out / f"trainer-operator-{version}.tgz"
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch) / "trainer-operator"
        for path, text in files.items():
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_text(text)
        with tarfile.open(archive, "w:gz") as tar:
            tar.add(root, arcname="trainer-operator")
    return archive


def checksums(folder: Path) -> str:
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.name != "SHA256SUMS")
    return "".join(f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.relative_to(folder)}\n" for p in files)


def versions() -> dict[str, str]:
    found = {}
    for path in pyprojects():
        project = tomllib.loads(path.read_text())["project"]
        found[str(project["name"])] = str(project["version"])
    return found


def build(args: argparse.Namespace) -> int:
    version = args.version or next(iter(versions().values()))
    changelog = (REPO / "CHANGELOG.md").read_text() if (REPO / "CHANGELOG.md").exists() else ""
    found = problems(version, versions(), changelog, args.tag)
    if found:
        raise ReleaseError("cannot release:\n  " + "\n  ".join(found))
    out = REPO / "dist" / version
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    image = f"{args.registry.rstrip('/')}/{IMAGE}:{version}"
    for overlay in OVERLAYS:
        cluster.say(f"rendering deploy/overlays/{overlay} with {image}")
        (out / manifest_name(overlay, version)).write_text(render(overlay, image))
    chart_archive(chart((out / manifest_name(OVERLAYS[0], version)).read_text(), image, version), out, version)
    shutil.copyfile(QUICKSTART_TRAINER, out / "quickstart-trainer.yaml")
    shutil.copyfile(REPO / "constraints.txt", out / "constraints.txt")
    cluster.say("building the wheels")
    wheels = build_wheels(out / "wheels")
    archive = plugin_archive(out / "wheels", out, version)
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    manifest = krew_manifest(version, f"{args.download_url.rstrip('/')}/{archive.name}", digest)
    (out / f"{PLUGIN}.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
    if args.push:
        push_images(args.registry.rstrip("/"), version)
    (out / "SHA256SUMS").write_text(checksums(out))
    cluster.say(f"release {version} in {out}: {len(OVERLAYS)} manifests, {len(wheels)} wheels, kubectl trainer")
    return 0


def set_version(args: argparse.Namespace) -> int:
    if not VERSION.match(args.version):
        raise ReleaseError(f"{args.version!r} is not a version like 0.2.0 or 0.2.0rc1")
    for path in pyprojects():
        path.write_text(with_version(path.read_text(), args.version))
    cluster.say(f"{len(pyprojects())} pyproject.toml at {args.version}; now add `## {args.version}` to CHANGELOG.md")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hack/release.py", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    setter = commands.add_parser("set-version", help="set every package's version")
    setter.add_argument("version")
    setter.set_defaults(run=set_version)
    builder = commands.add_parser("build", help="manifests, wheels and (--push) images into dist/<version>")
    builder.add_argument("--registry", required=True, help="where the images are, e.g. ghcr.io/acme")
    builder.add_argument(
        "--download-url", required=True, help="where the release's files will be (the krew manifest's archive)"
    )
    builder.add_argument("--version", help="default: the packages' version")
    builder.add_argument("--tag", help="the git tag being released (v<version>); checked against the version")
    builder.add_argument("--push", action="store_true", help="also build the images and push them to --registry")
    builder.set_defaults(run=build)
    args = parser.parse_args(argv)
    try:
        return int(args.run(args))
    except (ReleaseError, cluster.ClusterError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

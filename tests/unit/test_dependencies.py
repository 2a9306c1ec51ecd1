"""Every third-party module a distribution imports is one it declares (or one a declared
dependency brings by contract): the controllers' image installs only the declared ones, so an
undeclared import works in the dev venv and crashes the pods."""

import ast
import re
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DISTRIBUTIONS = sorted(
    p.parent for p in [*REPO.glob("libs/*/pyproject.toml"), *REPO.glob("controllers/*/pyproject.toml")]
)
# import name -> the distribution that provides it, where they differ
PROVIDED_BY = {
    "yaml": "pyyaml",
    "prometheus_client": "prometheus-client",
    "httpx2": "lightkube",  # lightkube's HTTP client, which Kube catches the errors of
    "botocore": "boto3",  # boto3's own core (the SDK's multipart extra configures it)
    "s3transfer": "boto3",  # boto3's transfer manager (the SDK asks it the part size it uploads with)
    "grpc": "grpcio",
    "google": "protobuf",  # google.protobuf: the placement plugin's messages
}
OPENTELEMETRY = {"opentelemetry-api", "opentelemetry-sdk", "opentelemetry-exporter-otlp-proto-http"}


def declared(distribution: Path) -> set[str]:
    """The distribution's dependencies, and theirs when they are this workspace's."""
    project = tomllib.loads((distribution / "pyproject.toml").read_text())["project"]
    # An extra's modules count as declared: the code imports them only once it found them installed.
    optional = [dep for deps in project.get("optional-dependencies", {}).values() for dep in deps]
    names = {re.split(r"[<>=\[ ]", dep, maxsplit=1)[0].lower() for dep in [*project["dependencies"], *optional]}
    for workspace in [n for n in names if n.startswith("trainerop-")]:
        name = workspace.removeprefix("trainerop-")
        names |= declared(REPO / ("libs" if name in ("common", "sdk", "placement") else "controllers") / name)
    return names


def imported(distribution: Path) -> set[str]:
    names: set[str] = set()
    for path in (distribution / "src").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return {n for n in names if n not in sys.stdlib_module_names and not n.startswith("trainerop_")}


@pytest.mark.parametrize("distribution", DISTRIBUTIONS, ids=lambda p: p.name)
def test_every_third_party_import_is_declared(distribution: Path) -> None:
    deps = declared(distribution)
    missing = []
    for module in sorted(imported(distribution)):
        if module == "opentelemetry":
            ok = bool(deps & OPENTELEMETRY)
        else:
            ok = PROVIDED_BY.get(module, module.replace("_", "-")).lower() in deps
        if not ok:
            missing.append(module)
    assert not missing, f"{distribution.name} imports {missing} without declaring them in its pyproject.toml"

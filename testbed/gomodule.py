"""Upstream Go programs the test bed builds from their modules (the Go module proxy serves them):
the go command, its environment, and a module's download directory."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from testbed import cluster


def go(what: str, rebuild: str) -> str:
    """The go command: on PATH, else the official tarball's place. ``what`` (e.g. "Kueue v0.17.0")
    and ``rebuild`` (the command to run again) go into the error when Go is missing."""
    found = shutil.which("go") or ("/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else None)
    if not found:
        raise cluster.ClusterError(
            f"{what} is built from its Go module and Go is not installed: install Go 1.26 or newer "
            f"(https://go.dev/dl/, into /usr/local/go or on PATH) and run `{rebuild}` again"
        )
    return found


def go_env() -> dict[str, str]:
    return {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=mod -buildvcs=false", "CGO_ENABLED": "0"}


def module_dir(go_command: str, module: str, version: str, cwd: Path | None = None) -> Path:
    """``module@version``'s directory in the Go module cache (downloaded if missing)."""
    result = subprocess.run(
        [go_command, "mod", "download", "-json", f"{module}@{version}"],
        cwd=cwd,
        env=go_env(),
        capture_output=True,
        text=True,
    )
    info = json.loads(result.stdout or "{}")
    if result.returncode != 0 or not info.get("Dir"):
        raise cluster.ClusterError(
            f"go mod download {module}@{version} failed: {info.get('Error') or result.stderr.strip()}"
        )
    return Path(info["Dir"])


def installed(
    what: str, rebuild: str, package_at: str, target: Path, binary: str, ldflags: str = "-s -w", tags: str = ""
) -> Path:
    """``binary`` of ``package_at`` (``module/cmd/x@version``), installed with `go install` (build
    ``tags``, if any) once into ``target`` (a cache folder of its own, named for all of that);
    ``what`` and ``rebuild`` go into the messages."""
    flags = [*(["-tags", tags] if tags else []), "-ldflags", ldflags, package_at]
    return cluster.built_once(target / binary, lambda: _install(what, rebuild, flags, target, binary))


def _install(what: str, rebuild: str, flags: list[str], target: Path, binary: str) -> None:
    built = target / binary
    go_command = go(what, rebuild)
    cluster.say(f"building {what} from its Go module (once; several minutes)")
    started = time.monotonic()
    partial = target / f".partial-{os.getpid()}"  # go install writes here; moved when complete
    partial.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        [go_command, "install", "-trimpath", *flags],
        env=go_env() | {"GOBIN": str(partial)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    if result.returncode != 0:
        tail = "\n".join(result.stdout.strip().splitlines()[-30:])
        raise cluster.ClusterError(
            f"building {what} failed (go install {flags[-1]}, exit {result.returncode}):\n"
            f"{tail}\nCheck that the Go module proxy is reachable (GOPROXY), then run `{rebuild}` again."
        )
    (partial / binary).rename(built)
    with contextlib.suppress(OSError):
        partial.rmdir()
    elapsed = int(time.monotonic() - started)
    cluster.say(f"built {built} in {elapsed // 60}m{elapsed % 60:02d}s")


@dataclass(frozen=True)
class Command:
    """A command of a program's own, beside ``build`` and ``crds``: its help and what runs it (its exit status)."""

    help: str
    run: Callable[[], int]


def main(
    argv: list[str] | None,
    description: str,
    what: str,
    binary: Callable[[], Path],
    crd_files: Callable[[], list[Path]],
    more: Mapping[str, Command] | None = None,
) -> int:
    """The command line of a module built program: ``build`` (once into the cache; its path) and
    ``crds`` (the paths of its CRD YAMLs); progress and errors on stderr, the paths on stdout.
    ``more``: the program's own commands, by name (each prints and exits as it says)."""
    parser = argparse.ArgumentParser(description=description)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("build", help=f"build {what} once into the cache; print its path")
    commands.add_parser("crds", help=f"print the paths of {what}'s CRD YAMLs")
    for name, command in (more or {}).items():
        commands.add_parser(name, help=command.help)
    args = parser.parse_args(argv)
    if more and args.command in more:
        return more[args.command].run()
    try:
        with contextlib.redirect_stdout(sys.stderr):
            paths = [binary()] if args.command == "build" else crd_files()
    except (cluster.ClusterError, subprocess.CalledProcessError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    for path in paths:
        print(path)
    return 0

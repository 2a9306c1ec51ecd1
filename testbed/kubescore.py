#!/usr/bin/env python3
"""kube-score, built from its Go module, over what every overlay in deploy/overlays installs.

    python -m testbed.kubescore build   # build it once into the cache; print its path
    python -m testbed.kubescore check   # render each overlay, score it; exit 0 clean, 1 findings, 2 not run

kube-score (`github.com/zegl/kube-score/cmd/kube-score`) checks Kubernetes objects against
practices of security and reliability (security contexts, resources, probes, network policies,
disruption budgets, ...). It is installed with `go install` from the module the Go proxy serves,
once per version, into ~/.cache/trainer-operator/kube-score-<version>. (Issue 51 named
kube-linter; the module proxy here does not serve golang.stackrox.io/kube-linter.)

`check` renders each overlay with `kubectl kustomize` (the test bed's kubectl, built with the
cluster's binaries), scores the objects with the configuration deploy/kube-score.yaml and prints
each overlay's progress, the findings and a summary. The configuration turns on optional checks
and holds every exclusion, each with its reason; a finding no exclusion covers fails the check,
and so does an exclusion that covers nothing. A build under way elsewhere (``python -m
testbed.prepare``, another check) is waited for, not made twice.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from testbed import cluster, gomodule

VERSION = "v1.20.0"
MODULE = "github.com/zegl/kube-score"
BINARY = "kube-score"
REBUILD = "python -m testbed.kubescore build"
OVERLAYS = cluster.REPO / "deploy" / "overlays"
CONFIG = cluster.REPO / "deploy" / "kube-score.yaml"
GRADES = {1: "CRITICAL", 5: "WARNING"}  # kube-score's grades below OK (7 and 10 are OK)
FINDING_GRADE_AT_MOST = 5  # WARNING: a grade up to it is a finding
FIX = (
    "Fix the manifests (deploy/controllers, deploy/components, deploy/overlays); where a check does not "
    "apply, add an exclusion with its reason to deploy/kube-score.yaml."
)


def binary() -> Path:
    """kube-score, installed once into the cache (about a minute on 2 cores the first time)."""
    return gomodule.installed(
        f"kube-score {VERSION}",
        REBUILD,
        f"{MODULE}/cmd/kube-score@{VERSION}",
        cluster.CACHE_ROOT / f"kube-score-{VERSION}",
        BINARY,
        ldflags=f"-s -w -X main.version={VERSION}",
    )


# --- the configuration ---------------------------------------------------------------------------


class ConfigError(Exception):
    pass


@dataclass(frozen=True)
class Exclusion:
    """Findings of ``check`` that do not apply, and why: in ``overlays`` only (none: every
    overlay), and only those whose summary contains ``summary``."""

    check: str
    reason: str
    overlays: frozenset[str] = frozenset()
    summary: str = ""

    def covers(self, finding: Finding) -> bool:
        return (
            finding.check == self.check
            and (not self.overlays or finding.overlay in self.overlays)
            and self.summary in finding.summary
        )

    def label(self) -> str:
        where = f" in {', '.join(sorted(self.overlays))}" if self.overlays else ""
        about = f" ({self.summary!r})" if self.summary else ""
        return f"{self.check}{about}{where}"


@dataclass(frozen=True)
class Config:
    kubernetes_version: str
    optional_checks: tuple[str, ...]
    exclusions: tuple[Exclusion, ...]


EXCLUSION_KEYS = {"check", "reason", "overlays", "summary"}


def _exclusion(number: int, entry: object) -> Exclusion:
    if not isinstance(entry, dict) or not isinstance(entry.get("check"), str):
        raise ConfigError(f"exclusion {number} names no check: give it `check: <id>` (`kube-score list` shows them)")
    check = entry["check"]
    if unknown := set(entry) - EXCLUSION_KEYS:
        raise ConfigError(
            f"exclusion {number} ({check}) has unknown keys {sorted(unknown)}: use {sorted(EXCLUSION_KEYS)}"
        )
    reason = entry.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise ConfigError(f"exclusion {number} ({check}) gives no reason: say why the check does not apply here")
    overlays = entry.get("overlays", [])
    if not isinstance(overlays, list) or not all(isinstance(o, str) for o in overlays):
        raise ConfigError(f"exclusion {number} ({check}): `overlays` must be a list of overlay names")
    return Exclusion(check, reason.strip(), frozenset(overlays), str(entry.get("summary", "")))


def load_config(text: str) -> Config:
    """deploy/kube-score.yaml's content, checked: every exclusion names its check and its reason."""
    document = yaml.safe_load(text) or {}
    if not isinstance(document, dict):
        raise ConfigError("the configuration must be a mapping (kubernetesVersion, optionalChecks, exclusions)")
    version = str(document.get("kubernetesVersion", ""))
    if not re.fullmatch(r"v1\.\d+", version):
        raise ConfigError(f"kubernetesVersion {version!r} is not of the form v1.NN (kube-score's --kubernetes-version)")
    optional = document.get("optionalChecks") or []
    if not isinstance(optional, list) or not all(isinstance(c, str) for c in optional):
        raise ConfigError("optionalChecks must be a list of check ids")
    entries = document.get("exclusions") or []
    if not isinstance(entries, list):
        raise ConfigError("exclusions must be a list")
    exclusions = tuple(_exclusion(number, entry) for number, entry in enumerate(entries, start=1))
    return Config(version, tuple(optional), exclusions)


# --- findings ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Finding:
    overlay: str
    kind: str
    name: str  # namespace/name, or name for a cluster-wide object
    check: str
    grade: str  # CRITICAL or WARNING
    container: str  # the container the finding is about; empty for the whole object
    summary: str
    description: str

    def line(self) -> str:
        where = f" container {self.container}:" if self.container else ":"
        return f"{self.grade:8} {self.kind} {self.name} [{self.check}]{where} {self.summary}"


def _object_name(meta: dict[str, Any]) -> str:
    name = str(meta.get("name", "?"))
    return f"{meta['namespace']}/{name}" if meta.get("namespace") else name


def _check_findings(overlay: str, scored: dict[str, Any], test: dict[str, Any]) -> list[Finding]:
    kind = str(scored.get("type_meta", {}).get("kind", "?"))
    name = _object_name(scored.get("object_meta", {}))
    grade = GRADES.get(test["grade"], str(test["grade"]))
    check = test["check"]
    comments = test.get("comments") or [{"path": "", "summary": check["name"], "description": check["comment"]}]
    return [
        Finding(overlay, kind, name, check["id"], grade, c["path"], c["summary"], c["description"]) for c in comments
    ]


def findings(overlay: str, scored_objects: Iterable[dict[str, Any]]) -> list[Finding]:
    """The findings in kube-score's JSON (``--output-format json``, its version 2): one per comment of
    every check that ran and graded an object WARNING or worse."""
    return [
        finding
        for scored in scored_objects
        for test in scored.get("checks") or []
        if not test.get("skipped") and test["grade"] <= FINDING_GRADE_AT_MOST
        for finding in _check_findings(overlay, scored, test)
    ]


def excluded_by(exclusions: Sequence[Exclusion], finding: Finding) -> Exclusion | None:
    return next((e for e in exclusions if e.covers(finding)), None)


def unused(exclusions: Sequence[Exclusion], all_findings: Iterable[Finding]) -> list[Exclusion]:
    """The exclusions that cover none of ``all_findings`` (every overlay's, excluded or not)."""
    found = list(all_findings)
    return [e for e in exclusions if not any(e.covers(f) for f in found)]


@dataclass(frozen=True)
class OverlayResult:
    overlay: str
    rendered: int  # objects the overlay renders
    scored: int  # of them, those of kinds kube-score checks
    findings: tuple[Finding, ...]  # those no exclusion covers
    excluded: tuple[Finding, ...]


def result(overlay: str, rendered: int, scored_objects: Sequence[dict[str, Any]], config: Config) -> OverlayResult:
    every = findings(overlay, scored_objects)
    kept = tuple(f for f in every if excluded_by(config.exclusions, f) is None)
    dropped = tuple(f for f in every if excluded_by(config.exclusions, f) is not None)
    return OverlayResult(overlay, rendered, len(scored_objects), kept, dropped)


def progress_line(r: OverlayResult) -> str:
    return (
        f"overlay {r.overlay}: {r.rendered} objects, {r.scored} scored by kube-score: "
        f"{len(r.findings)} findings ({len(r.excluded)} excluded by deploy/kube-score.yaml)"
    )


def summary(results: Sequence[OverlayResult], stale: Sequence[Exclusion]) -> list[str]:
    """The closing lines: totals, the findings per check, the unused exclusions, what to do."""
    kept = [f for r in results for f in r.findings]
    excluded = sum(len(r.excluded) for r in results)
    lines = [
        f"kube-score {VERSION}: {len(results)} overlays, {sum(r.rendered for r in results)} objects "
        f"({sum(r.scored for r in results)} scored), {len(kept)} findings, {excluded} excluded"
    ]
    lines += [f"  {count:4} {check}" for check, count in sorted(Counter(f.check for f in kept).items())]
    lines += [f"unused exclusion {e.label()}: it covers no finding any more; remove it" for e in stale]
    if kept:
        lines.append(FIX)
    elif stale:
        lines.append("Remove the unused exclusions from deploy/kube-score.yaml.")
    return lines


def exit_status(results: Sequence[OverlayResult], stale: Sequence[Exclusion]) -> int:
    return 1 if stale or any(r.findings for r in results) else 0


# --- running it ----------------------------------------------------------------------------------


def kubectl() -> Path:
    """The test bed's kubectl; built with the cluster's binaries (or waited for) if missing."""
    found = cluster.bin_dir() / "kubectl"
    if found.exists():
        return found
    cluster.say("kubectl is not built yet: building the test bed's Kubernetes binaries (or waiting for that build)")
    return cluster.ensure_binaries() / "kubectl"


def render(kubectl_path: Path, overlay: Path) -> str:
    """What ``kubectl kustomize`` renders from ``overlay``: a YAML stream of its objects."""
    done = subprocess.run([str(kubectl_path), "kustomize", str(overlay)], capture_output=True, text=True)
    if done.returncode != 0:
        raise cluster.ClusterError(
            f"kubectl kustomize {overlay} failed: {done.stderr.strip()}\n"
            f"Fix the overlay (run `{kubectl_path} kustomize {overlay}` to see the error), then check again."
        )
    return done.stdout


def object_count(manifests: str) -> int:
    """The objects in a YAML stream (parsed by libyaml where PyYAML has it: the CRDs are large)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return sum(1 for doc in yaml.load_all(manifests, Loader=loader) if doc)


def score(kube_score: Path, config: Config, manifests: str) -> list[dict[str, Any]]:
    """kube-score's JSON for the objects in ``manifests`` (its exit status says only whether
    something is critical)."""
    argv = [str(kube_score), "score", "--output-format", "json", "--color", "never"]
    argv += ["--kubernetes-version", config.kubernetes_version, "--disable-ignore-checks-annotations"]
    argv += [flag for check in config.optional_checks for flag in ("--enable-optional-test", check)]
    done = subprocess.run([*argv, "-"], input=manifests, capture_output=True, text=True)
    failed = cluster.ClusterError(
        f"kube-score failed (exit {done.returncode}): {done.stderr.strip() or done.stdout.strip()[:2000]}\n"
        f"Check deploy/kube-score.yaml's kubernetesVersion and optionalChecks (`{kube_score} list` shows the checks)."
    )
    if done.returncode not in (0, 1):  # 1: something is critical
        raise failed
    try:
        scored = json.loads(done.stdout)
    except json.JSONDecodeError as err:
        raise failed from err
    return list(scored or [])  # null: nothing it checks


def overlays() -> list[Path]:
    return sorted(p for p in OVERLAYS.iterdir() if (p / "kustomization.yaml").is_file())


def checked(kube_score: Path, kubectl_path: Path, overlay: Path, config: Config) -> OverlayResult:
    """One overlay rendered and scored, its progress and findings printed."""
    cluster.say(f"overlay {overlay.name}: rendering with kubectl kustomize, then scoring")
    manifests = render(kubectl_path, overlay)
    done = result(overlay.name, object_count(manifests), score(kube_score, config, manifests), config)
    cluster.say(progress_line(done))
    print("".join(f"  {f.line()}\n      {f.description}\n" for f in done.findings), end="", flush=True)
    return done


def check() -> int:
    """Every overlay rendered and scored; the findings and a summary printed (see the module's doc)."""
    try:
        config = load_config(CONFIG.read_text())
    except (OSError, ConfigError, yaml.YAMLError) as err:
        print(f"error: {CONFIG}: {err}", file=sys.stderr)
        return 2
    try:
        kube_score, kubectl_path = binary(), kubectl()
        cluster.say(f"kube-score {VERSION}: {kube_score}; overlays rendered with {kubectl_path}")
        results = [checked(kube_score, kubectl_path, overlay, config) for overlay in overlays()]
    except (cluster.ClusterError, OSError) as err:
        print(f"error: the kube-score check could not run: {err}", file=sys.stderr)
        return 2
    except subprocess.CalledProcessError as err:
        print(
            f"error: building kubectl failed ({err}); its output is above. Fix that and check again.", file=sys.stderr
        )
        return 2
    stale = unused(config.exclusions, (f for r in results for f in (*r.findings, *r.excluded)))
    print("\n".join(summary(results, stale)))
    return exit_status(results, stale)


def main(argv: list[str] | None = None) -> int:
    description = __doc__.splitlines()[0] if __doc__ else ""
    more = {"check": gomodule.Command("render every overlay and score it with deploy/kube-score.yaml", check)}
    return gomodule.main(argv, description, "kube-score", binary, lambda: [], more)


if __name__ == "__main__":
    sys.exit(main())

"""The lint tier's kube-score check (testbed/kubescore.py): kube-score's JSON read into findings,
the exclusions of deploy/kube-score.yaml applied (and refused without a reason), the summary and
the exit status."""

from __future__ import annotations

import re
from typing import Any

import pytest

from testbed import kubescore, prepare
from testbed.kubescore import Config, ConfigError, Exclusion, Finding

DEPLOYMENT = {"kind": "Deployment", "apiVersion": "apps/v1"}


def _test(check: str, grade: int, comments: list[dict[str, str]], skipped: bool = False) -> dict[str, Any]:
    return {
        "check": {"name": check.title(), "id": check, "target_type": "Pod", "comment": f"about {check}"},
        "grade": grade,
        "skipped": skipped,
        "comments": comments,
    }


def _scored(name: str, *tests: dict[str, Any], namespace: str = "ops") -> dict[str, Any]:
    meta = {"name": name, "namespace": namespace} if namespace else {"name": name}
    return {"object_name": name, "type_meta": DEPLOYMENT, "object_meta": meta, "checks": list(tests)}


CPU = {"path": "controller", "summary": "CPU limit is not set", "description": "Set resources.limits.cpu"}
MEMORY = {"path": "controller", "summary": "Memory limit is not set", "description": "Set resources.limits.memory"}
FEW = {"path": "", "summary": "Deployment few replicas", "description": "Run two"}


def _finding(
    overlay: str = "dev", check: str = "container-resources", summary: str = "CPU limit is not set"
) -> Finding:
    return Finding(overlay, "Deployment", "ops/a", check, "CRITICAL", "controller", summary, "")


def test_each_comment_of_a_check_graded_warning_or_worse_is_a_finding() -> None:
    scored = [
        _scored(
            "a",
            _test("container-resources", 1, [CPU, MEMORY]),
            _test("deployment-replicas", 5, [FEW]),
            _test("pod-probes", 7, [{"path": "", "summary": "almost", "description": ""}]),
            _test("container-image-tag", 10, []),
            _test("container-seccomp-profile", 1, [CPU], skipped=True),
        )
    ]
    found = kubescore.findings("dev", scored)
    assert [(f.check, f.grade, f.container, f.summary) for f in found] == [
        ("container-resources", "CRITICAL", "controller", "CPU limit is not set"),
        ("container-resources", "CRITICAL", "controller", "Memory limit is not set"),
        ("deployment-replicas", "WARNING", "", "Deployment few replicas"),
    ]
    assert {(f.overlay, f.kind, f.name) for f in found} == {("dev", "Deployment", "ops/a")}


def test_a_failed_check_without_comments_is_one_finding_named_by_the_check() -> None:
    (found,) = kubescore.findings("minimal", [_scored("b", _test("stable-version", 1, []), namespace="")])
    assert (found.name, found.summary, found.description) == ("b", "Stable-Version", "about stable-version")
    assert found.line() == "CRITICAL Deployment b [stable-version]: Stable-Version"


def test_kube_score_printing_null_for_an_overlay_with_nothing_it_checks_gives_no_findings() -> None:
    assert kubescore.findings("local", []) == []


@pytest.mark.parametrize(
    ("exclusion", "covered"),
    [
        (Exclusion("container-resources", "why"), True),
        (Exclusion("container-resources", "why", summary="CPU limit"), True),
        (Exclusion("container-resources", "why", summary="Memory limit"), False),
        (Exclusion("container-resources", "why", overlays=frozenset({"dev", "minimal"})), True),
        (Exclusion("container-resources", "why", overlays=frozenset({"production"})), False),
        (Exclusion("deployment-replicas", "why"), False),
    ],
)
def test_an_exclusion_covers_its_check_in_its_overlays_with_its_summary(exclusion: Exclusion, covered: bool) -> None:
    assert exclusion.covers(_finding()) is covered


def test_a_result_keeps_the_findings_no_exclusion_covers_and_counts_the_rest() -> None:
    config = Config("v1.34", (), (Exclusion("container-resources", "throttling", summary="CPU limit"),))
    scored = [_scored("a", _test("container-resources", 1, [CPU, MEMORY]))]
    result = kubescore.result("dev", 12, scored, config)
    assert [f.summary for f in result.findings] == ["Memory limit is not set"]
    assert [f.summary for f in result.excluded] == ["CPU limit is not set"]
    assert kubescore.progress_line(result) == (
        "overlay dev: 12 objects, 1 scored by kube-score: 1 findings (1 excluded by deploy/kube-score.yaml)"
    )


def test_an_exclusion_that_covers_nothing_any_more_is_reported_and_fails_the_check() -> None:
    used = Exclusion("container-resources", "why")
    stale = Exclusion("deployment-replicas", "why", overlays=frozenset({"dev"}))
    assert kubescore.unused(
        [used, stale], [_finding(), _finding(overlay="production", check="deployment-replicas")]
    ) == [stale]
    clean = kubescore.OverlayResult("dev", 10, 2, (), (_finding(),))
    lines = kubescore.summary([clean], [stale])
    assert "unused exclusion deployment-replicas in dev: it covers no finding any more; remove it" in lines
    assert lines[-1] == "Remove the unused exclusions from deploy/kube-score.yaml."
    assert kubescore.exit_status([clean], [stale]) == 1


def test_the_summary_totals_the_overlays_and_counts_findings_per_check() -> None:
    results = [
        kubescore.OverlayResult("dev", 100, 20, (_finding(), _finding(check="pod-networkpolicy")), (_finding(),)),
        kubescore.OverlayResult("minimal", 50, 3, (_finding(overlay="minimal"),), ()),
    ]
    lines = kubescore.summary(results, [])
    assert lines[0] == f"kube-score {kubescore.VERSION}: 2 overlays, 150 objects (23 scored), 3 findings, 1 excluded"
    assert lines[1:3] == ["     2 container-resources", "     1 pod-networkpolicy"]
    assert lines[-1] == kubescore.FIX
    assert kubescore.exit_status(results, []) == 1


def test_clean_overlays_pass() -> None:
    results = [kubescore.OverlayResult("dev", 100, 20, (), (_finding(),))]
    assert kubescore.summary(results, []) == [
        f"kube-score {kubescore.VERSION}: 1 overlays, 100 objects (20 scored), 0 findings, 1 excluded"
    ]
    assert kubescore.exit_status(results, []) == 0


CONFIG = """
kubernetesVersion: v1.34
optionalChecks: [container-seccomp-profile]
exclusions:
  - check: container-resources
    summary: CPU limit is not set
    overlays: [dev]
    reason: throttling
"""


def test_the_configuration_is_read_with_its_exclusions() -> None:
    config = kubescore.load_config(CONFIG)
    assert config == Config(
        "v1.34",
        ("container-seccomp-profile",),
        (Exclusion("container-resources", "throttling", frozenset({"dev"}), "CPU limit is not set"),),
    )


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (CONFIG.replace("    reason: throttling\n", ""), "gives no reason"),
        (CONFIG.replace("reason: throttling", "reason: '  '"), "gives no reason"),
        (CONFIG.replace("- check: container-resources", "- name: container-resources"), "names no check"),
        (CONFIG.replace("overlays: [dev]", "overlay: [dev]"), "unknown keys ['overlay']"),
        (CONFIG.replace("overlays: [dev]", "overlays: dev"), "must be a list of overlay names"),
        (CONFIG.replace("v1.34", "1.34"), "not of the form v1.NN"),
        ("- a list", "must be a mapping"),
    ],
)
def test_a_configuration_that_does_not_say_what_it_needs_is_refused(text: str, says: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(says)):
        kubescore.load_config(text)


def test_the_committed_configuration_gives_every_exclusion_a_reason_and_names_real_overlays() -> None:
    config = kubescore.load_config(kubescore.CONFIG.read_text())
    assert config.exclusions
    overlays = {path.name for path in kubescore.overlays()}
    assert {"dev", "minimal", "cert-manager", "production", "local"} <= overlays
    for exclusion in config.exclusions:
        assert len(exclusion.reason) > 40, exclusion  # a reason, not a placeholder
        assert exclusion.overlays <= overlays, exclusion


def test_check_is_a_command_and_kube_score_is_built_in_the_background_right_after_kubernetes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(kubescore, "check", lambda: 7)
    assert kubescore.main(["check"]) == 7
    names = [step.name for step in prepare.STEPS]
    assert names[:2] == ["kubernetes", "kube-score"]  # lint renders with kubectl, then scores

"""The release's Helm chart (hack/release.py) with Helm built from its Go module, on the bare
cluster: installed, upgraded to another image (every place the image is named follows),
uninstalled leaving nothing of the operator behind, and installed again with the cluster still
admitting pods (an admission policy's lost parameter once refused every pod after a reinstall:
tests/unit/test_admission_policy_params.py)."""

import json
import subprocess
from pathlib import Path

from hack import release
from testbed import helm
from tests.quickstart.conftest import cluster_wide, on_the_node


def run(env: dict[str, str], *argv: str) -> str:
    print("$ helm " + " ".join(argv), flush=True)
    done = subprocess.run([str(helm.binary()), *argv], env=env, capture_output=True, text=True)
    print(done.stdout + done.stderr, flush=True)
    assert done.returncode == 0, f"helm {argv[0]} failed: {done.stderr.strip()}"
    return done.stdout


def images_named(env: dict[str, str]) -> set[str]:
    """Every image the operator's Deployments and ConfigMaps name."""
    listed = subprocess.run(
        ["kubectl", "get", "deployments,configmaps", "-n", "trainer-operator-system", "-o", "json"],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    named = set()
    for obj in json.loads(listed.stdout)["items"]:
        if obj["kind"] == "ConfigMap":
            named |= {obj["data"]["image"]} if "image" in obj.get("data", {}) else set()
        else:
            named |= {c["image"] for c in obj["spec"]["template"]["spec"]["containers"]}
    return named


def test_the_chart_installs_upgrades_and_uninstalls(
    bare_cluster: dict[str, str], release_image: str, version: str, tmp_path: Path
) -> None:
    env = bare_cluster
    chart = release.chart_archive(
        release.chart(release.render("dev", release_image), release_image, version), tmp_path, version
    )
    before = cluster_wide(env)
    run(env, "install", "trainer-operator", str(chart), "--wait", "--timeout", "5m")
    assert images_named(env) == {release_image}
    upgraded = on_the_node(f"{version}-upgraded")
    run(
        env,
        "upgrade",
        "trainer-operator",
        str(chart),
        "--set",
        f"image.tag={version}-upgraded",
        "--wait",
        "--timeout",
        "5m",
    )
    assert images_named(env) == {upgraded}
    run(env, "uninstall", "trainer-operator", "--wait", "--timeout", "5m")
    assert cluster_wide(env) == before  # nothing of the operator left
    run(env, "install", "trainer-operator", str(chart), "--wait", "--timeout", "5m")
    assert pod_admitted(env), "after a reinstall the API server refuses pods; see the message above"
    run(env, "uninstall", "trainer-operator", "--wait", "--timeout", "5m")


def pod_admitted(env: dict[str, str]) -> bool:
    """Whether the API server admits a plain pod (a dry run: every admission step, nothing stored)."""
    argv = ["kubectl", "run", "probe", "-n", "default", "--image=busybox:1.36", "--restart=Never", "--dry-run=server"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    print(done.stdout + done.stderr, flush=True)
    return done.returncode == 0
